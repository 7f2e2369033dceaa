"""A private, throwaway PostgreSQL cluster for tests and benchmarks.

`initdb` refuses to run as root, so as root the server binaries run as the `postgres`
user (`runuser -u postgres --`), in a directory it owns, listening on loopback on a
private port and on a socket in that directory. Password authentication over TCP (a
superuser password given to initdb), so the store's password path is exercised.
`stop()` ends the server with `pg_ctl -m fast stop` and removes the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cluster", "ClusterUnavailable", "find_binaries", "start_cluster"]

SUPERUSER = "postgres"


class ClusterUnavailable(Exception):
    """What is missing to start a private cluster (one line, for a skip message)."""


def find_binaries() -> Path:
    """The directory holding initdb and pg_ctl (PATH first, then Debian's layout)."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(bindir) / "initdb").exists() and (Path(bindir) / "pg_ctl").exists():
            return Path(bindir)
    raise ClusterUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's "
        "postgresql package (.ci/run does)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    directory: Path
    port: int
    password: str
    bindir: Path
    _as_postgres: list[str] = field(default_factory=list)

    def url(self, dbname: str = "postgres") -> str:
        """A store.url for `dbname` (its password comes separately, as in production)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, prefix: str = "loop") -> str:
        """A fresh empty database; returns its store.url."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), password=self.password, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            [
                *self._as_postgres,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.directory / "data"),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(self.directory, ignore_errors=True)


def start_cluster(*, durable: bool = False) -> Cluster:
    """initdb + pg_ctl start in a fresh temporary directory; raises ClusterUnavailable.

    Tests run without fsync (speed); `durable` keeps PostgreSQL's defaults (benchmarks).
    """
    bindir = find_binaries()
    as_postgres: list[str] = []
    uid = gid = None
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        try:
            entry = pwd.getpwnam(SUPERUSER)
        except KeyError:
            raise ClusterUnavailable(
                "running as root needs a 'postgres' user to run initdb (install postgresql)"
            ) from None
        if runuser is None:
            raise ClusterUnavailable("running as root needs runuser to run initdb as postgres")
        as_postgres = [runuser, "-u", SUPERUSER, "--"]
        uid, gid = entry.pw_uid, entry.pw_gid
    directory = Path(tempfile.mkdtemp(prefix="loop-pg-"))
    password = uuid.uuid4().hex
    pwfile = directory / "pw"
    pwfile.write_text(password + "\n")
    if uid is not None and gid is not None:
        os.chown(directory, uid, gid)
        os.chown(pwfile, uid, gid)
    port = _free_port()
    data = directory / "data"
    cluster = Cluster(directory, port, password, bindir, as_postgres)
    init = subprocess.run(
        [
            *as_postgres,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if init.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise ClusterUnavailable(f"initdb failed: {' '.join(init.stderr.split())[:300]}")
    options = (
        f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 "
        "-c max_connections=200 -c shared_buffers=32MB"
    )
    if not durable:
        options += " -c fsync=off"
    start = subprocess.run(
        [
            *as_postgres,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(directory / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    if start.returncode != 0:
        log = ""
        with_log = directory / "server.log"
        if with_log.exists():
            log = " ".join(with_log.read_text(errors="replace").split())[-300:]
        cluster.stop()
        raise ClusterUnavailable(f"pg_ctl start failed: {log or start.stderr.strip()[:300]}")
    return cluster
