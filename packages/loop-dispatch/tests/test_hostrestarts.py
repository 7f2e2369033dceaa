"""Restart requests between hosts, on both backends: written, taken once by their own
host's worker, finished with counts only, expired when too old, left visible when not
taken."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from loop_dispatch.hostrestarts import RestartRequests, summary
from loop_dispatch.hosts import HOSTS_MIGRATIONS, HOSTS_NAMESPACE
from loop_dispatch.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_requests_are_taken_by_their_own_host_once_and_finished_with_counts(
    store: Store,
) -> None:
    requests = RestartRequests(store)
    made = requests.request(["host-a", "host-b"], by="ctl", force=True)
    assert [(r.host, r.state, r.force, r.dry_run) for r in made] == [
        ("host-a", "pending", True, False),
        ("host-b", "pending", True, False),
    ]
    assert made[0].id != made[1].id
    assert store.schema_version(HOSTS_NAMESPACE) == len(HOSTS_MIGRATIONS)
    assert requests.take("host-c", "host-c/1/1") == []
    taken = requests.take("host-a", "host-a/1/1")
    assert [r.id for r in taken] == [made[0].id]
    assert taken[0].state == "taken"
    assert taken[0].taken_by == "host-a/1/1"
    assert requests.take("host-a", "host-a/2/2") == []  # never taken twice
    requests.finish(taken[0].id, summary({"restarted": 2, "up-to-date": 1}, exit_code=0))
    a, b = requests.get([r.id for r in made])
    assert a.state == "done"
    assert a.result == {"counts": {"restarted": 2, "up-to-date": 1}, "exitCode": 0}
    assert b.state == "pending"  # host-b never answered: its request stays visible
    assert [r.id for r in requests.open()] == [b.id]
    assert [r.id for r in requests.open("host-a")] == []


def test_a_request_no_worker_took_in_time_is_closed_as_expired(store: Store) -> None:
    now = [datetime.now(timezone.utc)]
    requests = RestartRequests(store, clock=lambda: now[0], max_age=60)
    old = requests.request(["host-a"], by="ctl")[0]
    now[0] += timedelta(seconds=61)
    fresh = requests.request(["host-a"], by="ctl", dry_run=True)[0]
    taken = requests.take("host-a", "host-a/1/1")
    assert [r.id for r in taken] == [fresh.id]
    assert taken[0].dry_run
    expired = requests.get([old.id])[0]
    assert expired.state == "done"
    assert expired.taken_at is None
    assert expired.result["exitCode"] == 1
    assert "expired" in expired.result["error"]


def test_the_result_keeps_counts_and_a_one_line_error_only() -> None:
    kept = summary({"failed": 1}, exit_code=2, error="no env file\nconfigured (key env.file)")
    assert kept == {
        "counts": {"failed": 1},
        "exitCode": 2,
        "error": "no env file configured (key env.file)",
    }


def test_a_request_carries_its_rollout_options_to_the_host(store: Store) -> None:
    """Issue 25: `--all-hosts --wait-idle 30 --busy restart --max-parallel 2` reaches each
    host's worker as asked; a request written without options reads as none."""
    requests = RestartRequests(store)
    options = {"waitIdle": 30.0, "busy": "restart", "maxParallel": 2}
    (asked,) = requests.request(["host-a"], by="ctl", options=options)
    (plain,) = requests.request(["host-b"], by="ctl")
    (taken,) = requests.take("host-a", "host-a/1/1")
    assert taken.options == options
    assert taken.as_dict()["options"] == options
    assert requests.get([plain.id])[0].options == {}
    assert asked.options == options
