"""One dispatch attempt as a decision table: `decide(facts) -> action`, pure and total.

The executor (executor.py) gathers the facts, performs the one action decided and
returns the facts with what that action saw; the dispatcher loops until a `Settle`.
Every race fixed in the dispatcher's history is a row that fires wherever its fact
shows up (docs/dispatch.md, "The decision table"), not a check copied to each place
the race was found. New states of an item's life are new rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from loop_tmux import Presence

from .control import Hold, Verb
from .reasons import Reason

__all__ = [
    "Action",
    "Adopt",
    "ApplyControl",
    "CheckSurvival",
    "Close",
    "Deliver",
    "DoSpawn",
    "Facts",
    "Observe",
    "Owner",
    "Paste",
    "PrepareRespawn",
    "Ready",
    "Reopen",
    "Seen",
    "Settle",
    "SlotVerdict",
    "Spawn",
    "Start",
    "Survival",
    "TakeSlot",
    "control_refusal",
    "decide",
]


class Owner(Enum):
    """Whose session a look found, by its spawn token (classified by the executor)."""

    THIS_EVENT = "this_event"  # a token issued for a spawn that carried this very event
    THIS_ITEM = "this_item"  # a token of this item's, or not asked
    NOBODY = "nobody"  # no token of this item's: a stranger


class Ready(Enum):
    READY = "ready"  # or nothing to read: the paste's own answer decides
    NOT_READY = "not_ready"
    BLOCKED = "blocked"  # a dialog holds the harness


@dataclass(frozen=True)
class Seen:
    """One look at the session (`Tmux.observe`): UNKNOWN is tmux's silence, kept apart."""

    presence: Presence
    owner: Owner = Owner.THIS_ITEM
    ready: Ready | None = None  # None: the screen was not read


class Deliver(Enum):
    """What a paste found (`Tmux.deliver`)."""

    OK = "ok"
    MISSING = "missing"  # tmux said the session is absent or dead
    UNANSWERED = "unanswered"  # tmux did not answer (or a gate held the paste back)


class Start(Enum):
    FIRST = "first"
    RESUME = "resume"
    FRESH = "fresh"


class Spawn(Enum):
    SPAWNED = "spawned"
    OCCUPIED_LIVE = "occupied_live"
    UNCLEARABLE = "unclearable"
    FAILED = "failed"  # tmux refused
    UNANSWERED = "unanswered"  # tmux did not answer: it may still carry it out
    NO_WORKSPACE = "no_workspace"  # the worktree could not be made: nothing was spawned


class SlotVerdict(Enum):
    """What the host's capacity said (`host.maxLive`, capacity.py)."""

    GRANTED = "granted"
    FULL = "full"  # the host is full, or older items wait for the next slot


class Survival(Enum):
    SURVIVED = "survived"
    EXITED = "exited"
    UNKNOWN = "unknown"  # tmux did not answer: the spawn stands, unverified


@dataclass(frozen=True)
class Facts:
    """What one attempt knows so far. Immutable: each action returns a new value."""

    close: bool = False  # the event closes the item
    spawns: bool = True  # the event may start an agent (Event.spawns)
    may_start: bool = True  # it may start one where none is registered (not `say`)
    active: bool = False  # the registry holds an active record for the item
    own_spawn: bool = False  # the store holds a spawn token issued WITH this event
    reads_screen: bool = False  # the adapter reads readiness from the screen
    reopen: bool = False  # an operator's start of a closed record it can resume
    reopened: bool = False  # that record is active again under its conversation
    seen: Seen | None = None  # the last look (reset by every tmux mutation)
    looked: bool = False  # nothing touched tmux since that look
    carried: bool = False  # this event's own live spawn was adopted
    pasted: Deliver | None = None  # the last paste's answer
    missing_then: Presence | None = None  # the re-probe after a paste found it missing
    via: str | None = None  # delivering into a session found live after all: how
    adopted: bool = False  # a live occupant with this item's token was re-registered
    start: Start | None = None  # the last spawn asked for
    spawned: Spawn | None = None
    survival: Survival | None = None
    prepared: bool = False  # the respawn's worktree and resume check are done
    no_resume: str | None = None  # why a respawn cannot resume (None: it can)
    capped: bool = False  # host.maxLive is set: a harness that starts takes a slot
    hibernated: bool = False  # the record's harness was ended while idle (issue 25)
    slot: SlotVerdict | None = None  # the capacity's answer (None: not asked)
    # Control words (issue 24): the item's hold, and a command's own facts.
    hold: Hold | None = None  # the item is paused or stopped: its events wait
    awaits_start: bool = False  # github.requireStartCommand and the item never started
    control: Verb | None = None  # this event is a control word with this verb
    refused: str | None = None  # why it cannot run, known at ingress (not authorized...)
    resumable: bool = False  # the active record's conversation can be resumed
    applied: bool = False  # the command's own change (hold, harness ended) is made
    released: int = 0  # held events that change put back in the item's queue


# -- actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Observe:
    """ONE tmux call: presence and spawn token, and the screen when asked."""

    screen: bool = False
    reprobe: bool = False  # the look after a paste found the session missing
    gating: bool = True  # counts as the look right before a paste


@dataclass(frozen=True)
class Paste:
    pass


@dataclass(frozen=True)
class PrepareRespawn:
    """The worktree (remade if it went) and whether the conversation can be resumed."""


@dataclass(frozen=True)
class DoSpawn:
    start: Start
    why_fresh: str | None = None  # a respawn that cannot resume: `session.resume_failed`


@dataclass(frozen=True)
class CheckSurvival:
    pass


@dataclass(frozen=True)
class Adopt:
    """Re-register the item from the occupant's spawn token row."""

    carried: bool  # the occupant is this event's own spawn: nothing is pasted


@dataclass(frozen=True)
class Reopen:
    """Register the closed record again under its conversation (then a respawn)."""


@dataclass(frozen=True)
class TakeSlot:
    """Ask the host's capacity for a slot (held until the record is active)."""


@dataclass(frozen=True)
class Close:
    pass


@dataclass(frozen=True)
class ApplyControl:
    """A control word's own change: set or lift the hold (releasing held events), end
    the harness (`stop`, `restart`); the spawn rows carry `start` and `restart` on."""

    verb: Verb


@dataclass(frozen=True)
class Settle:
    reason: Reason


Action = (
    Observe
    | Paste
    | PrepareRespawn
    | DoSpawn
    | CheckSurvival
    | Adopt
    | Reopen
    | TakeSlot
    | Close
    | Settle
    | ApplyControl
)

_SUCCESS = {Start.FIRST: Reason.SPAWNED, Start.RESUME: Reason.RESPAWNED}


# -- the table --------------------------------------------------------------------------


def decide(f: Facts) -> Action:
    """The next action for an attempt that knows `f`. Rows are checked top to bottom."""
    action = _decide(f)
    # A command that took the spawn rows succeeded as a command, never as a delivery.
    if f.control is not None and isinstance(action, Settle) and action.reason in _STARTED:
        return Settle(Reason.CONTROL_EXECUTED)
    return action


_STARTED = frozenset(
    {Reason.SPAWNED, Reason.RESPAWNED, Reason.RESPAWNED_FRESH, Reason.ADOPTED, Reason.DELIVERED}
)


def control_refusal(f: Facts) -> str | None:
    """Why the control word in `f` is refused (a stable token), None when it runs."""
    if f.refused:
        return f.refused
    if f.control is Verb.RESUME and f.hold is None:
        return "nothing_to_resume"
    resumes = f.control is Verb.RESUME and f.hold is Hold.STOPPED
    if (f.control in (Verb.START, Verb.RESTART) or resumes) and not f.spawns:
        return "item_closed"  # a closed item gets no session
    if f.control is Verb.RESTART and not f.active:
        return "nothing_to_restart"
    if f.control is Verb.RESTART and not f.resumable:
        return "not_resumable"
    return None


def _control(f: Facts) -> Action:
    """A control word: never pasted; refused with a reason, or its change, then for
    `start` (and `resume` of a stopped item) and `restart` the spawn rows."""
    if control_refusal(f) is not None:
        return Settle(Reason.CONTROL_REJECTED)
    verb = f.control
    assert verb is not None
    if not f.applied:
        return ApplyControl(verb)
    if verb is Verb.RESTART:  # the harness was ended: respawn, resuming its conversation
        return _respawn(f) if f.start is None else _after_spawn(f)
    starts = verb is Verb.START or (verb is Verb.RESUME and f.hold is Hold.STOPPED)
    if not starts:
        return Settle(Reason.CONTROL_EXECUTED)
    return _start(f)


def _start(f: Facts) -> Action:
    """`start`: a live session is left as it is; a dead one comes back; a stopped one
    resumes its conversation; an item never started is spawned by the command itself."""
    if f.start is not None:
        return _after_spawn(f)
    if f.reopened:
        return _respawn(f)
    if f.active:
        if f.seen is None:
            return Observe(reprobe=True)
        if f.seen.presence is Presence.LIVE:
            return Settle(Reason.CONTROL_EXECUTED)
        if f.seen.presence is Presence.UNKNOWN:
            return Settle(Reason.TMUX_UNAVAILABLE)
        return _respawn(f)
    if f.reopen:  # stopped: its conversation goes on; released events then follow it
        return _reopen(f)
    # Never started: the command starts it (its released events, the opening first,
    # follow in order), so a held opening never waits for a start a second time.
    return _slot(f) or DoSpawn(Start.FIRST)


def _decide(f: Facts) -> Action:
    if f.close:
        return Close()
    if f.control is not None or f.refused:
        return _control(f)
    if f.carried:
        return Settle(Reason.CARRIED_BY_SPAWN)
    seen = f.seen
    # This event's own spawn is live (found by whichever look sees it): adopt, never paste.
    if seen is not None and seen.presence is Presence.LIVE and seen.owner is Owner.THIS_EVENT:
        return Adopt(carried=True)
    # Our own spawn may be there and tmux will not say: wait, never guess.
    if f.own_spawn and seen is not None and seen.presence is Presence.UNKNOWN:
        return Settle(Reason.TMUX_UNAVAILABLE)
    # An event an earlier attempt spawned with is looked at before this attempt acts.
    if f.own_spawn and seen is None and f.start is None and f.pasted is None:
        return Observe(screen=f.reads_screen and f.active, gating=False)
    # A paused or stopped item, or one waiting for its `start`: the event waits.
    waits = f.hold is not None or (f.awaits_start and not f.active and f.spawns)
    if waits and f.start is None and f.pasted is None and not f.reopened:
        return Settle(Reason.HELD)
    if f.start is not None:
        return _after_spawn(f)
    if f.reopened:
        return _respawn(f)
    if not f.active:
        # The operator's `say` reaches the agents there are; it never takes an item on.
        if not f.spawns or not f.may_start:
            return Settle(Reason.NOT_TAKEN_ON)
        if f.reopen:
            return _reopen(f)
        return _slot(f) or DoSpawn(Start.FIRST)
    return _deliver(f)


def _slot(f: Facts) -> Action | None:
    """Before a harness starts that holds no slot yet: ask (capped hosts only); a full
    host defers the event (`capacity_full`: transient, oldest waiting item first)."""
    if not f.capped or f.slot is SlotVerdict.GRANTED:
        return None
    if f.slot is None:
        return TakeSlot()
    return Settle(Reason.CAPACITY_FULL)


def _reopen(f: Facts) -> Action:
    """`sessions start` after `sessions stop`: the conversation goes on (a respawn that
    resumes it); a live occupant takes the first-spawn rows (ours adopted, a stranger's
    refused)."""
    if f.seen is None:
        return Observe()
    if f.seen.presence is Presence.UNKNOWN:
        return Settle(Reason.TMUX_UNAVAILABLE)
    if f.seen.presence is Presence.LIVE:
        return DoSpawn(Start.FIRST)
    return _slot(f) or Reopen()


def _deliver(f: Facts) -> Action:
    """Into the registered (or adopted, or found-live) session: readiness, paste, answer."""
    if f.hibernated and f.via is None and f.pasted is None and f.start is None:
        # Its harness was ended on purpose: look (never paste blind), then resume it.
        if f.missing_then is None:
            return Observe(screen=f.reads_screen, reprobe=True)
        return _respawn(f)
    if f.pasted is None:
        ready = None if f.seen is None else f.seen.ready
        if f.reads_screen and ready is None and not _looked_unknown(f):
            return Observe(screen=True)
        if ready is Ready.BLOCKED:
            return Settle(Reason.HARNESS_BLOCKED)
        if ready is Ready.NOT_READY:
            return Settle(Reason.HARNESS_NOT_READY)
        if f.own_spawn and not f.looked:  # the gating look is the last thing before a paste
            return Observe()
        return Paste()
    averted = f.via is not None or f.start in (Start.RESUME, Start.FRESH)
    if f.pasted is Deliver.OK:
        if f.adopted:
            return Settle(Reason.ADOPTED)
        return Settle(Reason.RESPAWN_AVERTED if averted else Reason.DELIVERED)
    if f.pasted is Deliver.UNANSWERED:  # AC2: silence is never "missing", on every path
        return Settle(Reason.DELIVER_UNAVAILABLE)
    # Deliver.MISSING
    if f.adopted or averted:  # missing again after a live look
        return Settle(Reason.DELIVER_FAILED)
    if f.missing_then is None:
        return Observe(screen=f.reads_screen, reprobe=True)  # AC6: look again first
    return _respawn(f)


def _looked_unknown(f: Facts) -> bool:
    """The last look got no answer: the paste's own call says what tmux can."""
    return f.looked and f.seen is not None and f.seen.presence is Presence.UNKNOWN


def _respawn(f: Facts) -> Action:
    """After a paste found the session missing and the re-probe did not find it live."""
    if f.missing_then is Presence.UNKNOWN:
        return Settle(Reason.PROBE_UNKNOWN)
    if not f.spawns:  # a CI result or a closing never brings a dead agent back either
        return Settle(Reason.NOT_TAKEN_ON)
    if f.hibernated and (slot := _slot(f)) is not None:  # waking takes a slot
        return slot
    if not f.prepared:
        return PrepareRespawn()
    if f.spawned is Spawn.NO_WORKSPACE:
        return Settle(Reason.WORKSPACE_FAILED)
    if f.no_resume is None:
        return DoSpawn(Start.RESUME)
    return DoSpawn(Start.FRESH, why_fresh=f.no_resume)


def _after_spawn(f: Facts) -> Action:
    first = f.start is Start.FIRST
    if f.spawned is Spawn.SPAWNED:
        if f.survival is None:
            return CheckSurvival()
        if f.survival is Survival.EXITED and f.start is Start.RESUME:
            return DoSpawn(Start.FRESH, why_fresh="exited_within_survival_window")  # AC12
        if f.survival is Survival.EXITED:
            return Settle(Reason.HARNESS_EXITED)
        assert f.start is not None
        return Settle(_SUCCESS.get(f.start, Reason.RESPAWNED_FRESH))
    if f.spawned is Spawn.OCCUPIED_LIVE:
        if not first or f.adopted:  # AC7: a live occupant of a respawn gets the event
            return _deliver(f)
        if f.seen is None:
            return Observe(screen=f.reads_screen)
        if f.seen.presence is Presence.UNKNOWN:
            return Settle(Reason.TMUX_UNAVAILABLE)
        if f.seen.owner is Owner.NOBODY:  # a stranger's session is never touched
            return Settle(Reason.OCCUPIED_UNREGISTERED)
        return Adopt(carried=False)
    if f.spawned is Spawn.UNCLEARABLE:  # AC8
        return Settle(Reason.SESSION_OCCUPIED)
    if f.spawned is Spawn.UNANSWERED:  # tmux may still carry it out: the token covers it
        return Settle(Reason.SPAWN_UNANSWERED)
    if f.spawned is Spawn.NO_WORKSPACE:
        return Settle(Reason.WORKSPACE_FAILED)
    return Settle(Reason.SPAWN_FAILED if first else Reason.RESPAWN_FAILED)
