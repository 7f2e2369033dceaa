"""The receiver's heartbeat watch: a busy store is logged with its cause and waited
out; a store gone, a ground lost, or a store silent past the stale window is a lost
state (the receiver then stops). The clock is a counter the test moves."""

from __future__ import annotations

import logging

import pytest

from loop_cli.webhook.statewatch import StateWatch
from loop_dispatch.errors import StoreError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _failing(exc: Exception):
    def write() -> None:
        raise exc

    return write


def test_a_failed_beat_is_logged_with_its_cause_and_waited_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    error = StoreError("postgresql://h/db", "cannot connect: Connection refused")
    watch = StateWatch(_failing(error), ground=None, stale_after=45.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="loop_cli.webhook"):
        assert watch.beat() is None
    assert watch.failing
    (line,) = caplog.messages
    assert line == (
        "webhook heartbeat not written: StoreError: state store postgresql://h/db: "
        "cannot connect: Connection refused"
    )
    clock.now += 45.0
    assert watch.beat() is None  # within the stale window: still waiting
    clock.now += 1.0
    problem = watch.beat()
    assert problem is not None
    assert problem.startswith("the state store has not taken a heartbeat for 46s")
    assert "Connection refused" in problem


def test_a_beat_that_succeeds_again_resets_the_window() -> None:
    clock = Clock()
    fail = [True]

    def write() -> None:
        if fail[0]:
            raise OSError("busy")

    watch = StateWatch(write, ground=None, stale_after=45.0, clock=clock)
    assert watch.beat() is None
    clock.now += 40.0
    fail[0] = False
    assert watch.beat() is None
    assert not watch.failing
    fail[0] = True
    clock.now += 40.0
    assert watch.beat() is None  # a new window starts here


def test_a_store_that_no_longer_exists_is_lost_at_once() -> None:
    error = StoreError("postgresql://h/db", 'database "db" does not exist', gone=True)
    watch = StateWatch(_failing(error), ground=None, stale_after=45.0, clock=Clock())
    problem = watch.beat()
    assert problem is not None
    assert problem.startswith("the state store no longer exists (StoreError: ")


def test_a_lost_ground_is_lost_before_any_write() -> None:
    writes: list[int] = []
    watch = StateWatch(
        lambda: writes.append(1),
        ground=lambda: "/s was deleted under the running daemon",
        stale_after=45.0,
        clock=Clock(),
    )
    assert watch.beat() == "/s was deleted under the running daemon"
    assert writes == []
