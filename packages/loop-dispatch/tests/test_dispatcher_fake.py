"""Dispatcher decision tree against loop_tmux.fake (the modelled tmux), for the paths a
real server cannot be forced into. Each test names the seed-002 criterion it proves."""

from __future__ import annotations

import pytest

from loop_dispatch.adapters import GenericAdapter
from loop_dispatch.dispatcher import OutcomeKind
from loop_dispatch.framing import frame
from loop_dispatch.model import EventKind
from loop_tmux import Observation, Presence

REF = "github:acme/widgets#7"
NAME = "loop-gh_acme_widgets_7"


def _types(events) -> list[str]:
    return [r["type"] for r in events.read()]


def _vanish_then_return(fake_tmux) -> None:
    """Remove NAME now; put a live NAME back just before the next look at it (a racing
    restart by another actor), once."""
    with fake_tmux.state.edit() as state:
        saved = state["sessions"].pop(NAME)
    real_observe = fake_tmux.tmux.observe

    def observe(name, **kw):
        fake_tmux.tmux.observe = real_observe
        with fake_tmux.state.edit() as state:
            state["sessions"][NAME] = saved
        return real_observe(name, **kw)

    fake_tmux.tmux.observe = observe


def _start(fake_tmux, make_dispatcher, make_event, store, **kw):
    """A registered, live session for REF (the first spawn of the tree)."""
    disp = make_dispatcher(fake_tmux.tmux, **kw)
    first = disp.dispatch(make_event(REF))
    assert first.kind is OutcomeKind.PROCESSED, first.detail
    assert first.reason == "spawned"
    assert NAME in fake_tmux.state.sessions()
    return disp, store.registry.get(make_event(REF).work_item)


def test_first_spawn_registers_and_records_a_fresh_conversation(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp = make_dispatcher(fake_tmux.tmux)
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "spawned")
    record = store.registry.get(event.work_item)
    assert record.status == "active"
    assert record.tmux_name == NAME
    session = fake_tmux.state.sessions()[NAME]
    assert session["argv"][:3] == ["claude", "--session-id", record.conversation_id]
    assert session["argv"][-1] == frame(event)  # the prompt is one whole argv element
    assert session["env"] == {"THE_LOOP_WORK_ITEM": REF}
    assert store.deliveries.state(event.delivery_id) == "processed"
    assert _types(events) == ["session.spawned"]


def test_duplicate_delivery_is_dropped_and_logged_at_debug(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    event = make_event(REF, delivery_id="comment:github:1")
    assert disp.dispatch(event).kind is OutcomeKind.PROCESSED
    before = len(fake_tmux.state.log())
    again = disp.dispatch(event)
    assert again.kind is OutcomeKind.DUPLICATE
    assert len(fake_tmux.state.log()) == before  # no tmux call at all
    dup = events.read("dispatch.duplicate")
    assert dup[0]["level"] == "debug"
    assert dup[0]["deliveryId"] == event.delivery_id


def test_active_session_gets_the_framed_event_pasted(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    event = make_event(REF, body="```\nrun `make test`\n```")
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "delivered")
    typed = fake_tmux.state.typed(NAME)
    assert any(frame(event) in "".join(map(str, entry)) for entry in typed)
    assert "dispatch.delivered" in _types(events)


def test_ac2_unanswered_delivery_fails_retryably_and_never_respawns(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC2: a probe/delivery tmux does not answer is a transient failure, not 'missing'."""
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    fake_tmux.state.set_fault("hang", ["*"])
    event = make_event(REF)
    outcome = disp.dispatch(event)
    fake_tmux.state.clear_faults()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "deliver_unavailable")
    assert store.deliveries.state(event.delivery_id) is None  # released: retryable
    assert fake_tmux.verbs().count("new-session") == 1  # only the first spawn
    assert store.registry.get(record.work_item) == record
    assert not {"session.respawned", "session.resume_failed"} & set(_types(events))
    # The retry lands once tmux answers again.
    assert disp.dispatch(event).reason == "delivered"


def test_ac6_missing_on_delivery_but_live_on_reprobe_is_an_averted_respawn(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC6: re-probe before respawning; a live session gets the event instead."""
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    # The session is gone when the delivery looks, and live again (someone else
    # restarted it) by the time the dispatcher re-probes.
    _vanish_then_return(fake_tmux)
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawn_averted")
    assert fake_tmux.verbs().count("new-session") == 1
    assert store.deliveries.state(event.delivery_id) == "processed"
    averted = events.read("session.respawn_averted")
    assert averted[0]["detail"]["via"] == "reprobe"
    assert "session.respawned" not in _types(events)
    assert store.registry.get(record.work_item).conversation_id == record.conversation_id


def test_ac7_respawn_spawn_meeting_a_live_occupant_delivers_into_it(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC7: the respawn's spawn reports occupied-live: deliver there, processed."""
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
        state["faults"]["duplicate"] = {NAME: {"times": 1, "occupant": "live"}}
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawn_averted")
    assert events.read("session.respawn_averted")[0]["detail"]["via"] == "spawn"
    assert any(frame(event) in "".join(map(str, e)) for e in fake_tmux.state.typed(NAME))
    assert "session.respawned" not in _types(events)


def test_ac8_unclearable_occupant_is_skipped_and_the_delivery_kept(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC8: a dead occupant that cannot be cleared -> skipped, session_occupied, kept."""
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    fake_tmux.state.set_dead(NAME)
    fake_tmux.state.set_fault("kill_noop", ["*"])
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.SKIPPED, "session_occupied")
    assert "tmux kill-session -t " + NAME in outcome.detail
    assert store.deliveries.state(event.delivery_id) == "skipped"
    assert disp.dispatch(event).kind is OutcomeKind.DUPLICATE  # never re-attempted
    skipped = events.read("dispatch.skipped")
    assert skipped[0]["detail"]["reason"] == "session_occupied"
    assert fake_tmux.verbs().count("new-session") == 1  # no spawn into the collision


def test_ac9_other_respawn_failure_is_failed_and_released(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC9: any other respawn failure stays dispatch.failed with the delivery released."""
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
        state["faults"]["fail"] = {"new-session": "create window failed: fork failed"}
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "respawn_failed")
    assert "fork failed" in outcome.detail
    assert store.deliveries.state(event.delivery_id) is None
    failed = events.read("dispatch.failed")
    assert failed[-1]["detail"]["reason"] == "respawn_failed"
    fake_tmux.state.clear_faults()
    assert disp.dispatch(event).reason == "respawned"  # the retry heals


def test_ac10_each_outcome_has_its_own_observable_type(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC10: averted respawn and skipped-occupied are distinct from respawned,
    resume_failed and a transient dispatch.failed."""
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    _vanish_then_return(fake_tmux)
    disp.dispatch(make_event(REF))  # averted
    fake_tmux.state.set_fault("hang", ["*"])
    disp.dispatch(make_event(REF))  # transient failure
    fake_tmux.state.clear_faults()
    fake_tmux.state.set_dead(NAME)
    fake_tmux.state.set_fault("kill_noop", ["*"])
    disp.dispatch(make_event(REF))  # skipped
    by_type = {r["type"]: r for r in events.read()}
    assert by_type["session.respawn_averted"]["level"] == "info"
    assert by_type["dispatch.skipped"]["detail"]["reason"] == "session_occupied"
    assert by_type["dispatch.failed"]["detail"]["reason"] == "deliver_unavailable"
    assert "session.respawned" not in by_type
    assert "session.resume_failed" not in by_type


def test_ac12_resume_that_dies_in_the_survival_window_falls_back_to_fresh(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """AC12: resume is tried first; a pane that does not survive -> resume_failed, then a
    fresh conversation whose id the registry records."""
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    dies = [True]

    def die_once() -> None:
        if dies and NAME in fake_tmux.state.sessions():
            dies.pop()
            fake_tmux.state.set_dead(NAME)

    fake_tmux.on_sleep.append(die_once)
    outcome = disp.dispatch(make_event(REF))
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawned_fresh")
    failed = events.read("session.resume_failed")
    assert failed[0]["detail"]["reason"] == "exited_within_survival_window"
    respawned = events.read("session.respawned")[-1]["detail"]
    assert respawned["resumed"] is False
    new_id = store.registry.get(record.work_item).conversation_id
    assert new_id != record.conversation_id
    assert respawned["conversation_id"] == new_id
    argv = fake_tmux.state.sessions()[NAME]["argv"]
    assert argv[1:3] == ["--session-id", new_id]


def test_ac12_adapter_without_resume_starts_fresh_with_resume_failed(
    fake_tmux, make_dispatcher, make_event, store, events
):
    adapter = GenericAdapter(["agent", "--id", "{session_id}", "{prompt}"], name="agent")
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store, adapter=adapter)
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    outcome = disp.dispatch(make_event(REF))
    assert outcome.reason == "respawned_fresh"
    assert events.read("session.resume_failed")[0]["detail"]["reason"] == "adapter_cannot_resume"
    assert store.registry.get(record.work_item).conversation_id != record.conversation_id


def test_unknown_reprobe_never_respawns(fake_tmux, make_dispatcher, make_event, store, events):
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    fake_tmux.state.set_fault("fail", {"has-session": f"can't find session: {NAME}"})
    with fake_tmux.state.edit() as state:
        state["faults"]["hang"] = ["list-panes"]
    outcome = disp.dispatch(make_event(REF))
    fake_tmux.state.clear_faults()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "probe_unknown")
    assert fake_tmux.verbs().count("new-session") == 1


def test_first_spawn_into_unregistered_live_occupant_fails_with_remedy(
    fake_tmux, make_dispatcher, make_event, store, events
):
    fake_tmux.state.add_session(NAME)
    disp = make_dispatcher(fake_tmux.tmux)
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "occupied_unregistered")
    assert f"tmux kill-session -t {NAME}" in outcome.detail
    assert f"the-loop sessions reset {REF}" in outcome.detail
    assert NAME in fake_tmux.state.sessions()
    assert "kill-session" not in fake_tmux.verbs()  # never killed
    assert store.registry.get(event.work_item) is None  # registration undone
    assert store.deliveries.state(event.delivery_id) is None  # retryable


def test_first_spawn_failure_restores_a_closed_record(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    disp.close(record.work_item)
    closed = store.registry.get(record.work_item)
    fake_tmux.state.set_fault("fail", {"new-session": "server exited unexpectedly"})
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    outcome = disp.dispatch(make_event(REF))
    assert outcome.reason == "spawn_failed"
    assert store.registry.get(record.work_item) == closed


@pytest.mark.parametrize("how", ["event", "method"])
def test_close_terminates_keeps_the_pane_and_closes_the_record(
    fake_tmux, make_dispatcher, make_event, store, events, how
):
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    if how == "event":
        outcome = disp.dispatch(make_event(REF, kind=EventKind.CLOSED))
    else:
        outcome = disp.close(record.work_item)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "closed")
    assert store.registry.get(record.work_item).status == "closed"
    assert NAME in fake_tmux.state.sessions()  # scrollback kept: the session stays
    assert "kill-session" not in fake_tmux.verbs()
    assert events.read("session.closed")[0]["workItem"] == REF
    # The fake's pane pids cannot be signalled; let its harness exit as a real one would.
    fake_tmux.state.set_dead(NAME)
    # A later event starts a new conversation in place of the dead pane.
    again = disp.dispatch(make_event(REF))
    assert again.reason == "spawned"


def test_manual_start_goes_through_the_same_tree(fake_tmux, make_dispatcher, store, events):
    from loop_dispatch.model import WorkItemRef

    disp = make_dispatcher(fake_tmux.tmux)
    ref = WorkItemRef.parse(REF)
    assert disp.start(ref, "Work on the flaky test").reason == "spawned"
    assert disp.start(ref, "And then the docs").reason == "delivered"
    assert "Operator request" in fake_tmux.state.sessions()[NAME]["argv"][-1]


def test_an_unexpected_error_releases_the_claim(
    fake_tmux, make_dispatcher, make_event, store, events
):
    def broken_launcher(record, argv):
        raise RuntimeError("launcher exploded")

    disp = make_dispatcher(fake_tmux.tmux, launcher=broken_launcher)
    event = make_event(REF)
    outcome = disp.dispatch(event)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "internal_error")
    assert "launcher exploded" in outcome.detail
    assert store.deliveries.state(event.delivery_id) is None
    assert events.read("dispatch.failed")[0]["level"] == "error"


def test_close_without_killing_leaves_the_harness_running(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp, record = _start(
        fake_tmux, make_dispatcher, make_event, store, kill_harness_on_close=False
    )
    outcome = disp.close(record.work_item)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "closed")
    assert store.registry.get(record.work_item).status == "closed"
    assert fake_tmux.tmux.probe(NAME).value == "live"
    assert events.read("session.closed")[0]["detail"]["harness_kept"] is True
    # The kept harness is never killed by a later event: it carries this item's spawn
    # token, so it is adopted and the event delivered into it.
    later = make_event(REF)
    assert disp.dispatch(later).reason == "adopted"
    assert fake_tmux.tmux.probe(NAME).value == "live"
    assert "kill-session" not in fake_tmux.verbs()
    assert store.registry.get(record.work_item).conversation_id == record.conversation_id
    assert events.read("session.adopted")[0]["deliveryId"] == later.delivery_id


def test_a_live_occupant_with_another_items_token_is_a_stranger(
    fake_tmux, make_dispatcher, make_event, store, events
):
    fake_tmux.state.add_session(NAME)
    with fake_tmux.state.edit() as state:
        state["sessions"][NAME]["options"] = {"@loop_spawn_token": "0" * 32}
    outcome = make_dispatcher(fake_tmux.tmux).dispatch(make_event(REF))
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "occupied_unregistered")
    assert not outcome.transient
    assert "kill-session" not in fake_tmux.verbs()


def test_a_new_session_carried_out_late_is_adopted_by_the_next_attempt(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """tmux times out on new-session but creates the session anyway (a stalled server
    resuming): the attempt is transient, the registry rolled back, and the next attempt
    finds the session carrying this item's token and delivers into it."""
    fake_tmux.state.set_fault("late", ["new-session"])
    disp = make_dispatcher(fake_tmux.tmux)
    first = make_event(REF)
    outcome = disp.dispatch(first)
    assert (outcome.reason, outcome.transient) == ("spawn_unanswered", True)
    assert store.registry.get(first.work_item) is None
    assert fake_tmux.tmux.probe(NAME).value == "live"  # tmux carried it out
    fake_tmux.state.clear_faults()
    second = make_event(REF)
    assert disp.dispatch(second).reason == "adopted"
    record = store.registry.get(first.work_item)
    assert record is not None
    assert record.active
    assert fake_tmux.state.typed(NAME)  # the event was pasted into that same session
    assert fake_tmux.verbs().count("new-session") == 1


def test_a_late_spawn_whose_presence_tmux_cannot_tell_is_never_pasted_into(
    fake_tmux, make_dispatcher, make_event, store, events, monkeypatch
):
    """The retry of an event whose own spawn tmux carried out late: while tmux will not
    say whether that session is live, the attempt waits (transient) instead of taking
    the ordinary path, which would meet the live session and paste the event a second
    time; once tmux answers, the event is carried by that spawn and nothing is pasted."""
    fake_tmux.state.set_fault("late", ["new-session"])
    disp = make_dispatcher(fake_tmux.tmux)
    first = make_event(REF)
    assert disp.dispatch(first).reason == "spawn_unanswered"
    fake_tmux.state.clear_faults()
    # Only the look at the session goes unanswered (the one answer tmux withheld); the
    # spawn the ordinary path would try next is answered, "duplicate session".
    monkeypatch.setattr(
        fake_tmux.tmux, "observe", lambda name, **_: Observation(presence=Presence.UNKNOWN)
    )
    unsure = disp.dispatch(first)
    assert (unsure.kind, unsure.transient) == (OutcomeKind.FAILED, True), unsure
    assert fake_tmux.state.typed(NAME) == []
    monkeypatch.undo()
    again = disp.dispatch(first)
    assert again.reason == "carried_by_spawn"
    assert fake_tmux.state.typed(NAME) == []  # the prompt was its argv; no paste
    assert fake_tmux.verbs().count("new-session") == 1


def test_a_late_respawn_that_lands_after_the_check_is_adopted_not_pasted_into(
    fake_tmux, make_dispatcher, make_event, store, events, monkeypatch
):
    """The respawn path: an active item's session is gone, the respawn that would carry
    the event as its prompt goes unanswered but tmux carries it out late, after the next
    attempt's first look. That attempt finds the session live on its ordinary path and
    must adopt it (its own spawn holds the event), not paste the event a second time."""
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    fake_tmux.state.set_fault("late", ["new-session"])
    event = make_event(REF)
    first = disp.dispatch(event)
    assert first.transient, first
    fake_tmux.state.clear_faults()
    assert fake_tmux.tmux.probe(NAME).value == "live"  # carried out late
    real = fake_tmux.tmux.observe
    calls = []

    def not_yet_then_real(name, **kw):  # the first look came before tmux carried it out
        calls.append(name)
        return Observation(presence=Presence.ABSENT) if len(calls) == 1 else real(name, **kw)

    monkeypatch.setattr(fake_tmux.tmux, "observe", not_yet_then_real)
    again = disp.dispatch(event)
    assert again.reason == "carried_by_spawn", again
    assert fake_tmux.state.typed(NAME) == []  # the prompt was its argv; no paste
    assert len(calls) >= 2


def test_a_store_that_cannot_claim_is_a_retryable_failure(
    fake_tmux, make_dispatcher, make_event, store, events, monkeypatch
):
    import sqlite3

    from loop_dispatch.deliveries import Deliveries

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(Deliveries, "claim", locked)
    disp = make_dispatcher(fake_tmux.tmux)
    outcome = disp.dispatch(make_event(REF))
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "store_unavailable")
    assert "database is locked" in outcome.detail
    assert fake_tmux.state.log() == []  # nothing done in tmux


def test_ac12_unanswered_survival_check_keeps_the_resume_unverified(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """tmux silent during the survival window: the resumed pane already carries the
    event, so no second conversation is started on a guess."""
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    fake_tmux.on_sleep.append(lambda: fake_tmux.state.set_fault("hang", ["list-panes"]))
    outcome = disp.dispatch(make_event(REF))
    fake_tmux.on_sleep.clear()
    fake_tmux.state.clear_faults()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawned")
    detail = events.read("session.respawned")[0]["detail"]
    assert (detail["resumed"], detail["verified"]) == (True, False)
    assert fake_tmux.verbs().count("new-session") == 2
    assert store.registry.get(record.work_item).conversation_id == record.conversation_id


def test_bodies_and_env_values_never_reach_the_event_log(
    fake_tmux, make_dispatcher, make_event, store, events, tmp_path
):
    from loop_dispatch.launch import LaunchSpec

    secret = "TOKEN-VALUE-9f8e7d"

    def launcher(record, argv):
        return LaunchSpec(list(argv), {"API_TOKEN": secret})

    disp = make_dispatcher(fake_tmux.tmux, launcher=launcher)
    marker = "BODY-MARKER-1a2b3c"
    disp.dispatch(make_event(REF, body=marker))  # spawn: the body is the prompt
    disp.dispatch(make_event(REF, body=marker))  # delivered
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    disp.dispatch(make_event(REF, body=marker))  # respawned
    fake_tmux.state.set_fault("hang", ["*"])
    disp.dispatch(make_event(REF, body=marker))  # failed
    fake_tmux.state.clear_faults()
    text = events.path.read_text()
    assert len(events.read()) >= 4
    assert marker not in text
    assert secret not in text


def test_a_manual_start_after_close_resumes_the_recorded_conversation(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """`sessions start` after `sessions stop`: the same conversation goes on; any other
    event after a close still starts a new one (the close test above)."""
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    assert disp.close(record.work_item).reason == "closed"
    fake_tmux.state.set_dead(NAME)
    outcome = disp.start(record.work_item, "Carry on")
    assert (outcome.kind, outcome.reason) == (OutcomeKind.PROCESSED, "respawned")
    again = store.registry.get(record.work_item)
    assert (again.status, again.conversation_id) == ("active", record.conversation_id)
    argv = fake_tmux.state.sessions()[NAME]["argv"]
    assert argv[:3] == ["claude", "--resume", record.conversation_id]
    (respawned,) = events.read("session.respawned")
    assert respawned["detail"]["resumed"] is True


def test_a_manual_start_after_close_that_cannot_resume_restores_the_closed_record(
    fake_tmux, make_dispatcher, make_event, store, events
):
    disp, record = _start(fake_tmux, make_dispatcher, make_event, store)
    disp.close(record.work_item)
    fake_tmux.state.set_dead(NAME)
    closed = store.registry.get(record.work_item)
    fake_tmux.state.set_fault("fail", {"new-session": "server exited unexpectedly"})
    with fake_tmux.state.edit() as state:
        del state["sessions"][NAME]
    outcome = disp.start(record.work_item, "Carry on")
    assert outcome.kind is OutcomeKind.FAILED
    assert store.registry.get(record.work_item) == closed


def test_silence_after_an_averted_respawn_is_transient_and_uses_no_attempt(
    fake_tmux, make_dispatcher, make_event, store, events
):
    """Issue 23: the paste found the session missing, the re-probe found it live again,
    and the paste into it got no answer. That silence is the same transient fault as on
    the ordinary path (AC2), never a definite `deliver_failed` that burns an attempt."""
    disp, _ = _start(fake_tmux, make_dispatcher, make_event, store)
    with fake_tmux.state.edit() as state:
        saved = state["sessions"].pop(NAME)
    real_observe = fake_tmux.tmux.observe

    def back_but_silent(name, **kw):  # someone restarted it; tmux then stalls on the paste
        fake_tmux.tmux.observe = real_observe
        with fake_tmux.state.edit() as state:
            state["sessions"][NAME] = saved
            state["faults"]["hang"] = ["load-buffer"]
        return real_observe(name, **kw)

    fake_tmux.tmux.observe = back_but_silent
    event = make_event(REF)
    outcome = disp.dispatch(event)
    fake_tmux.state.clear_faults()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "deliver_unavailable")
    assert outcome.transient
    assert store.deliveries.state(event.delivery_id) is None  # released: retried
    assert fake_tmux.verbs().count("new-session") == 1  # never respawned
