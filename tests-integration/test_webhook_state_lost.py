"""The webhook receiver stops on lost state, as the poller does: exit 1, one line naming
the cause, `daemon.state_lost` in the event log. Real `gh-webhook start` processes, a
real state directory deleted under one, a real PostgreSQL database dropped under
another (a private cluster)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from inbox_rig import Daemon, Rig, fleet_host

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

HEARTBEAT_SECONDS = 15.0  # gh-webhook's heartbeat interval (commands/webhook.py)
# A lost state is seen at the next beat; the stop itself then takes a moment.
STOP_BOUND = HEARTBEAT_SECONDS + 15.0


def _exit_within(daemon: Daemon, seconds: float) -> tuple[int | None, float]:
    assert daemon.proc is not None
    start = time.monotonic()
    code = wait_for(lambda: daemon.proc.poll(), timeout=seconds, interval=0.2)
    return code, time.monotonic() - start


def test_a_receiver_whose_state_directory_goes_exits_with_state_lost(
    tmp_path: Path, tmux_socket: str
) -> None:
    rig = Rig(tmp_path, tmux_socket)
    receiver = Daemon(rig, "webhook", ["gh-webhook", "start", "--port", "0"])
    rig.daemons.append(receiver)
    try:
        receiver.start()
        shutil.rmtree(rig.state)
        code, took = _exit_within(receiver, STOP_BOUND)
        assert code == 1, receiver.log()
        assert "was deleted under the running daemon" in receiver.log()
        (lost,) = rig.events("daemon.state_lost")
        assert lost["source"] == "webhook"
        assert str(rig.state) in lost["detail"]["problem"]
        assert "Traceback" not in receiver.log()
        print(f"receiver stopped {took:.1f}s after its state directory was deleted")
    finally:
        rig.close()


def test_a_receiver_whose_database_is_dropped_names_the_cause_and_exits(
    tmp_path: Path, tmux_socket: str, pg_cluster
) -> None:
    import psycopg

    url = pg_cluster.create_database()
    rig = fleet_host(tmp_path / "r", tmux_socket, "host-a", pg_cluster, url, capacity=2)
    receiver = rig.webhook()
    try:
        receiver.start()
        dbname = url.rsplit("/", 1)[-1].split("?")[0]
        with psycopg.connect(
            pg_cluster.url(), password=pg_cluster.password, autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
        code, took = _exit_within(receiver, STOP_BOUND)
        log = receiver.log()
        assert code == 1, log
        assert "the state store no longer exists" in log
        assert f'database "{dbname}" does not exist' in log  # the cause, named
        (lost,) = rig.events("daemon.state_lost")
        assert lost["source"] == "webhook"
        assert "Traceback" not in log
        print(f"receiver stopped {took:.1f}s after its database was dropped")
    finally:
        rig.close()
