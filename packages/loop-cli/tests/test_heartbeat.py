"""Heartbeats: what makes `status` say a service runs, per (service, host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from loop_cli import heartbeat
from loop_dispatch.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        s = Store.open(tmp_path)
    else:
        cluster = request.getfixturevalue("cluster")
        s = Store.open(url=cluster.create_database(), password=cluster.password)
    yield s
    s.close()


def _set_record(store: Store, service: str, host: str, text: str) -> None:
    with store.transaction() as conn:
        conn.execute(
            "UPDATE loop_cli_heartbeats SET record = ? WHERE service = ? AND host = ?",
            (text, service, host),
        )


def test_running_stale_stopped_and_dead(store: Store) -> None:
    now = datetime.now(timezone.utc)
    assert heartbeat.read(store, "poller") is None
    heartbeat.beat(store, "poller", stale_after=30, started=now, detail={"x": 1}, host="h")
    hb = heartbeat.read(store, "poller")
    assert hb is not None
    assert hb.host == "h"
    assert hb.running()
    assert hb.detail == {"x": 1}
    assert not hb.running(now + timedelta(seconds=31))  # stale
    heartbeat.stopped(store, "poller", started=now, host="h")
    assert not heartbeat.read(store, "poller").running()

    # A daemon pid that has exited is not running, however fresh its beat.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    heartbeat.beat(store, "webhook", stale_after=30, started=now, host="h")
    raw = store.query("SELECT record FROM loop_cli_heartbeats WHERE service = 'webhook'")[0][0]
    _set_record(store, "webhook", "h", raw.replace(f'"pid": {os.getpid()}', f'"pid": {child.pid}'))
    assert heartbeat.read(store, "webhook").pid == child.pid
    assert not heartbeat.read(store, "webhook").running()

    # A cron-driven --once run has exited by design: freshness alone counts.
    heartbeat.beat(store, "poller", stale_after=30, started=now, state="once", host="h")
    assert heartbeat.read(store, "poller").running()

    _set_record(store, "poller", "h", "{not json")
    assert heartbeat.read(store, "poller") is None


def test_two_hosts_keep_a_row_each_instead_of_overwriting_one(store: Store) -> None:
    now = datetime.now(timezone.utc)
    heartbeat.beat(store, "poller", stale_after=30, started=now, host="host-a")
    heartbeat.beat(store, "poller", stale_after=30, started=now, host="host-b", detail={"b": 1})
    heartbeat.stopped(store, "poller", started=now, host="host-a")
    a = heartbeat.read(store, "poller", "host-a")
    b = heartbeat.read(store, "poller", "host-b")
    assert (a.state, a.host) == ("stopped", "host-a")
    assert (b.state, b.host, b.detail) == ("running", "host-b", {"b": 1})
    assert b.running()
    assert heartbeat.read(store, "poller", "host-c") is None
    assert heartbeat.read(store, "poller").host == "host-a"  # the latest, whichever host
    every = heartbeat.read_all(store)
    assert sorted(every) == ["host-a", "host-b"]
    assert every["host-b"]["poller"].state == "running"
    assert every["host-a"]["poller"].state == "stopped"


def test_the_migration_moves_the_old_meta_rows(tmp_path: Path) -> None:
    """A store written before per-host heartbeats: its `service.*` meta rows move into
    the table (host name unknown: ''), and are read as before."""
    now = datetime.now(timezone.utc)
    old = {
        "state": "running",
        "pid": os.getpid(),
        "host": "machine-1",
        "started": now.isoformat(),
        "beat": now.isoformat(),
        "staleAfter": 60,
        "detail": {"mode": "daemon"},
    }
    with Store.open(tmp_path) as store:
        store.meta.set("service.poller", json.dumps(old))
        store.meta.set("unrelated", "kept")
    with Store.open(tmp_path) as store:
        hb = heartbeat.read(store, "poller")
        assert hb is not None
        assert (hb.state, hb.machine, hb.host, hb.detail) == (
            "running",
            "machine-1",
            "",
            {"mode": "daemon"},
        )
        assert store.meta.get("service.poller") is None
        assert store.meta.get("unrelated") == "kept"
        assert heartbeat.read_all(store) == {}  # no host name to show it under
