"""`store migrate` never loses what was acknowledged.

A real `gh-webhook start --route` receiver accepts signed comments into a state
directory's SQLite store while an operator runs `store migrate` into a private
PostgreSQL cluster: refused (exit 1, one line naming the receiver) while it runs; once
it is stopped, the migrate copies and checks the copy, and every comment the receiver
answered 202 for is in PostgreSQL's inbox. A database holding another application's
tables is refused in one line (exit 2), with nothing created in it.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from inbox_rig import Rig, comment_body, marker, new_guid, post

pytestmark = [pytest.mark.tmux, pytest.mark.slow]


def _inbox_comments(url: str, password: str) -> set[int]:
    """The comment ids of the inbox rows (a settled row keeps its delivery id only)."""
    from loop_dispatch.store import Store

    with Store.open(url=url, password=password) as store:
        rows = store.query("SELECT delivery_id FROM inbox")
    return {int(m.group(1)) for (d,) in rows if (m := re.fullmatch(r"comment:.*:(\d+)", d))}


def test_migrate_is_refused_while_a_receiver_runs_and_then_loses_nothing(
    tmp_path: Path, tmux_socket: str, pg_cluster
) -> None:
    rig = Rig(tmp_path, tmux_socket, tracker="github")
    rig.env["MIGRATE_PG_PASSWORD"] = pg_cluster.password
    url = pg_cluster.create_database()
    receiver = rig.webhook()
    receiver.start()
    acked: list[int] = []  # comment ids answered 202
    stop = threading.Event()

    def send() -> None:
        n = 0
        while not stop.is_set():
            body = comment_body(1 + n % 3, 900_000 + n, marker(1 + n % 3, n))
            try:
                answer = post(receiver.url, body, new_guid())
            except Exception:
                return  # the receiver stopped
            if answer.status_code == 202:
                acked.append(900_000 + n)
            n += 1

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        while len(acked) < 10:
            stop.wait(0.1)
        migrate = ("store", "migrate", "--to", url, "--password-env", "MIGRATE_PG_PASSWORD")
        refused = rig.cli(*migrate, check=False)
        lines = refused.stderr.strip().splitlines()
        print(f"migrate beside a live receiver: exit {refused.returncode}: {lines}")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert len(lines) == 1, lines
        assert "webhook" in lines[0], lines
        assert "Traceback" not in refused.stderr
        stop.set()
        sender.join(timeout=30)
        receiver.stop()
        done = rig.cli(*migrate, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        moved = _inbox_comments(url, pg_cluster.password)
        lost = [c for c in acked if c not in moved]
        print(f"acknowledged {len(acked)}, in PostgreSQL {len(set(acked) & moved)}, lost {lost}")
        assert acked
        assert lost == []
    finally:
        stop.set()
        rig.close()


def test_migrate_into_another_applications_database_is_refused_in_one_line(
    tmp_path: Path, tmux_socket: str, pg_cluster
) -> None:
    import psycopg

    rig = Rig(tmp_path, tmux_socket)
    rig.env["MIGRATE_PG_PASSWORD"] = pg_cluster.password
    rig.cli("item", "open", "something to migrate")
    url = pg_cluster.create_database()
    with psycopg.connect(url, password=pg_cluster.password, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
        conn.execute("CREATE TABLE sessions (id int PRIMARY KEY, who text)")
    done = rig.cli(
        "store", "migrate", "--to", url, "--password-env", "MIGRATE_PG_PASSWORD", check=False
    )
    lines = done.stderr.strip().splitlines()
    print(f"migrate into another application's database: exit {done.returncode}: {lines}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1, lines
    assert re.search(r"another application's tables \(customers, sessions\)", lines[0]), lines
    with psycopg.connect(url, password=pg_cluster.password) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = {r[0] for r in rows}
    assert tables == {"customers", "sessions"}  # nothing of the-loop's was created there
