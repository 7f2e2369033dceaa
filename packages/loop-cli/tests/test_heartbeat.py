"""Heartbeats: what makes `status` say a service runs."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

from loop_cli import heartbeat
from loop_dispatch.store import Store


def test_running_stale_stopped_and_dead(tmp_path) -> None:
    store = Store.open(tmp_path)
    now = datetime.now(timezone.utc)
    assert heartbeat.read(store, "poller") is None
    heartbeat.beat(store, "poller", stale_after=30, started=now, detail={"x": 1})
    hb = heartbeat.read(store, "poller")
    assert hb is not None
    assert hb.running()
    assert hb.detail == {"x": 1}
    assert not hb.running(now + timedelta(seconds=31))  # stale
    heartbeat.stopped(store, "poller", started=now)
    assert not heartbeat.read(store, "poller").running()

    # A daemon pid that has exited is not running, however fresh its beat.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    heartbeat.beat(store, "webhook", stale_after=30, started=now)
    store.meta.set(
        "service.webhook",
        store.meta.get("service.webhook").replace(
            f'"pid": {__import__("os").getpid()}', f'"pid": {child.pid}'
        ),
    )
    assert heartbeat.read(store, "webhook").pid == child.pid
    assert not heartbeat.read(store, "webhook").running()

    # A cron-driven --once run has exited by design: freshness alone counts.
    heartbeat.beat(store, "poller", stale_after=30, started=now, state="once")
    assert heartbeat.read(store, "poller").running()

    store.meta.set("service.poller", "{not json")
    assert heartbeat.read(store, "poller") is None
    store.close()
