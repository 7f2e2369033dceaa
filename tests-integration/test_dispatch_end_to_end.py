"""loop-dispatch end to end: real tmux (private socket), the fake harness, a real SQLite
state file, the poll cycle. Requirement: seed 002 AC2, AC11, AC12 (AC6-AC10 are proved
against the modelled tmux in packages/loop-dispatch/tests)."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from integration_support import poll_and_drain

from loop_dispatch import (
    ClaudeCodeAdapter,
    Dispatcher,
    Event,
    EventKind,
    EventLog,
    PollBatch,
    Store,
    WorkItemRef,
    comment_delivery_id,
    frame,
)
from loop_dispatch.launch import LaunchSpec
from loop_dispatch.lock import item_lock
from loop_tmux import Tmux

pytestmark = pytest.mark.tmux

REF = WorkItemRef.parse("github:acme/widgets#146")
NAME = REF.tmux_name()


@dataclass
class CommentSource:
    """A tracker in memory: comments appended by the test, listed after the cursor."""

    name: str = "github"
    comments: list[Event] = field(default_factory=list)

    def add(self, body: str) -> Event:
        n = len(self.comments) + 1
        event = Event(
            delivery_id=comment_delivery_id("github", str(1000 + n)),
            work_item=REF,
            kind=EventKind.COMMENT,
            actor="alice",
            body=body,
            url=f"https://example.invalid/acme/widgets/issues/146#c{n}",
            created_at=datetime.now(timezone.utc),
            comment_id=str(1000 + n),
        )
        self.comments.append(event)
        return event

    def poll(self, cursor: str | None) -> PollBatch:
        start = int(cursor or 0)
        return PollBatch(self.comments[start:], str(len(self.comments)))


class World:
    def __init__(self, tmp_path: Path, socket: str, harness: Path, convo: Path) -> None:
        self.state_dir = tmp_path / "state"
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.convo = convo
        self.store = Store.open(self.state_dir)
        self.events = EventLog(self.state_dir / "events.jsonl")
        # Short timeouts: a stopped server must cost seconds, not minutes.
        self.tmux = Tmux(
            socket_name=socket, config_file="/dev/null", timeout=2.0, probe_timeout=1.0
        )
        self.dispatcher = Dispatcher(
            self.store,
            self.tmux,
            ClaudeCodeAdapter(binary=str(harness), checks=False),
            self.events,
            "1.0.0",
            cwd_for=lambda ref: self.work,
            lock_dir=self.state_dir / "locks",
            launcher=self._launch,
            survival_delay=1.5,
            lock_timeout=0.2,
        )
        self.source = CommentSource()
        # A bystander session keeps the server up when a test kills the item's session,
        # as other items' sessions do in a real fleet.
        assert self.tmux.spawn("bystander", ["sleep", "600"], str(self.work)).ok

    def _launch(self, record, argv):
        return LaunchSpec(list(argv), {"FAKE_HARNESS_DIR": str(self.convo)})

    def cycle(self, version: str = "1.0.0", **policy):
        return poll_and_drain(
            self.store, self.source, self.dispatcher, self.events, version=version, **policy
        )

    def conversation(self) -> list[dict]:
        cid = self.store.registry.get(REF).conversation_id
        path = self.convo / f"{cid}.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def records(self, kind: str) -> list[dict]:
        return [r for r in self.conversation() if r["event"] == kind]

    def wait(self, predicate, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            assert time.monotonic() < deadline, "condition not met in time"
            time.sleep(0.05)
        return value


@pytest.fixture
def world(tmp_path, tmux_socket, fake_harness, fake_harness_dir):
    w = World(tmp_path, tmux_socket, fake_harness, fake_harness_dir)
    yield w
    w.store.close()


def test_ac12_killed_session_resumes_recorded_conversation_under_same_name(world):
    """AC12: kill the tmux session; the next comment respawns loop-<slug> running
    `--resume <recorded id>`, and the registry keeps that id."""
    world.source.add("Please fix issue 146")
    assert world.cycle().processed == 1
    record = world.store.registry.get(REF)
    world.wait(lambda: world.records("start"))
    second = world.source.add("Second thought: add a test")
    assert world.cycle().processed == 1
    msgs = world.wait(lambda: world.records("message"))
    assert msgs[0]["text"] == frame(second)

    assert world.tmux.kill(NAME)
    third = world.source.add("Still there?")
    report = world.cycle()
    assert report.processed == 1
    assert world.tmux.probe(NAME).value == "live"
    after = world.store.registry.get(REF)
    assert after.conversation_id == record.conversation_id
    assert after.tmux_name == NAME
    starts = world.wait(lambda: len(world.records("start")) >= 2 and world.records("start"))
    assert starts[1]["mode"] == "resume"
    assert starts[1]["session_id"] == record.conversation_id
    assert starts[1]["prompt"] == frame(third)
    types = [r["type"] for r in world.events.read()]
    assert types.count("session.respawned") == 1
    assert "session.resume_failed" not in types


def test_reporter_scenario_stopped_tmux_server(world, tmux_server_pid):
    """The reporter's scenario (AC2): the tmux server is too busy to answer
    (SIGSTOPped) while comments arrive. No respawn, no loss; delivered after SIGCONT."""
    world.source.add("Start on issue 146")
    assert world.cycle().processed == 1
    world.wait(lambda: world.records("start"))
    harness_pids = world.tmux.pane_pids(NAME)
    assert harness_pids
    record = world.store.registry.get(REF)
    server = tmux_server_pid()
    assert server is not None

    a = world.source.add("Comment while the server is stopped (1)")
    b = world.source.add("Comment while the server is stopped (2)")
    os.kill(server, signal.SIGSTOP)
    try:
        report = world.cycle()
    finally:
        os.kill(server, signal.SIGCONT)
    # Comment a heads the item's queue (b waits behind it, in order); an unanswered tmux
    # never uses up an attempt, however often it is tried.
    assert report.failed >= 1  # one try or more, each a transient failure
    assert (report.processed, report.gave_up) == (0, 0)
    for event in (a, b):
        entry = world.store.inbox.by_delivery(event.delivery_id)
        assert (entry.state, entry.attempts) == ("pending", 0)
        assert world.store.deliveries.state(event.delivery_id) is None  # released

    report = world.cycle()  # the server answers again
    assert report.processed == 2
    messages = world.wait(lambda: len(world.records("message")) >= 2 and world.records("message"))
    texts = [m["text"] for m in messages]
    assert texts == [frame(a), frame(b)]  # each once, in order: nothing lost or doubled
    time.sleep(0.5)
    assert len(world.records("message")) == 2
    # Never respawned: same harness process, same conversation, one start.
    assert world.tmux.pane_pids(NAME) == harness_pids
    assert world.store.registry.get(REF).conversation_id == record.conversation_id
    assert len(world.records("start")) == 1
    types = [r["type"] for r in world.events.read()]
    assert "session.respawned" not in types
    assert "session.resume_failed" not in types
    failed = world.events.read("dispatch.failed")
    assert {r["detail"]["reason"] for r in failed} == {"deliver_unavailable"}


def test_ac11_stranded_comment_is_rearmed_once_by_an_upgrade_and_delivered(world):
    """AC11 end to end: a comment given up (here: its item stayed locked by a stuck
    process past the delivery horizon) under 1.0.0 is never re-forwarded by 1.0.0
    (cron `poll --once`), re-armed exactly once by 1.0.1 and delivered, once."""
    world.source.add("Start on issue 146")
    assert world.cycle().processed == 1
    world.wait(lambda: world.records("start"))
    stranded = world.source.add("The comment that got stranded")
    with item_lock(world.state_dir / "locks", REF):  # a stuck holder of the item
        reports: list = []
        while not any(r.gave_up for r in reports) and len(reports) < 30:
            reports.append(world.cycle(give_up_after=0.5))  # each attempt: item_locked
        assert all(r.failed == 1 for r in reports), [vars(r) for r in reports]
        assert [r.gave_up for r in reports].count(1) == 1
        assert len(reports) >= 2  # retried (transient) before the horizon gave it up
        entry = world.store.inbox.by_delivery(stranded.delivery_id)
        assert entry.state == "given_up"
        assert json.loads(entry.gave_up_versions)["loop-cli"] == "1.0.0"
    # The holder is gone, but the running version never re-arms its own give-up.
    for _ in range(2):
        report = world.cycle()
        assert (report.rearmed, report.processed, report.failed) == (0, 0, 0)
    assert world.records("message") == []

    report = world.cycle("1.0.1")  # the upgrade
    assert (report.rearmed, report.processed) == (1, 1)
    messages = world.wait(lambda: world.records("message"))
    assert [m["text"] for m in messages] == [frame(stranded)]
    rearmed = world.events.read("inbox.rearmed")
    assert [
        (r["deliveryId"], json.loads(r["detail"]["gave_up_versions"])["loop-cli"]) for r in rearmed
    ] == [(stranded.delivery_id, "1.0.0")]
    for _ in range(2):
        assert world.cycle("1.0.1").rearmed == 0
    time.sleep(0.5)
    assert len(world.records("message")) == 1  # delivered exactly once
    failed = world.events.read("dispatch.failed")
    assert {r["detail"]["reason"] for r in failed} == {"item_locked"}
