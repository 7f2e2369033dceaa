"""Dispatcher against a real tmux server (private socket) running the fake harness.

These prove the tree end to end with real processes: first spawn with a recorded
conversation, bracketed-paste delivery, AC12 resume under the same name, the resume
fallback, close, and two processes racing on one item.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loop_dispatch.adapters import ClaudeCodeAdapter, GenericAdapter
from loop_dispatch.dispatcher import OutcomeKind
from loop_dispatch.framing import frame, spawn_prompt
from loop_dispatch.launch import LaunchSpec
from loop_dispatch.model import EventKind, WorkItemRef

pytestmark = pytest.mark.tmux

REF = WorkItemRef.parse("local:demo#4")
NAME = REF.tmux_name()


def _launcher(convo: Path):
    def launch(record, argv):
        return LaunchSpec(
            list(argv),
            {"THE_LOOP_WORK_ITEM": str(record.work_item), "FAKE_HARNESS_DIR": str(convo)},
        )

    return launch


@pytest.fixture
def setup(real_tmux, fake_harness, make_dispatcher, store, events):
    program, convo = fake_harness
    disp = make_dispatcher(
        real_tmux,
        ClaudeCodeAdapter(binary=str(program), checks=False),
        launcher=_launcher(convo),
        survival_delay=1.5,
    )
    return disp, real_tmux, convo


def _started(read_conversation, convo: Path, conversation_id: str, n: int = 1):
    return lambda: [r for r in read_conversation(convo, conversation_id) if r["event"] == "start"][
        n - 1 :
    ]


def _messages(read_conversation, convo, conversation_id):
    return [r for r in read_conversation(convo, conversation_id) if r["event"] == "message"]


def test_first_spawn_then_delivery_by_bracketed_paste(
    setup, store, events, make_event, read_conversation, wait_for
):
    disp, tmux, convo = setup
    first = make_event(REF, body="Fix the build")
    assert disp.dispatch(first).reason == "spawned"
    record = store.registry.get(REF)
    start = wait_for(_started(read_conversation, convo, record.conversation_id))[0]
    assert start["mode"] == "fresh"
    assert start["prompt"] == frame(first)
    assert start["cwd"] == str(record.cwd)
    assert "THE_LOOP_WORK_ITEM" in start["env_fp"]
    assert REF.project not in json.dumps(start["env_fp"])  # fingerprints, not values

    body = "multi-line\n```\nnot a fence break\n```\n$(rm -rf ~) `echo hi`"
    second = make_event(REF, body=body)
    outcome = disp.dispatch(second)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "delivered")
    got = wait_for(lambda: _messages(read_conversation, convo, record.conversation_id))
    assert got[0]["text"] == frame(second)
    assert got[0]["bracketed"] is True
    assert tmux.probe(NAME).value == "live"


def test_ac12_killed_session_resumes_its_conversation_under_the_same_name(
    setup, store, events, make_event, read_conversation, wait_for
):
    """AC12: the registry holds an active session whose tmux session was killed; the
    next event respawns loop-<slug> running `--resume <recorded id>`; the id is kept."""
    disp, tmux, convo = setup
    disp.dispatch(make_event(REF))
    record = store.registry.get(REF)
    wait_for(_started(read_conversation, convo, record.conversation_id))
    assert tmux.kill(NAME)
    assert tmux.probe(NAME).value == "absent"

    event = make_event(REF, body="are you still there?")
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawned")
    assert tmux.probe(NAME).value == "live"
    assert store.registry.get(REF).conversation_id == record.conversation_id
    resumed = wait_for(_started(read_conversation, convo, record.conversation_id, 2))[0]
    assert resumed["mode"] == "resume"
    assert resumed["prompt"] == frame(event)
    detail = events.read("session.respawned")[0]["detail"]
    assert detail["resumed"] is True
    assert detail["tmux_name"] == NAME
    assert not events.read("session.resume_failed")


def test_ac12_dead_pane_is_cleared_and_resumed(
    setup, store, events, make_event, read_conversation, wait_for
):
    """A harness that exited leaves a DEAD pane (remain-on-exit): cleared, resumed."""
    disp, tmux, convo = setup
    disp.dispatch(make_event(REF))
    record = store.registry.get(REF)
    wait_for(_started(read_conversation, convo, record.conversation_id))
    for pid in tmux.pane_pids(NAME):
        os.kill(pid, 15)
    wait_for(lambda: tmux.probe(NAME).value == "dead")
    outcome = disp.dispatch(make_event(REF))
    assert outcome.reason == "respawned"
    assert events.read("session.respawned")[0]["detail"]["previous"] == "dead"


def test_ac12_unknown_conversation_falls_back_to_fresh_with_resume_failed(
    setup, store, events, make_event, read_conversation, wait_for
):
    """The harness refuses the resume (exits 1 at once): resume_failed, fresh conversation."""
    disp, tmux, convo = setup
    disp.dispatch(make_event(REF))
    old = store.registry.get(REF).conversation_id
    wait_for(_started(read_conversation, convo, old))
    tmux.kill(NAME)
    # Let the killed harness write its last line (SIGHUP) before forgetting the file.
    wait_for(lambda: [r for r in read_conversation(convo, old) if r["event"] == "exit"])
    (convo / f"{old}.jsonl").unlink()  # the harness no longer knows the conversation

    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawned_fresh"), outcome
    new = store.registry.get(REF).conversation_id
    assert new != old
    start = wait_for(_started(read_conversation, convo, new))[0]
    assert start["mode"] == "fresh"
    assert start["prompt"] == frame(event)
    assert events.read("session.resume_failed")[0]["detail"]["reason"] == (
        "exited_within_survival_window"
    )
    assert tmux.probe(NAME).value == "live"


def test_ac12_harness_without_resume_starts_fresh(
    real_tmux, fake_harness, make_dispatcher, store, events, make_event, read_conversation, wait_for
):
    program, convo = fake_harness
    adapter = GenericAdapter([str(program), "--session-id", "{session_id}", "{prompt}"])
    disp = make_dispatcher(real_tmux, adapter, launcher=_launcher(convo), survival_delay=1.5)
    disp.dispatch(make_event(REF))
    old = store.registry.get(REF).conversation_id
    wait_for(_started(read_conversation, convo, old))
    real_tmux.kill(NAME)
    assert disp.dispatch(make_event(REF)).reason == "respawned_fresh"
    assert events.read("session.resume_failed")[0]["detail"]["reason"] == "adapter_cannot_resume"
    assert store.registry.get(REF).conversation_id != old


def test_a_body_too_long_for_a_tmux_command_still_spawns_and_respawns(
    setup, store, events, make_event, read_conversation, wait_for
):
    """tmux refuses a command over 16 KiB ("command too long"): a long first comment
    must not fail every spawn of its item. The prompt is cut, and says where the rest is;
    a paste into the running session carries the whole text."""
    disp, tmux, convo = setup
    long_body = "stack trace line\n" * 2500  # ~42 KB
    first = make_event(REF, body=long_body)
    outcome = disp.dispatch(first)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "spawned"), outcome
    record = store.registry.get(REF)
    start = wait_for(_started(read_conversation, convo, record.conversation_id))[0]
    assert start["prompt"] == spawn_prompt(first)[0]
    # a local item has no page: the note names the command that shows it whole
    assert f"the-loop item show {REF}" in start["prompt"].split("\n")[-1]
    assert events.read("session.spawned")[0]["detail"]["cut_chars"] > 0

    pasted = make_event(REF, body=long_body)
    assert disp.dispatch(pasted).reason == "delivered"
    got = wait_for(lambda: _messages(read_conversation, convo, record.conversation_id))
    assert got[0]["text"] == frame(pasted)  # whole, uncut

    tmux.kill(NAME)
    again = make_event(REF, body=long_body)
    assert disp.dispatch(again).reason == "respawned"
    resumed = wait_for(_started(read_conversation, convo, record.conversation_id, 2))[0]
    assert resumed["prompt"] == spawn_prompt(again)[0]


def test_live_unregistered_occupant_is_never_killed(
    setup, store, events, make_event, read_conversation
):
    disp, tmux, convo = setup
    assert tmux.spawn(NAME, ["sleep", "60"], str(convo)).outcome.value == "spawned"
    pids = tmux.pane_pids(NAME)
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert outcome.reason == "occupied_unregistered"
    assert tmux.pane_pids(NAME) == pids
    assert store.deliveries.state(event.delivery_id) is None


def test_close_terminates_the_harness_and_keeps_scrollback(
    setup, store, events, make_event, read_conversation, wait_for
):
    disp, tmux, convo = setup
    disp.dispatch(make_event(REF))
    record = store.registry.get(REF)
    wait_for(_started(read_conversation, convo, record.conversation_id))
    outcome = disp.close(REF)
    assert outcome.reason == "closed"
    assert outcome.detail == ""
    assert tmux.probe(NAME).value == "dead"  # pane kept (scrollback), harness gone
    exits = [r for r in read_conversation(convo, record.conversation_id) if r["event"] == "exit"]
    assert exits[0]["signal"] == "SIGTERM"
    assert store.registry.get(REF).status == "closed"


def _busy_launcher(convo: Path, turn_seconds: float):
    def launch(record, argv):
        return LaunchSpec(
            list(argv),
            {"FAKE_HARNESS_DIR": str(convo), "FAKE_HARNESS_TURN_SECONDS": str(turn_seconds)},
        )

    return launch


def test_a_close_waits_for_the_turn_and_the_grace_bounds_the_wait(
    real_tmux,
    fake_harness,
    make_dispatcher,
    store,
    events,
    make_event,
    read_conversation,
    wait_for,
):
    """Issue 20: a close event meets a harness mid-turn (its screen keeps changing): the
    close is a transient `harness_busy` and the harness runs on; once the turn is over
    the close ends it. A harness whose turn never ends is ended once the grace is over.
    The operator's `sessions stop` (`Dispatcher.close`) ends a busy one at once."""
    program, convo = fake_harness
    adapter = ClaudeCodeAdapter(binary=str(program), checks=False)
    short = make_dispatcher(real_tmux, adapter, launcher=_busy_launcher(convo, 3), close_quiet=0.5)
    short.dispatch(make_event(REF, body="work for three seconds"))  # the prompt starts a turn
    record = store.registry.get(REF)
    wait_for(_started(read_conversation, convo, record.conversation_id))
    closing = make_event(REF, kind=EventKind.CLOSED, body="", actor="reporter")
    held = short.dispatch(closing)
    assert (held.reason, held.transient) == ("harness_busy", True)
    assert store.registry.get(REF).active
    assert real_tmux.probe(NAME).value == "live"

    def log() -> list[dict]:
        return read_conversation(convo, record.conversation_id)

    wait_for(lambda: any(r["event"] == "turn_done" for r in log()), timeout=20)
    assert short.dispatch(closing).reason == "closed"
    [exit_record] = [r for r in log() if r["event"] == "exit"]
    assert "mid_turn" not in exit_record
    [deferred] = events.read(types_glob="session.close_deferred")
    assert deferred["detail"]["grace_seconds"] == 600.0
    [closed] = events.read(types_glob="session.closed")
    assert closed["detail"]["closed_by"] == "reporter"

    ref = WorkItemRef.parse("local:demo#5")
    endless = make_dispatcher(
        real_tmux, adapter, launcher=_busy_launcher(convo, 10_000), close_quiet=0.5, close_grace=2.0
    )
    endless.dispatch(make_event(ref, body="never done"))
    other = store.registry.get(ref)
    wait_for(_started(read_conversation, convo, other.conversation_id))
    closing = make_event(ref, kind=EventKind.CLOSED, body="")
    begun = time.monotonic()
    outcome = endless.dispatch(closing)
    assert outcome.reason == "harness_busy"
    while outcome.reason == "harness_busy":
        assert time.monotonic() - begun < 30
        time.sleep(0.5)
        outcome = endless.dispatch(closing)
    assert outcome.reason == "closed"
    assert time.monotonic() - begun >= 2.0
    [cut] = [r for r in read_conversation(convo, other.conversation_id) if r["event"] == "exit"]
    assert cut["mid_turn"] is True  # the grace was over: ended mid-turn, as documented

    ref = WorkItemRef.parse("local:demo#6")
    endless.dispatch(make_event(ref, body="busy when the operator stops it"))
    third = store.registry.get(ref)
    wait_for(_started(read_conversation, convo, third.conversation_id))
    assert endless.close(ref).reason == "closed"  # no waiting: the operator asked


RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from loop_tmux import Tmux
    from loop_dispatch import (Store, EventLog, Dispatcher, ClaudeCodeAdapter, LaunchSpec,
                               WorkItemRef, Event, EventKind)
    from datetime import datetime, timezone
    state, socket, program, convo, work, go, tag = sys.argv[1:8]
    store = Store.open(state)
    ref = WorkItemRef.parse("local:demo#4")
    def launch(record, argv):
        return LaunchSpec(list(argv), {"FAKE_HARNESS_DIR": convo})
    d = Dispatcher(store, Tmux(socket_name=socket, config_file="/dev/null"),
                   ClaudeCodeAdapter(binary=program, checks=False),
                   EventLog(Path(state) / "events.jsonl"),
                   "t", cwd_for=lambda r: Path(work), lock_dir=Path(state) / "locks",
                   launcher=launch, survival_delay=0)
    event = Event("comment:race:" + tag, ref, EventKind.COMMENT, "alice", "race " + tag, "",
                  datetime.now(timezone.utc))
    Path(go + "." + tag).touch()  # ready: everything imported and opened
    while not Path(go).exists():
        time.sleep(0.001)
    print(d.dispatch(event).reason, flush=True)
    """
)


def test_two_processes_dispatching_to_one_item_spawn_exactly_one_session(
    real_tmux, fake_harness, tmp_path, read_conversation, wait_for
):
    program, convo = fake_harness
    state = tmp_path / "race-state"
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACER,
                str(state),
                real_tmux.socket_name,
                str(program),
                str(convo),
                str(work),
                str(go),
                tag,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    wait_for(lambda: all(Path(f"{go}.{tag}").exists() for tag in ("a", "b")), timeout=60)
    go.touch()  # both are now spinning on the go file
    reasons = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert reasons == ["delivered", "spawned"]
    from loop_dispatch.eventlog import EventLog

    log = EventLog(state / "events.jsonl")
    assert len(log.read("session.spawned")) == 1

    def starts() -> list[dict]:
        return [
            r
            for f in convo.glob("*.jsonl")
            for r in read_conversation(convo, f.stem)
            if r["event"] == "start"
        ]

    wait_for(starts)
    time.sleep(0.3)  # a second harness, were there one, would have written its start
    assert len(starts()) == 1
    assert len([p for p in real_tmux.panes() if p.session == NAME]) == 1


def _dies_at_once(tmp_path: Path) -> GenericAdapter:
    """A harness that cannot start: prints why and exits 3 at once (like a bad flag)."""
    script = tmp_path / "broken-harness"
    script.write_text("#!/bin/sh\necho 'unknown option --frobnicate' >&2\nexit 3\n")
    script.chmod(0o755)
    return GenericAdapter(
        [str(script), "--session-id", "{session_id}", "{prompt}"],
        [str(script), "--resume", "{session_id}", "{prompt}"],
    )


def test_first_spawn_whose_harness_dies_at_once_keeps_the_event(
    real_tmux, make_dispatcher, make_event, store, events, tmp_path
):
    """A harness that exits inside the survival window did not receive the event: the
    dispatch fails retryably (delivery released, no active record), never 'spawned'."""
    broken = make_dispatcher(real_tmux, _dies_at_once(tmp_path), survival_delay=0.5)
    event = make_event(REF, body="Start here")
    outcome = broken.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "harness_exited")
    assert store.deliveries.state(event.delivery_id) is None  # released: retried later
    assert store.registry.get(REF) is None
    assert [r["type"] for r in events.read()] == ["dispatch.failed"]
    assert events.read()[0]["detail"]["reason"] == "harness_exited"

    # Once the harness is fixed, the same event starts the session.
    fixed = make_dispatcher(
        real_tmux, GenericAdapter(["sh", "-c", "exec sleep 300", "harness", "{prompt}"])
    )
    assert fixed.dispatch(event).reason == "spawned"
    assert store.registry.get(REF).active


def test_fresh_respawn_whose_harness_dies_at_once_keeps_the_event(
    real_tmux, make_dispatcher, make_event, store, events, tmp_path
):
    """AC12's fresh fallback is only 'respawned' when the new harness is still running."""
    live = make_dispatcher(
        real_tmux, GenericAdapter(["sh", "-c", "exec sleep 300", "harness", "{prompt}"])
    )
    assert live.dispatch(make_event(REF, body="one")).reason == "spawned"
    conversation = store.registry.get(REF).conversation_id
    real_tmux.kill(NAME)
    broken = make_dispatcher(real_tmux, _dies_at_once(tmp_path), survival_delay=0.5)
    event = make_event(REF, body="two")
    outcome = broken.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "harness_exited")
    assert store.deliveries.state(event.delivery_id) is None
    assert store.registry.get(REF).conversation_id == conversation  # not replaced
    assert "session.respawned" not in [r["type"] for r in events.read()]


def _unsettle(store, delivery_id: str) -> None:
    """Put a delivery back as claimed-and-unsettled: what a kill -9 before the settle leaves."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE deliveries SET state = 'claimed' WHERE delivery_id = ?", (delivery_id,)
        )


def test_an_event_whose_spawn_already_holds_it_is_never_pasted_again(
    setup, store, events, make_event, read_conversation, wait_for
):
    """A daemon killed after the first spawn and before its settle: the retried event
    finds the live harness started with it as prompt (spawn token), and settles with no
    paste. A later event is pasted as usual; a different event is never mistaken."""
    disp, _tmux, convo = setup
    first = make_event(REF, body="Fix the build")
    assert disp.dispatch(first).reason == "spawned"
    record = store.registry.get(REF)
    wait_for(_started(read_conversation, convo, record.conversation_id))
    _unsettle(store, first.delivery_id)  # the settle never happened (kill -9)

    again = disp.dispatch(first)
    assert (again.kind, again.reason) == (OutcomeKind.PROCESSED, "carried_by_spawn")
    assert [r["type"] for r in events.read("dispatch.carried")] == ["dispatch.carried"]
    assert events.read("session.adopted") == []  # already registered: nothing to adopt

    later = make_event(REF, body="and the tests")
    assert disp.dispatch(later).reason == "delivered"
    got = wait_for(lambda: _messages(read_conversation, convo, record.conversation_id))
    assert [m["text"] for m in got] == [frame(later)]  # the opening came once, as prompt
    starts = [r for r in read_conversation(convo, record.conversation_id) if r["event"] == "start"]
    assert [s["prompt"] for s in starts] == [frame(first)]


def test_a_rolled_back_spawn_that_tmux_carried_out_is_adopted_without_a_paste(
    setup, store, events, make_event, read_conversation, wait_for
):
    """The registry lost the record (a late new-session was rolled back) but the live
    session carries this event's spawn token: registered again, no paste."""
    disp, _tmux, convo = setup
    first = make_event(REF, body="Fix the build")
    assert disp.dispatch(first).reason == "spawned"
    record = store.registry.get(REF)
    wait_for(_started(read_conversation, convo, record.conversation_id))
    store.registry.reset(REF)
    _unsettle(store, first.delivery_id)

    assert disp.dispatch(first).reason == "carried_by_spawn"
    adopted = store.registry.get(REF)
    assert adopted.active
    assert adopted.conversation_id == record.conversation_id
    (event,) = events.read("session.adopted")
    assert event["detail"]["carried"] is True
    assert _messages(read_conversation, convo, record.conversation_id) == []
