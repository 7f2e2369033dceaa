"""Control words through the real Dispatcher and Drain, against loop_tmux.fake, on both
store backends (issue 24): pause holds events in the inbox, resume releases them in
arrival order, stop ends the harness and holds, start resumes, refusals run nothing."""

from __future__ import annotations

import pytest

from loop_dispatch.control import Hold
from loop_dispatch.drain import Drain
from loop_dispatch.framing import frame
from loop_dispatch.model import EventKind

REF = "github:acme/widgets#7"
NAME = "loop-gh_acme_widgets_7"
V = {"loop-cli": "1", "loop-dispatch": "1", "loop-tmux": "1"}


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _typed(fake_tmux) -> str:
    return "".join("".join(map(str, e)) for e in fake_tmux.state.typed(NAME))


def _drain(store, disp, events) -> None:
    Drain(store, disp, events, versions=V, concurrency=1, idle=0.01).run(until_idle=True)


def _accept(store, *evs) -> None:
    store.inbox.accept("test", evs)


def _types(events, prefix: str) -> list[str]:
    return [r["type"] for r in events.read() if r["type"].startswith(prefix)]


def test_pause_holds_resume_releases_in_order_nothing_pasted_twice(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp = make_dispatcher(fake_tmux.tmux)
    _accept(store, make_event(REF, kind=EventKind.OPENED, body="the opening"))
    _drain(store, disp, events)
    assert NAME in fake_tmux.state.sessions()
    pause = make_event(REF, kind=EventKind.CONTROL, body="the-loop pause", delivery_id="c:1")
    first = make_event(REF, body="first while paused", delivery_id="c:2")
    second = make_event(REF, body="second while paused", delivery_id="c:3")
    _accept(store, pause, first, second)
    _drain(store, disp, events)
    assert store.controls.get(pause.work_item) is Hold.PAUSED
    held = store.inbox.entries(("paused",), work_item=REF)
    assert [e.delivery_id for e in held] == ["c:2", "c:3"]  # kept, with their events
    assert all(e.event is not None for e in held)
    assert "paused" not in _typed(fake_tmux)
    assert "the-loop pause" not in _typed(fake_tmux)
    assert store.inbox.summary()["paused"] == 2
    assert store.inbox.summary()["pending"] == 0
    # the same comment again (a redelivery, the other ingress): nothing runs twice
    _accept(store, pause)
    resume = make_event(REF, kind=EventKind.CONTROL, body="The-Loop RESUME", delivery_id="c:4")
    _accept(store, resume)
    _drain(store, disp, events)
    typed = _typed(fake_tmux)
    assert typed.count(frame(first)) == 1
    assert typed.count(frame(second)) == 1
    assert typed.index(frame(first)) < typed.index(frame(second))
    assert "the-loop" not in typed.lower().replace("the-loop-", "")  # no command pasted
    assert store.controls.get(pause.work_item) is None
    assert store.inbox.entries(("paused",)) == []
    commands = [r for r in events.read() if r["type"] == "control.command"]
    assert [c["detail"]["verb"] for c in commands] == ["pause", "resume"]
    assert commands[1]["detail"]["effect"].startswith("resumed; 2 held event(s)")
    assert len(events.read("dispatch.held")) == 2


def test_stop_ends_the_harness_holds_and_start_resumes(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp = make_dispatcher(fake_tmux.tmux)
    _accept(store, make_event(REF, kind=EventKind.OPENED, body="the opening"))
    _drain(store, disp, events)
    ref = make_event(REF).work_item
    _accept(store, make_event(REF, kind=EventKind.CONTROL, body="the-loop stop"))
    _drain(store, disp, events)
    assert store.registry.get(ref).status == "closed"
    assert store.controls.get(ref) is Hold.STOPPED
    fake_tmux.state.set_dead(NAME)  # the fake's terminate leaves the pane's program be
    later = make_event(REF, kind=EventKind.OPENED, body="labeled again", delivery_id="o:2")
    _accept(store, later)  # a label (or a poll) never respawns a stopped item
    _drain(store, disp, events)
    assert store.registry.get(ref).status == "closed"
    assert [e.delivery_id for e in store.inbox.entries(("paused",))] == ["o:2"]
    _accept(store, make_event(REF, kind=EventKind.CONTROL, body="the-loop start"))
    _drain(store, disp, events)
    record = store.registry.get(ref)
    assert record.status == "active"
    assert store.controls.get(ref) is None
    assert store.inbox.entries(("paused",)) == []
    argv = fake_tmux.state.sessions()[NAME]["argv"]
    assert argv[:3] == ["claude", "--resume", record.conversation_id]  # it goes on
    assert "the-loop start" not in " ".join(argv)
    assert frame(later) in _typed(fake_tmux)  # the held label event follows, once


def test_refusals_run_nothing(fake_tmux, make_dispatcher, make_event, store, events):
    disp = make_dispatcher(fake_tmux.tmux)
    _accept(store, make_event(REF, kind=EventKind.OPENED, body="the opening"))
    _drain(store, disp, events)
    ref = make_event(REF).work_item
    from dataclasses import replace

    stranger = replace(
        make_event(REF, kind=EventKind.CONTROL, body="the-loop stop", actor="mallory"),
        refused="not_authorized",
    )
    both = make_event(REF, kind=EventKind.CONTROL, body="the-loop pause\nthe-loop stop")
    nothing = make_event(REF, kind=EventKind.CONTROL, body="the-loop resume")
    restart = make_event(REF, kind=EventKind.CONTROL, body="the-loop restart")
    _accept(store, stranger, both, nothing)
    _drain(store, disp, events)
    assert store.registry.get(ref).status == "active"
    assert store.controls.get(ref) is None
    rejected = [r["detail"]["reason"] for r in events.read("control.rejected")]
    assert rejected == ["not_authorized", "ambiguous", "nothing_to_resume"]
    assert events.read("control.command") == []
    done = store.inbox.entries(("done",), work_item=REF)
    assert [e.last_reason for e in done][-3:] == ["control_rejected"] * 3
    assert restart.body not in _typed(fake_tmux)


def test_require_start_holds_the_opening_until_start(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """`github.requireStartCommand`: the label alone starts nothing; `start` starts the
    agent (with the operator's words, never the comment) and the held opening follows."""
    disp = make_dispatcher(fake_tmux.tmux, require_start=True)
    opening = make_event(REF, kind=EventKind.OPENED, body="the ticket's text")
    _accept(store, opening)
    _drain(store, disp, events)
    assert NAME not in fake_tmux.state.sessions()
    assert [e.delivery_id for e in store.inbox.entries(("paused",))] == [opening.delivery_id]
    (held,) = events.read("dispatch.held")
    assert held["detail"]["hold"] == "awaiting_start"
    status = make_event(REF, kind=EventKind.CONTROL, body="the-loop status")
    _accept(store, status)
    _drain(store, disp, events)
    (said,) = events.read("control.command")
    assert said["detail"]["effect"].startswith("status: not started; host ")
    assert "1 event(s) held" in said["detail"]["effect"]
    _accept(store, make_event(REF, kind=EventKind.CONTROL, body="the-loop start"))
    _drain(store, disp, events)
    argv = fake_tmux.state.sessions()[NAME]["argv"]
    assert "the-loop start" not in " ".join(argv)
    assert "started this session from the ticket" in argv[-1]
    assert store.inbox.entries(("paused",)) == []
    assert _typed(fake_tmux).count(frame(opening)) == 1  # delivered once, after the start


def test_status_of_a_paused_live_session(fake_tmux, make_dispatcher, make_event, store, events):
    disp = make_dispatcher(fake_tmux.tmux)
    _accept(store, make_event(REF, kind=EventKind.OPENED, body="the opening"))
    _accept(store, make_event(REF, kind=EventKind.CONTROL, body="the-loop pause"))
    _accept(store, make_event(REF, body="waits"))
    _accept(store, make_event(REF, kind=EventKind.CONTROL, body="the-loop status"))
    _drain(store, disp, events)
    effect = events.read("control.command")[-1]["detail"]["effect"]
    assert effect.startswith("status: paused; host ")
    assert f"tmux session {NAME}" in effect
    assert "last delivery 20" in effect  # the opening's settle time
    assert effect.endswith("1 event(s) held")
