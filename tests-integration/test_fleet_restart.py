"""`sessions restart --all-hosts` on a fleet: each host restarts its own sessions,
asked through the shared store (no ssh), with real daemons, tmux and PostgreSQL.

Two hosts are `poll start` workers with their own host.name, private tmux server and
fake-harness record, on one private PostgreSQL cluster; a third CLI invocation (host
name `ctl`, no worker) asks. Then one host is stopped: it is reported EXPIRED (exit 1),
its request stays queued, and the worker started again carries it out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from inbox_rig import fleet_host, marker, pane_pids

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

PER_HOST = 2


def _placed(rig) -> dict[str, str]:
    import json

    done = rig.cli("sessions", "list", "--format", "json", check=False)
    rows = json.loads(done.stdout or "[]") if done.returncode == 0 else []
    return {r["ref"]: r["host"] for r in rows if r.get("host")}


def test_all_hosts_restart_goes_through_the_store_and_a_stopped_host_is_reported(
    tmp_path: Path, tmux_socket: str, extra_socket, pg_cluster
) -> None:
    url = pg_cluster.create_database()
    env_file = tmp_path / "app.env"
    env_file.write_text("API_TOKEN=first-value\n")
    sockets = {"host-a": tmux_socket, "host-b": extra_socket()}
    hosts = {
        name: fleet_host(
            tmp_path / name, sock, name, pg_cluster, url, capacity=PER_HOST, env_file=env_file
        )
        for name, sock in sockets.items()
    }
    ctl = fleet_host(
        tmp_path / "ctl", extra_socket(), "ctl", pg_cluster, url, capacity=1, env_file=env_file
    )
    rigs = [*hosts.values(), ctl]
    try:
        workers = {name: rig.poller() for name, rig in hosts.items()}
        for worker in workers.values():
            worker.start()
        refs = [ctl.cli("item", "open", f"restart {n}").stdout.strip() for n in range(4)]
        for ref in refs:
            number = int(ref.rsplit("#", 1)[1])
            ctl.cli("item", "comment", ref, f"hello {marker(number, 0)}", "--author", "alice")

        def all_live() -> dict[str, dict[str, int]] | None:
            pids = {name: pane_pids(sock) for name, sock in sockets.items()}
            ok = all(len(p) == PER_HOST for p in pids.values())
            return pids if ok and len(_placed(ctl)) == 4 else None

        before = wait_for(all_live, timeout=90, interval=0.5)
        assert before, (_placed(ctl), {n: w.logs() for n, w in workers.items()})

        asked = ctl.cli("sessions", "restart", "--all-hosts", "--force", "--wait", "60")
        out = asked.stdout
        print("\n" + out)
        assert asked.returncode == 0, out + asked.stderr
        assert "asked 2 host(s) to restart their sessions [force]" in out
        for name in hosts:
            assert f"host {name}: {PER_HOST} restarted (request #" in out, out
        assert "summary: 2 of 2 host(s) answered" in out
        assert "first-value" not in out + asked.stderr
        after = {name: pane_pids(sock) for name, sock in sockets.items()}
        for name in hosts:
            # the same sessions, each with a new harness process (relaunched in place)
            assert set(after[name]) == set(before[name])
            assert all(after[name][s] != before[name][s] for s in before[name]), (name, after)
            restarts = hosts[name].events("session.env_restart")
            assert {e["detail"]["tmux_name"] for e in restarts} == set(before[name])
            served = hosts[name].events("host.restart_request")
            assert [e["detail"]["counts"] for e in served] == [{"restarted": PER_HOST}]
        assert not ctl.events("session.env_restart")  # the asker restarted nothing itself

        # host-b stops: reported EXPIRED once its lease runs out (within the wait), exit 1;
        # its request stays queued.
        workers["host-b"].stop()
        asked = ctl.cli(
            "sessions", "restart", "--all-hosts", "--force", "--wait", "60", check=False
        )
        out = asked.stdout
        print(out)
        assert asked.returncode == 1, out + asked.stderr
        assert f"host host-a: {PER_HOST} restarted (request #" in out
        assert "host host-b: EXPIRED (its lease ran out): not restarted; request #" in out
        assert "stays queued" in out
        assert "summary: 1 of 2 host(s) answered" in out
        # Nothing restarted host-b's agents: its own fence keeper ended them when its
        # lease ran out (a stopped worker's agents never outlive its lease).
        assert len(hosts["host-b"].events("session.env_restart")) == PER_HOST
        assert pane_pids(sockets["host-b"]) == {}
        status = ctl.cli("status", check=False).stdout
        assert "host:      host-b: EXPIRED" in status, status
        # Back, host-b's worker takes the queued request and restarts its own sessions.
        workers["host-b"].start()
        assert wait_for(
            lambda: len(hosts["host-b"].events("host.restart_request")) == 2, timeout=60
        ), workers["host-b"].logs()
        served = hosts["host-b"].events("host.restart_request")
        print(f"host-b on its return: {served[-1]['detail']}")
        assert served[-1]["detail"]["exitCode"] == 0, served[-1]
    finally:
        for rig in rigs:
            rig.close()
