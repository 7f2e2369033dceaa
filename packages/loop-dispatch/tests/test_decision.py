"""The decision table, row by row: pure, no tmux, no processes, no store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loop_dispatch.control import Hold, Verb
from loop_dispatch.decision import (
    Adopt,
    ApplyControl,
    CheckSurvival,
    Close,
    Deliver,
    DoSpawn,
    Facts,
    Observe,
    Owner,
    Paste,
    PrepareRespawn,
    Ready,
    Reopen,
    Seen,
    Settle,
    SlotVerdict,
    Spawn,
    Start,
    Survival,
    TakeSlot,
    decide,
)
from loop_dispatch.eventlog import EVENT_TYPES
from loop_dispatch.reasons import Outcome, OutcomeKind, Reason
from loop_tmux import Presence

LIVE, ABSENT, DEAD, UNKNOWN = Presence.LIVE, Presence.ABSENT, Presence.DEAD, Presence.UNKNOWN
ACTIVE = Facts(active=True)
OURS = Seen(LIVE, Owner.THIS_EVENT)
FIRST = Facts(start=Start.FIRST, spawned=Spawn.OCCUPIED_LIVE)
MISSING = replace(ACTIVE, pasted=Deliver.MISSING)
RESPAWN = replace(MISSING, missing_then=ABSENT, prepared=True)

ROWS = [
    # (row, facts, action)
    ("a close event closes", Facts(close=True), Close()),
    ("carried: settle", Facts(carried=True), Settle(Reason.CARRIED_BY_SPAWN)),
    ("own spawn live: adopt it", replace(ACTIVE, own_spawn=True, seen=OURS), Adopt(carried=True)),
    ("own spawn live, found after the paste's re-probe", replace(MISSING, seen=OURS), Adopt(True)),
    ("own spawn live, met by a first spawn", replace(FIRST, seen=OURS), Adopt(carried=True)),
    (
        "own spawn may be there, tmux silent: wait",
        replace(ACTIVE, own_spawn=True, seen=Seen(UNKNOWN)),
        Settle(Reason.TMUX_UNAVAILABLE),
    ),
    (
        "own spawn on record: look first",
        replace(ACTIVE, own_spawn=True),
        Observe(screen=False, gating=False),
    ),
    (
        "own spawn on record, screen-reading adapter: the look reads the screen",
        replace(ACTIVE, own_spawn=True, reads_screen=True),
        Observe(screen=True, gating=False),
    ),
    ("no session, may spawn: first spawn", Facts(), DoSpawn(Start.FIRST)),
    ("no session, may not spawn", Facts(spawns=False), Settle(Reason.NOT_TAKEN_ON)),
    (
        "no session, the operator's say: it never takes an item on",
        Facts(may_start=False),
        Settle(Reason.NOT_TAKEN_ON),
    ),
    ("operator's start of a closed record it can resume: look", Facts(reopen=True), Observe()),
    (
        "reopen, tmux silent",
        Facts(reopen=True, seen=Seen(UNKNOWN)),
        Settle(Reason.TMUX_UNAVAILABLE),
    ),
    (
        "reopen, a live occupant: the first-spawn rows",
        Facts(reopen=True, seen=Seen(LIVE)),
        DoSpawn(Start.FIRST),
    ),
    ("reopen, session gone: register again", Facts(reopen=True, seen=Seen(DEAD)), Reopen()),
    (
        "reopened: the respawn rows",
        Facts(reopen=True, reopened=True, active=True, missing_then=DEAD),
        PrepareRespawn(),
    ),
    (
        "reopened without a worktree",
        Facts(reopened=True, missing_then=DEAD, prepared=True, spawned=Spawn.NO_WORKSPACE),
        Settle(Reason.WORKSPACE_FAILED),
    ),
    ("active: paste", ACTIVE, Paste()),
    (
        "active, own spawn, not looked since: the gating look",
        replace(ACTIVE, own_spawn=True, seen=Seen(ABSENT)),
        Observe(),
    ),
    (
        "active, own spawn, looked: paste",
        replace(ACTIVE, own_spawn=True, seen=Seen(ABSENT), looked=True),
        Paste(),
    ),
    ("reads screen: read it", replace(ACTIVE, reads_screen=True), Observe(screen=True)),
    (
        "reads screen, silent tmux: the paste's own call decides",
        replace(ACTIVE, reads_screen=True, seen=Seen(UNKNOWN), looked=True),
        Paste(),
    ),
    (
        "a dialog: blocked",
        replace(ACTIVE, reads_screen=True, seen=Seen(LIVE, ready=Ready.BLOCKED)),
        Settle(Reason.HARNESS_BLOCKED),
    ),
    (
        "not ready",
        replace(ACTIVE, reads_screen=True, seen=Seen(LIVE, ready=Ready.NOT_READY)),
        Settle(Reason.HARNESS_NOT_READY),
    ),
    ("pasted", replace(ACTIVE, pasted=Deliver.OK), Settle(Reason.DELIVERED)),
    (
        "AC2: paste unanswered",
        replace(ACTIVE, pasted=Deliver.UNANSWERED),
        Settle(Reason.DELIVER_UNAVAILABLE),
    ),
    ("AC6: missing: look again", MISSING, Observe(reprobe=True)),
    (
        "AC6: live again: pasted into it",
        replace(ACTIVE, missing_then=LIVE, via="reprobe", pasted=Deliver.OK),
        Settle(Reason.RESPAWN_AVERTED),
    ),
    (
        "issue 23: live again, that paste unanswered: transient",
        replace(ACTIVE, missing_then=LIVE, via="reprobe", pasted=Deliver.UNANSWERED),
        Settle(Reason.DELIVER_UNAVAILABLE),
    ),
    (
        "live again, missing again",
        replace(ACTIVE, missing_then=LIVE, via="reprobe", pasted=Deliver.MISSING),
        Settle(Reason.DELIVER_FAILED),
    ),
    (
        "re-probe silent: never a respawn",
        replace(MISSING, missing_then=UNKNOWN),
        Settle(Reason.PROBE_UNKNOWN),
    ),
    ("re-probe absent: prepare", replace(MISSING, missing_then=ABSENT), PrepareRespawn()),
    (
        "re-probe absent, may not spawn (CI, a closing): never revived",
        replace(MISSING, missing_then=ABSENT, spawns=False),
        Settle(Reason.NOT_TAKEN_ON),
    ),
    (
        "a session to bring back, may not spawn: never revived",
        replace(ACTIVE, reopened=True, spawns=False),
        Settle(Reason.NOT_TAKEN_ON),
    ),
    ("re-probe dead: prepare", replace(MISSING, missing_then=DEAD), PrepareRespawn()),
    (
        "re-probe dead, the operator's say: its agent is brought back to read it",
        replace(MISSING, missing_then=DEAD, may_start=False),
        PrepareRespawn(),
    ),
    (
        "no worktree",
        replace(RESPAWN, spawned=Spawn.NO_WORKSPACE),
        Settle(Reason.WORKSPACE_FAILED),
    ),
    ("resumable: resume", RESPAWN, DoSpawn(Start.RESUME)),
    (
        "AC12: cannot resume: fresh",
        replace(RESPAWN, no_resume="nothing_saved"),
        DoSpawn(Start.FRESH, why_fresh="nothing_saved"),
    ),
    (
        "spawned: check survival",
        Facts(start=Start.FIRST, spawned=Spawn.SPAWNED),
        CheckSurvival(),
    ),
    (
        "first spawn survived",
        Facts(start=Start.FIRST, spawned=Spawn.SPAWNED, survival=Survival.SURVIVED),
        Settle(Reason.SPAWNED),
    ),
    (
        "survival unknown: the spawn stands",
        Facts(start=Start.FIRST, spawned=Spawn.SPAWNED, survival=Survival.UNKNOWN),
        Settle(Reason.SPAWNED),
    ),
    (
        "first spawn exited",
        Facts(start=Start.FIRST, spawned=Spawn.SPAWNED, survival=Survival.EXITED),
        Settle(Reason.HARNESS_EXITED),
    ),
    (
        "resume survived",
        replace(RESPAWN, start=Start.RESUME, spawned=Spawn.SPAWNED, survival=Survival.SURVIVED),
        Settle(Reason.RESPAWNED),
    ),
    (
        "AC12: resume exited: fresh",
        replace(RESPAWN, start=Start.RESUME, spawned=Spawn.SPAWNED, survival=Survival.EXITED),
        DoSpawn(Start.FRESH, why_fresh="exited_within_survival_window"),
    ),
    (
        "fresh survived",
        replace(RESPAWN, start=Start.FRESH, spawned=Spawn.SPAWNED, survival=Survival.SURVIVED),
        Settle(Reason.RESPAWNED_FRESH),
    ),
    (
        "fresh exited",
        replace(RESPAWN, start=Start.FRESH, spawned=Spawn.SPAWNED, survival=Survival.EXITED),
        Settle(Reason.HARNESS_EXITED),
    ),
    ("first spawn meets a live occupant: look", FIRST, Observe()),
    (
        "first spawn meets a live occupant, screen-reading adapter",
        replace(FIRST, reads_screen=True),
        Observe(screen=True),
    ),
    (
        "occupant, tmux silent",
        replace(FIRST, seen=Seen(UNKNOWN)),
        Settle(Reason.TMUX_UNAVAILABLE),
    ),
    (
        "a stranger is never touched",
        replace(FIRST, seen=Seen(LIVE, Owner.NOBODY)),
        Settle(Reason.OCCUPIED_UNREGISTERED),
    ),
    (
        "an occupant with this item's token: adopt",
        replace(FIRST, seen=Seen(LIVE, Owner.THIS_ITEM), looked=True),
        Adopt(carried=False),
    ),
    (
        "adopted: paste",
        replace(FIRST, seen=Seen(LIVE), looked=True, adopted=True, active=True),
        Paste(),
    ),
    (
        "adopted and pasted",
        replace(FIRST, seen=Seen(LIVE), adopted=True, active=True, pasted=Deliver.OK),
        Settle(Reason.ADOPTED),
    ),
    (
        "adopted, missing",
        replace(FIRST, adopted=True, active=True, pasted=Deliver.MISSING),
        Settle(Reason.DELIVER_FAILED),
    ),
    (
        "adopted, unanswered",
        replace(FIRST, adopted=True, active=True, pasted=Deliver.UNANSWERED),
        Settle(Reason.DELIVER_UNAVAILABLE),
    ),
    (
        "AC7: a respawn meets a live occupant: paste into it",
        replace(RESPAWN, start=Start.FRESH, spawned=Spawn.OCCUPIED_LIVE, pasted=None),
        Paste(),
    ),
    (
        "AC7: pasted into the occupant",
        replace(RESPAWN, start=Start.FRESH, spawned=Spawn.OCCUPIED_LIVE, pasted=Deliver.OK),
        Settle(Reason.RESPAWN_AVERTED),
    ),
    (
        "AC8: unclearable",
        replace(FIRST, spawned=Spawn.UNCLEARABLE),
        Settle(Reason.SESSION_OCCUPIED),
    ),
    (
        "spawn unanswered",
        replace(FIRST, spawned=Spawn.UNANSWERED),
        Settle(Reason.SPAWN_UNANSWERED),
    ),
    ("first spawn refused", replace(FIRST, spawned=Spawn.FAILED), Settle(Reason.SPAWN_FAILED)),
    (
        "AC9: respawn refused",
        replace(RESPAWN, start=Start.RESUME, spawned=Spawn.FAILED),
        Settle(Reason.RESPAWN_FAILED),
    ),
    (
        "first spawn without a worktree",
        replace(FIRST, spawned=Spawn.NO_WORKSPACE),
        Settle(Reason.WORKSPACE_FAILED),
    ),
    # issue 25: host.maxLive (a slot before a harness starts) and hibernation
    ("capped host, first spawn: ask for a slot", Facts(capped=True), TakeSlot()),
    (
        "capped host, slot granted: first spawn",
        Facts(capped=True, slot=SlotVerdict.GRANTED),
        DoSpawn(Start.FIRST),
    ),
    (
        "capped host, full: the event waits for a slot",
        Facts(capped=True, slot=SlotVerdict.FULL),
        Settle(Reason.CAPACITY_FULL),
    ),
    (
        "capped host, an event that may not spawn: no slot asked",
        Facts(capped=True, spawns=False),
        Settle(Reason.NOT_TAKEN_ON),
    ),
    (
        "capped host, reopen of a gone session: ask for a slot",
        Facts(capped=True, reopen=True, seen=Seen(DEAD)),
        TakeSlot(),
    ),
    (
        "capped host, reopen granted: register again",
        Facts(capped=True, reopen=True, seen=Seen(DEAD), slot=SlotVerdict.GRANTED),
        Reopen(),
    ),
    (
        "capped host, reopen while full: waits",
        Facts(capped=True, reopen=True, seen=Seen(DEAD), slot=SlotVerdict.FULL),
        Settle(Reason.CAPACITY_FULL),
    ),
    (
        "capped host, an active record's dead harness: respawn holds its slot already",
        replace(RESPAWN, capped=True, prepared=False),
        PrepareRespawn(),
    ),
    (
        "hibernated: look first, never paste blind",
        replace(ACTIVE, hibernated=True),
        Observe(screen=False, reprobe=True),
    ),
    (
        "hibernated, screen-reading adapter: the look reads the screen",
        replace(ACTIVE, hibernated=True, reads_screen=True),
        Observe(screen=True, reprobe=True),
    ),
    (
        "hibernated, tmux silent: wait",
        replace(ACTIVE, hibernated=True, missing_then=UNKNOWN),
        Settle(Reason.PROBE_UNKNOWN),
    ),
    (
        "hibernated, harness gone: resume it (uncapped)",
        replace(ACTIVE, hibernated=True, missing_then=DEAD),
        PrepareRespawn(),
    ),
    (
        "hibernated, an event that may not start an agent: not taken on",
        replace(ACTIVE, hibernated=True, missing_then=DEAD, spawns=False),
        Settle(Reason.NOT_TAKEN_ON),
    ),
    (
        "hibernated, capped: waking asks for a slot",
        replace(ACTIVE, hibernated=True, missing_then=ABSENT, capped=True),
        TakeSlot(),
    ),
    (
        "hibernated, capped, full: waits",
        replace(ACTIVE, hibernated=True, missing_then=ABSENT, capped=True, slot=SlotVerdict.FULL),
        Settle(Reason.CAPACITY_FULL),
    ),
    (
        "hibernated, slot granted: resume",
        replace(
            ACTIVE,
            hibernated=True,
            missing_then=ABSENT,
            capped=True,
            slot=SlotVerdict.GRANTED,
            prepared=True,
        ),
        DoSpawn(Start.RESUME),
    ),
    (
        "hibernated, found live after all: deliver into it",
        replace(ACTIVE, hibernated=True, missing_then=LIVE, via="reprobe", seen=Seen(LIVE)),
        Paste(),
    ),
    (
        "hibernated, resumed",
        replace(
            ACTIVE,
            hibernated=True,
            start=Start.RESUME,
            spawned=Spawn.SPAWNED,
            survival=Survival.SURVIVED,
        ),
        Settle(Reason.RESPAWNED),
    ),
    (
        "hibernated, its resume met a live occupant: deliver, never spawn twice",
        replace(
            ACTIVE,
            hibernated=True,
            missing_then=ABSENT,
            prepared=True,
            start=Start.RESUME,
            spawned=Spawn.OCCUPIED_LIVE,
        ),
        Paste(),
    ),
    # -- control words (issue 24) --
    ("paused item: an event waits", replace(ACTIVE, hold=Hold.PAUSED), Settle(Reason.HELD)),
    ("stopped item: an event waits", Facts(hold=Hold.STOPPED), Settle(Reason.HELD)),
    (
        "stopped item: a label never respawns it",
        replace(RESPAWN, pasted=None, hold=Hold.STOPPED),
        Settle(Reason.HELD),
    ),
    (
        "held item, own spawn live: adopted, never held",
        replace(ACTIVE, hold=Hold.PAUSED, own_spawn=True, seen=OURS),
        Adopt(carried=True),
    ),
    ("a close closes a held item", Facts(close=True, hold=Hold.PAUSED), Close()),
    ("requireStartCommand: never started, waits", Facts(awaits_start=True), Settle(Reason.HELD)),
    (
        "requireStartCommand: a CI result is still not taken on",
        Facts(awaits_start=True, spawns=False),
        Settle(Reason.NOT_TAKEN_ON),
    ),
    (
        "control refused at ingress (not authorized)",
        Facts(control=Verb.STOP, refused="not_authorized", active=True),
        Settle(Reason.CONTROL_REJECTED),
    ),
    (
        "control ambiguous: refused, nothing runs",
        Facts(refused="ambiguous", active=True),
        Settle(Reason.CONTROL_REJECTED),
    ),
    ("pause: set the hold", replace(ACTIVE, control=Verb.PAUSE), ApplyControl(Verb.PAUSE)),
    (
        "pause applied: executed",
        replace(ACTIVE, control=Verb.PAUSE, applied=True),
        Settle(Reason.CONTROL_EXECUTED),
    ),
    (
        "a control word is never held (resume of a paused item)",
        replace(ACTIVE, control=Verb.RESUME, hold=Hold.PAUSED),
        ApplyControl(Verb.RESUME),
    ),
    (
        "resume, nothing held: refused",
        replace(ACTIVE, control=Verb.RESUME),
        Settle(Reason.CONTROL_REJECTED),
    ),
    (
        "resume of a paused item applied: executed",
        replace(ACTIVE, control=Verb.RESUME, hold=Hold.PAUSED, applied=True, released=2),
        Settle(Reason.CONTROL_EXECUTED),
    ),
    (
        "resume of a stopped item: starts it, resuming the conversation",
        Facts(control=Verb.RESUME, hold=Hold.STOPPED, applied=True, reopen=True),
        Observe(),
    ),
    (
        "stop: end the harness, set the hold",
        replace(ACTIVE, control=Verb.STOP),
        ApplyControl(Verb.STOP),
    ),
    (
        "stop applied: executed",
        Facts(control=Verb.STOP, applied=True),
        Settle(Reason.CONTROL_EXECUTED),
    ),
    (
        "start, active: look",
        replace(ACTIVE, control=Verb.START, applied=True),
        Observe(reprobe=True),
    ),
    (
        "start, live: left as it is",
        replace(ACTIVE, control=Verb.START, applied=True, seen=Seen(LIVE)),
        Settle(Reason.CONTROL_EXECUTED),
    ),
    (
        "start, dead: respawn",
        replace(ACTIVE, control=Verb.START, applied=True, seen=Seen(DEAD), missing_then=DEAD),
        PrepareRespawn(),
    ),
    (
        "start, never started, events released: the command spawns, they follow",
        Facts(control=Verb.START, applied=True, released=1, awaits_start=True),
        DoSpawn(Start.FIRST),
    ),
    (
        "start, never started, nothing held: spawn",
        Facts(control=Verb.START, applied=True),
        DoSpawn(Start.FIRST),
    ),
    (
        "start, never started, capped host: a slot first",
        Facts(control=Verb.START, applied=True, capped=True),
        TakeSlot(),
    ),
    (
        "start after stop: the closed record reopens",
        Facts(control=Verb.START, applied=True, reopen=True, seen=Seen(ABSENT)),
        Reopen(),
    ),
    (
        "start spawned and survived: executed (not `spawned`)",
        Facts(
            control=Verb.START,
            applied=True,
            start=Start.FIRST,
            spawned=Spawn.SPAWNED,
            survival=Survival.SURVIVED,
        ),
        Settle(Reason.CONTROL_EXECUTED),
    ),
    (
        "start whose spawn failed: the failure stands",
        Facts(control=Verb.START, applied=True, start=Start.FIRST, spawned=Spawn.FAILED),
        Settle(Reason.SPAWN_FAILED),
    ),
    (
        "start on a closed item: refused",
        Facts(control=Verb.START, spawns=False),
        Settle(Reason.CONTROL_REJECTED),
    ),
    (
        "resume of a stopped, closed item: refused",
        Facts(control=Verb.RESUME, hold=Hold.STOPPED, spawns=False),
        Settle(Reason.CONTROL_REJECTED),
    ),
    (
        "pause on a closed item: still runs (it holds what comes)",
        Facts(control=Verb.PAUSE, spawns=False),
        ApplyControl(Verb.PAUSE),
    ),
    (
        "restart, nothing running: refused",
        Facts(control=Verb.RESTART),
        Settle(Reason.CONTROL_REJECTED),
    ),
    (
        "restart, harness cannot resume: refused",
        replace(ACTIVE, control=Verb.RESTART),
        Settle(Reason.CONTROL_REJECTED),
    ),
    (
        "restart: end the harness",
        replace(ACTIVE, control=Verb.RESTART, resumable=True),
        ApplyControl(Verb.RESTART),
    ),
    (
        "restart, harness ended: respawn resuming",
        replace(ACTIVE, control=Verb.RESTART, resumable=True, applied=True, missing_then=DEAD),
        PrepareRespawn(),
    ),
    (
        "restart prepared: resume the conversation",
        replace(
            ACTIVE,
            control=Verb.RESTART,
            resumable=True,
            applied=True,
            missing_then=DEAD,
            prepared=True,
        ),
        DoSpawn(Start.RESUME),
    ),
    (
        "restart respawned: executed",
        replace(
            ACTIVE,
            control=Verb.RESTART,
            resumable=True,
            applied=True,
            missing_then=DEAD,
            prepared=True,
            start=Start.RESUME,
            spawned=Spawn.SPAWNED,
            survival=Survival.SURVIVED,
        ),
        Settle(Reason.CONTROL_EXECUTED),
    ),
    (
        "status: read, executed",
        replace(ACTIVE, control=Verb.STATUS, hold=Hold.PAUSED, applied=True),
        Settle(Reason.CONTROL_EXECUTED),
    ),
]


@pytest.mark.parametrize(("facts", "action"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_row(facts: Facts, action: object) -> None:
    assert decide(facts) == action


def test_a_control_word_is_never_pasted() -> None:
    """Whatever the facts, a command never reaches a Paste (issue 24)."""
    for row, facts, _ in ROWS:
        if facts.control is None and not facts.refused:
            continue
        for pasted in (None, Deliver.OK):
            assert decide(replace(facts, pasted=pasted)) != Paste(), row


def test_unknown_is_never_absent() -> None:
    """Wherever a look got no answer, the table never spawns and never settles as if
    the session were gone; with this event's own spawn on record it waits."""
    for row, facts, _ in ROWS:
        if facts.close or facts.carried:
            continue
        silent = replace(facts, seen=Seen(UNKNOWN), looked=True)
        action = decide(silent)
        if facts.own_spawn:
            assert action == Settle(Reason.TMUX_UNAVAILABLE), row
        if facts.pasted is Deliver.MISSING and facts.start is None and facts.via is None:
            reprobe = decide(replace(silent, missing_then=UNKNOWN))
            assert reprobe == Settle(Reason.PROBE_UNKNOWN), row


def test_reasons_carry_their_metadata() -> None:
    transient = {r.value for r in Reason if r.transient}
    assert {"tmux_unavailable", "deliver_unavailable", "probe_unknown"} <= transient
    assert "deliver_failed" not in transient
    assert "launch_unavailable" in transient  # the runtime's reason, in the one table
    assert all(r.kind is OutcomeKind.FAILED for r in Reason if r.transient)
    assert {r.event for r in Reason if r.event} <= EVENT_TYPES  # documented (events.md)
    outcome = Outcome.of(Reason.PROBE_UNKNOWN, "x")
    assert (outcome.kind, outcome.reason, outcome.transient) == (
        OutcomeKind.FAILED,
        "probe_unknown",
        True,
    )
    assert type(outcome.reason) is str  # stored and printed as its value
    assert not Outcome(OutcomeKind.FAILED, "something_else").transient
