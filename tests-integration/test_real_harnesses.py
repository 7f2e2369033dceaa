"""Claude Code and Codex, driven for real (issue 11).

The pinned CLIs of tests-integration/harnesses/ (`npm ci` there; `.ci/run` does it) run
under the-loop in real tmux on a private socket, against loop_cli.fakemodel on loopback,
which records every request: what the model saw is the proof, never what the-loop says
it sent. Each scenario runs for both harnesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from integration_support import end_private_server, poll_and_drain

from loop_cli.fakemodel import FakeModelServer, user_texts
from loop_cli.harness_setup import harness_env, prepare_home
from loop_dispatch import Dispatcher, Event, EventKind, EventLog, PollBatch, Store, WorkItemRef
from loop_dispatch.adapters import ClaudeCodeAdapter, CodexAdapter
from loop_dispatch.launch import LaunchSpec
from loop_tmux import Tmux
from loop_tmux.testing import finished_records, wait_for

pytestmark = pytest.mark.tmux

HARNESSES = Path(__file__).parent / "harnesses"
BIN = HARNESSES / "node_modules" / ".bin"
FAKE_KEY = "sk-loop-fake-0123456789abcdefghijklmn"  # a fake key for the fake model API
KINDS = ["claude-code", "codex"]


def _binary(kind: str) -> Path:
    path = BIN / ("claude" if kind == "claude-code" else "codex")
    if not path.exists():
        pytest.skip(
            f"{path} is missing: install the pinned harnesses with `npm ci` in {HARNESSES} "
            "(needs node, npm and the npm registry; .ci/run does it)"
        )
    return path


@dataclass
class Source:
    """A tracker in memory: comments appended by the test."""

    name: str = "github"
    events: list[Event] = field(default_factory=list)

    def add(self, ref: WorkItemRef, body: str, kind: EventKind = EventKind.COMMENT) -> Event:
        n = len(self.events) + 1
        event = Event(
            delivery_id=f"github:comment:{9000 + n}",
            work_item=ref,
            kind=kind,
            actor="alice",
            body=body,
            url=f"https://example.invalid/acme/widgets/issues/{ref.number}#c{n}",
            created_at=datetime.now(timezone.utc),
            comment_id=str(9000 + n),
        )
        self.events.append(event)
        return event

    def poll(self, cursor: str | None) -> PollBatch:
        start = int(cursor or 0)
        return PollBatch(self.events[start:], str(len(self.events)))


class Rig:
    """One harness kind, its own config home, a fake model, a private tmux server."""

    def __init__(self, tmp: Path, kind: str, model: FakeModelServer, *, delay: float = 0) -> None:
        self.kind = kind
        self.model = model
        self.work = tmp / "work"
        self.work.mkdir(exist_ok=True)
        self.home = tmp / kind
        self.home.mkdir()
        real = _binary(kind)
        program = real
        if delay:  # a host so loaded the CLI starts seconds late
            program = tmp / f"slow-{kind}"
            program.write_text(f'#!/bin/sh\nsleep {delay}\nexec "{real}" "$@"\n')
            program.chmod(0o755)
        self.socket = f"loop-real-{uuid.uuid4().hex[:8]}"
        self.tmux = Tmux(socket_name=self.socket, config_file="/dev/null", width=160, height=50)
        adapter = ClaudeCodeAdapter if kind == "claude-code" else CodexAdapter
        self.adapter = adapter(str(program), state_dir=self.home)
        self.trust(self.work)
        self.env = harness_env(kind, model.url, FAKE_KEY)
        self.store = Store.open(tmp / "state")
        self.events_path = tmp / "state" / "events.jsonl"
        self.events = EventLog(self.events_path)
        self.cwd: dict[WorkItemRef, Path] = {}
        self.dispatcher = Dispatcher(
            self.store,
            self.tmux,
            self.adapter,
            self.events,
            "1.0.0",
            cwd_for=lambda ref: self.cwd.get(ref, self.work),
            lock_dir=tmp / "state" / "locks",
            launcher=lambda record, argv: LaunchSpec(list(argv), dict(self.env)),
            survival_delay=1.0,
            receipt_seconds=15.0,
        )
        self.source = Source()
        # A bystander keeps the server up while a test kills an item's harness.
        assert self.tmux.spawn("bystander", ["sleep", "900"], str(self.work)).ok

    def trust(self, folder: Path) -> None:
        """What an operator sets once (docs/harnesses.md): no dialog stands in the way."""
        prepare_home(self.kind, self.home, [folder], self.model.url, FAKE_KEY)

    def close(self) -> None:
        end_private_server(self.socket)

    def until_processed(self, event: Event, limit: float = 90.0) -> str:
        """Poll and drain until the event is settled; its final state."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            poll_and_drain(self.store, self.source, self.dispatcher, self.events)
            state = self.store.deliveries.state(event.delivery_id)
            if state in ("processed", "skipped"):
                return state
            time.sleep(0.3)
        return str(self.store.deliveries.state(event.delivery_id))

    def log(self, type_: str) -> list[dict]:
        out = []
        for record in finished_records(self.events_path):
            if record.get("type") == type_:
                out.append(record)
        return out

    def turns_with(self, marker: str) -> list[list[str]]:
        """Each model request's user turns, for the requests that carry `marker`."""
        return [
            user_texts(r.body)
            for r in self.model.requests()
            if any(marker in t for t in user_texts(r.body))
        ]

    def conversation_with(self, marker: str) -> list[str]:
        """The user turns of the conversation request that carries `marker`."""
        return _conversation(self.turns_with(marker))

    def wait_turns(self, marker: str, limit: float = 60.0) -> list[list[str]]:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            found = self.turns_with(marker)
            if found:
                return found
            time.sleep(0.2)
        return []

    def kill9(self, ref: WorkItemRef) -> None:
        for pid in self.tmux.pane_pids(ref.tmux_name()):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.tmux.pane_pids(ref.tmux_name()) and time.monotonic() < deadline:
            time.sleep(0.1)


def _conversation(requests: list[list[str]]) -> list[str]:
    """Of the requests carrying a text, the conversation's own turn: the one with the most
    user turns. A harness also sends side requests holding the newest text alone (Codex
    asks for a thread title after the first turn of a session, resumed ones included),
    and those may arrive last."""
    return max(requests, key=len, default=[])


@pytest.fixture(scope="module")
def model():
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def rig_for(tmp_path, model):
    rigs: list[Rig] = []

    def make(kind: str, **kw) -> Rig:
        rig = Rig(tmp_path, kind, model, **kw)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()


def _ref(n: int) -> WorkItemRef:
    return WorkItemRef.parse(f"github:acme/widgets#{n}")


def _marker(word: str) -> str:
    return f"{word}-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("kind", KINDS)
def test_ticket_spawns_and_the_model_sees_it(rig_for, kind) -> None:
    rig = rig_for(kind)
    ref, text = _ref(1), _marker("ticket")
    event = rig.source.add(ref, f"Please look at {text}", EventKind.OPENED)
    assert rig.until_processed(event) == "processed"
    assert rig.wait_turns(text), f"the model never saw the ticket ({kind})"
    record = rig.store.registry.get(ref)
    assert record is not None
    assert record.conversation_id
    assert rig.adapter.resumable(record.conversation_id)


@pytest.mark.parametrize("kind", KINDS)
def test_a_comment_right_after_a_slow_start_arrives_exactly_once(rig_for, kind) -> None:
    rig = rig_for(kind, delay=2.5)
    ref, opening, comment = _ref(2), _marker("opening"), _marker("early")
    first = rig.source.add(ref, opening, EventKind.OPENED)
    second = rig.source.add(ref, f"Also: {comment}")
    assert rig.until_processed(first) == "processed"
    assert rig.until_processed(second) == "processed"
    seen = rig.wait_turns(comment)
    assert seen, f"the early comment never reached the model ({kind})"
    time.sleep(2)  # a second copy, if any, would arrive now
    last = rig.conversation_with(comment)
    assert sum(comment in t for t in last) == 1, last
    waits = [
        r for r in rig.log("dispatch.failed") if r["detail"].get("reason") == "harness_not_ready"
    ]
    if kind == "claude-code":
        # Codex's spawn already waited for its rollout file (the conversation id), by
        # which time its composer is up; Claude's paste has to wait for its screen.
        assert waits, "the paste did not wait for the harness to be ready"
    confirmed = [r for r in rig.log("dispatch.confirmed") if r["deliveryId"] == second.delivery_id]
    assert len(confirmed) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_kill9_then_a_comment_resumes_the_same_conversation(rig_for, kind) -> None:
    rig = rig_for(kind)
    ref, opening, later = _ref(3), _marker("before"), _marker("after")
    assert rig.until_processed(rig.source.add(ref, opening, EventKind.OPENED)) == "processed"
    assert rig.wait_turns(opening)
    conversation = rig.store.registry.get(ref).conversation_id
    rig.kill9(ref)
    assert rig.until_processed(rig.source.add(ref, later)) == "processed"
    turns = rig.wait_turns(later)
    assert turns, f"the comment after kill -9 never reached the model ({kind})"
    resumed = rig.conversation_with(later)
    assert any(opening in t for t in resumed), "the resumed conversation lost its history"
    assert rig.store.registry.get(ref).conversation_id == conversation
    respawned = rig.log("session.respawned")
    assert respawned
    assert respawned[-1]["detail"]["resumed"] is True

    # `sessions peek --transcript` reads the same conversation from the CLI's own file:
    # both tickets' texts as user turns, in order, and the model's replies between them.
    def answered() -> list | None:
        found = rig.adapter.transcript(conversation, 10)
        done = found and found[-1].role == "assistant" and any(later in t.text for t in found)
        return found if done else None

    turns = wait_for(answered, timeout=30)
    assert turns, f"no transcript with the reply to the comment after kill -9 ({kind})"
    users = [t.text for t in turns if t.role == "user"]
    assert [opening in users[0], later in users[-1]] == [True, True], users
    said = [(t.role, t.text[-160:]) for t in turns]
    assert all("Noted." in t.text for t in turns if t.role == "assistant"), said


@pytest.mark.parametrize("kind", KINDS)
def test_two_items_sharing_a_cwd_each_resume_their_own_conversation(rig_for, kind) -> None:
    rig = rig_for(kind)
    a, b = _ref(4), _ref(5)
    a_text, b_text = _marker("alpha"), _marker("beta")
    assert rig.until_processed(rig.source.add(a, a_text, EventKind.OPENED)) == "processed"
    assert rig.wait_turns(a_text)
    assert rig.until_processed(rig.source.add(b, b_text, EventKind.OPENED)) == "processed"
    assert rig.wait_turns(b_text)
    ids = {rig.store.registry.get(r).conversation_id for r in (a, b)}
    assert len(ids) == 2
    assert None not in ids
    rig.kill9(a)
    rig.kill9(b)
    a_more, b_more = _marker("alpha-more"), _marker("beta-more")
    assert rig.until_processed(rig.source.add(a, a_more)) == "processed"
    assert rig.until_processed(rig.source.add(b, b_more)) == "processed"
    for own, other, more in ((a_text, b_text, a_more), (b_text, a_text, b_more)):
        turns = _conversation(rig.wait_turns(more))
        assert any(own in t for t in turns), f"{more} went to a conversation without {own}"
        assert not any(other in t for t in turns), f"{more} resumed the other item's talk"


@pytest.mark.parametrize("kind", KINDS)
def test_a_harness_on_its_trust_dialog_is_reported_and_never_typed_into(
    rig_for, tmp_path, kind
) -> None:
    rig = rig_for(kind)
    ref = _ref(6)
    untrusted = tmp_path / "untrusted"
    untrusted.mkdir()
    subprocess.run(["git", "init", "-q", str(untrusted)], check=True)  # Codex asks in repos
    rig.cwd[ref] = untrusted
    opening, comment = _marker("opening"), _marker("blocked")
    assert rig.until_processed(rig.source.add(ref, opening, EventKind.OPENED)) == "processed"
    event = rig.source.add(ref, comment)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not rig.log("session.blocked"):
        poll_and_drain(rig.store, rig.source, rig.dispatcher, rig.events)
        time.sleep(0.3)
    blocked = rig.log("session.blocked")
    assert blocked, f"{kind} on its trust dialog was not reported"
    assert blocked[-1]["detail"]["dialog"] == "trust"
    assert rig.store.deliveries.state(event.delivery_id) != "processed"
    view = rig.tmux.pane_view(ref.tmux_name(), capture=True)
    assert view is not None
    assert not view.dead, "the dialog was answered: the harness is gone"
    assert rig.adapter.readiness(view).dialog == "trust"
    assert not rig.turns_with(comment)
    assert not rig.turns_with(opening)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    return subprocess.run(
        [sys.executable, "-m", "loop_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_demo_with_the_real_harness(kind) -> None:
    done = _cli("demo", "--harness", kind, "--binary", str(_binary(kind)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "All 5 steps observed" in done.stdout
    assert "dispatch.confirmed" in done.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_harness_check_names_what_an_unattended_session_lacks(tmp_path, model, kind) -> None:
    home, work, other = tmp_path / "home", tmp_path / "work", tmp_path / "other"
    work.mkdir()
    other.mkdir()
    prepare_home(kind, home, [work], model.url, FAKE_KEY)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "stateDir": str(tmp_path / "state"),
                "tracker": "local",
                "harness": {
                    "adapter": kind,
                    "binary": str(_binary(kind)),
                    "stateDir": str(home),
                    "cwd": str(work),
                },
            }
        )
    )
    done = _cli("--config", str(config), "harness", "check", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ok] version" in done.stdout
    config.write_text(config.read_text().replace(str(work), str(other)))
    done = _cli("--config", str(config), "harness", "check", timeout=60)
    assert done.returncode == 1
    assert f"[MISSING] folder trusted: {other}" in done.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_a_burst_of_comments_after_a_spawn_each_arrives_exactly_once(rig_for, kind) -> None:
    """Seven texts for one item committed at once: the opening (the spawn's prompt) and
    six comments pasted as soon as the harness is ready, one after another, some while
    it is still answering the previous one."""
    rig = rig_for(kind)
    ref = _ref(7)
    markers = [_marker(f"burst{i}") for i in range(7)]
    rig.source.add(ref, markers[0], EventKind.OPENED)
    events = [rig.source.add(ref, f"comment {m}") for m in markers[1:]]
    for event in events:
        assert rig.until_processed(event) == "processed"
    assert rig.wait_turns(markers[-1])
    time.sleep(3)  # a repeated paste, if any, would reach the model now
    final = "\n".join(rig.conversation_with(markers[-1]))
    counts = {m: final.count(m) for m in markers}
    assert counts == dict.fromkeys(markers, 1), counts
    unconfirmed = rig.log("dispatch.unconfirmed")
    assert not unconfirmed, unconfirmed
    assert len(rig.log("dispatch.confirmed")) == len(events)


def _runtime(tmp_path: Path, kind: str, model: FakeModelServer, **harness: object):
    """A Runtime over the demo's real-harness config (env file, harness.stateDir)."""
    import yaml

    from loop_cli.config import LoadedConfig, load_file
    from loop_cli.demo import write_real_config
    from loop_cli.runtime import Runtime

    socket = f"loop-real-{uuid.uuid4().hex[:8]}"
    config = write_real_config(tmp_path, socket, kind, str(_binary(kind)), model.url)
    if harness:
        data = yaml.safe_load(config.read_text())
        data["harness"].update(harness)
        config.write_text(yaml.safe_dump(data))
    return Runtime(LoadedConfig(load_file(config), config, "--config")), config, socket


def _cycle_until(rt, model: FakeModelServer, marker: str, limit: float = 90) -> list[list[str]]:
    from loop_cli.poller import drain_once, run_cycle

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        run_cycle(rt)
        drain_once(rt)
        seen = [user_texts(r.body) for r in model.requests()]
        found = [t for t in seen if any(marker in x for x in t)]
        if found:
            return found
        time.sleep(0.3)
    return []


@pytest.mark.parametrize("kind", KINDS)
def test_sessions_restart_keeps_the_conversation_and_the_harness_home(
    tmp_path, model, kind
) -> None:
    from loop_cli.tracker import LocalTracker

    rt, config, socket = _runtime(tmp_path, kind, model)
    try:
        tracker = LocalTracker(rt.store)
        opening, later = _marker("before-restart"), _marker("after-restart")
        ref = tracker.open("restart me", opening, project="demo")
        assert _cycle_until(rt, model, opening)
        conversation = rt.store.registry.get(ref).conversation_id
        done = _cli("--config", str(config), "sessions", "restart", "--all", "--force")
        assert done.returncode == 0, done.stdout + done.stderr
        tracker.comment(ref, later)
        turns = _cycle_until(rt, model, later)
        assert turns, f"no delivery after sessions restart ({kind})"
        assert any(opening in t for t in _conversation(turns)), "the restart lost the conversation"
        assert rt.store.registry.get(ref).conversation_id == conversation
    finally:
        rt.close()
        end_private_server(socket)


@pytest.mark.parametrize("kind", KINDS)
def test_status_names_a_session_waiting_on_a_dialog(tmp_path, model, kind) -> None:
    from loop_cli.status import collect_status, render_text
    from loop_cli.tracker import LocalTracker

    untrusted = tmp_path / "untrusted"
    untrusted.mkdir()
    subprocess.run(["git", "init", "-q", str(untrusted)], check=True)
    rt, _config, socket = _runtime(tmp_path, kind, model, cwdByProject={"lab": str(untrusted)})
    try:
        tracker = LocalTracker(rt.store)
        ref = tracker.open("untrusted", _marker("opening"), project="lab")
        deadline = time.monotonic() + 60
        blocked: list[dict] = []
        while time.monotonic() < deadline and not blocked:
            _cycle_until(rt, model, "never-sent", limit=0.5)
            blocked = collect_status(rt).get("blocked", [])
        assert blocked == [
            {"workItem": str(ref), "tmuxName": ref.tmux_name(), "dialog": "trust"}
        ], blocked
        assert "waits on its trust dialog" in render_text(collect_status(rt))
    finally:
        rt.close()
        end_private_server(socket)


PROMPTS = [
    ("claude-code", "bash", ["--permission-mode", "default"], "permission"),
    ("claude-code", "question", ["--permission-mode", "default"], "question"),
    ("codex", "bash", ["--ask-for-approval", "on-request", "--sandbox", "read-only"], "approval"),
]


@pytest.mark.parametrize(("kind", "tool", "extra", "dialog"), PROMPTS)
def test_the_real_clis_prompts_are_dialogs_and_the_detector_raises_them(
    tmp_path, model, kind, tool, extra, dialog
) -> None:
    """Issue 26: the model asks for a tool; the real CLI draws its permission, question
    or approval prompt; the adapter names it and the stalled-agent detector raises
    `blocked-dialog` once `attention.blockedSeconds` has passed."""
    from datetime import timedelta

    from loop_cli.attention import BLOCKED, sweep
    from loop_cli.tracker import LocalTracker

    rt, _config, socket = _runtime(tmp_path, kind, model, extraArgs=extra)
    try:
        tracker = LocalTracker(rt.store)
        ref = tracker.open("use a tool", f"Please do it. LOOP-FAKE-TOOL:{tool}", project="demo")
        deadline = time.monotonic() + 90
        seen = None
        while time.monotonic() < deadline and seen != dialog:
            _cycle_until(rt, model, "never-sent", limit=0.5)
            pane = rt.tmux.pane_view(ref.tmux_name(), capture=True)
            seen = rt.adapter.readiness(pane).dialog if pane is not None else None
        screen = pane.screen if pane is not None else ""
        assert seen == dialog, screen
        first = sweep(rt)
        assert BLOCKED not in [s.reason for s in first.raised]
        later = sweep(rt, datetime.now(timezone.utc) + timedelta(seconds=301))
        assert [(s.work_item, s.reason, s.note) for s in later.raised] == [
            (str(ref), BLOCKED, dialog)
        ], screen
    finally:
        rt.close()
        end_private_server(socket)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hibernated_sessions_next_comment_reaches_the_model_with_its_history(
    rig_for, kind
) -> None:
    """Issue 25: the poll daemon's sweep ends an idle harness, idle by the real adapter's
    activity signal (the pane and its scrollback kept, the record `hibernated`); the
    next comment resumes the same conversation, and the model's request holds the turns
    from before the hibernation."""
    from loop_dispatch.hibernation import Hibernator

    rig = rig_for(kind)
    ref, opening, later = _ref(30), _marker("before-nap"), _marker("after-nap")
    assert rig.until_processed(rig.source.add(ref, opening, EventKind.OPENED)) == "processed"
    assert rig.wait_turns(opening)
    conversation = rig.store.registry.get(ref).conversation_id
    sweeper = Hibernator(rig.dispatcher, after=1.0)
    deadline = time.monotonic() + 60
    while not (slept := sweeper.sweep()):
        assert time.monotonic() < deadline, "the idle session was never hibernated"
        time.sleep(0.5)
    assert [h.work_item for h in slept] == [str(ref)]
    assert rig.store.registry.get(ref).status == "hibernated"
    assert rig.tmux.probe(ref.tmux_name()).value == "dead"  # pane and scrollback kept
    [napped] = rig.log("session.hibernated")
    assert napped["detail"]["rss_bytes"] > 10 << 20  # a real Node process tree

    assert rig.until_processed(rig.source.add(ref, f"Next: {later}")) == "processed"
    assert rig.wait_turns(later), "the comment after hibernation never reached the model"
    resumed = rig.conversation_with(later)
    assert any(opening in t for t in resumed), "the resumed conversation lost its history"
    record = rig.store.registry.get(ref)
    assert (record.status, record.conversation_id) == ("active", conversation)
    assert rig.log("session.respawned")[-1]["detail"]["resumed"] is True
