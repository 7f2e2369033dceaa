"""One vocabulary for what became of an event: each `Reason` carries its outcome kind,
whether it is transient, the event type that reports it and that event's level.

A transient failure says nothing about the event (tmux did not answer, the item's lock
or the store is busy, the harness is not ready yet): the inbox retries it with backoff
until its time horizon, never counting it against `delivery.maxAttempts`. Every other
failure is definite. The list of transient reasons is derived from this table, never
kept by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Outcome", "OutcomeKind", "Reason"]


class OutcomeKind(str, Enum):
    PROCESSED = "processed"
    FAILED = "failed"  # retryable: the delivery id is released
    SKIPPED = "skipped"  # non-retryable: the delivery id is kept
    DUPLICATE = "duplicate"
    HELD = "held"  # waits in the inbox while its item is paused or stopped (issue 24)


_P, _F, _S, _D, _H = (
    OutcomeKind.PROCESSED,
    OutcomeKind.FAILED,
    OutcomeKind.SKIPPED,
    OutcomeKind.DUPLICATE,
    OutcomeKind.HELD,
)


class Reason(str, Enum):
    """value, outcome kind, transient, event type ("" when none), level."""

    kind: OutcomeKind
    transient: bool
    event: str
    level: str

    def __new__(
        cls, value: str, kind: OutcomeKind, transient: bool, event: str, level: str
    ) -> Reason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind, member.transient, member.event, member.level = kind, transient, event, level
        return member

    # processed
    DELIVERED = ("delivered", _P, False, "dispatch.delivered", "info")
    RESPAWN_AVERTED = ("respawn_averted", _P, False, "session.respawn_averted", "info")
    SPAWNED = ("spawned", _P, False, "session.spawned", "info")
    RESPAWNED = ("respawned", _P, False, "session.respawned", "info")
    RESPAWNED_FRESH = ("respawned_fresh", _P, False, "session.respawned", "info")
    ADOPTED = ("adopted", _P, False, "session.adopted", "info")
    CARRIED_BY_SPAWN = ("carried_by_spawn", _P, False, "dispatch.carried", "info")
    CLOSED = ("closed", _P, False, "session.closed", "info")
    NO_ACTIVE_SESSION = ("no_active_session", _P, False, "", "info")
    CONTROL_EXECUTED = ("control_executed", _P, False, "control.command", "info")
    # a control word refused (not authorized, nothing to resume...): settled, never run
    CONTROL_REJECTED = ("control_rejected", _S, False, "control.rejected", "warning")
    # the item is paused or stopped: the event waits in the inbox (state `paused`)
    HELD = ("held", _H, False, "dispatch.held", "info")
    # not processed, kept
    DUPLICATE_DELIVERY = ("duplicate_delivery", _D, False, "dispatch.duplicate", "debug")
    NOT_TAKEN_ON = ("not_taken_on", _S, False, "dispatch.not_taken_on", "info")
    SESSION_OCCUPIED = ("session_occupied", _S, False, "dispatch.skipped", "warning")
    # transient failures: retried, never counted
    TMUX_UNAVAILABLE = ("tmux_unavailable", _F, True, "dispatch.failed", "warning")
    DELIVER_UNAVAILABLE = ("deliver_unavailable", _F, True, "dispatch.failed", "warning")
    PROBE_UNKNOWN = ("probe_unknown", _F, True, "dispatch.failed", "warning")
    SPAWN_UNANSWERED = ("spawn_unanswered", _F, True, "dispatch.failed", "warning")
    ITEM_LOCKED = ("item_locked", _F, True, "dispatch.failed", "warning")
    STORE_UNAVAILABLE = ("store_unavailable", _F, True, "dispatch.failed", "error")
    LOCK_UNAVAILABLE = ("lock_unavailable", _F, True, "dispatch.failed", "error")
    HARNESS_NOT_READY = ("harness_not_ready", _F, True, "dispatch.failed", "info")
    HARNESS_BLOCKED = ("harness_blocked", _F, True, "dispatch.failed", "info")
    LAUNCH_UNAVAILABLE = ("launch_unavailable", _F, True, "dispatch.failed", "warning")
    HARNESS_BUSY = ("harness_busy", _F, True, "session.close_deferred", "info")
    # host.maxLive reached: waits in the inbox for a slot (oldest waiting item first),
    # never given up at the horizon (drain.py)
    CAPACITY_FULL = ("capacity_full", _F, True, "session.deferred", "info")
    # definite failures: counted against delivery.maxAttempts
    DELIVER_FAILED = ("deliver_failed", _F, False, "dispatch.failed", "warning")
    SPAWN_FAILED = ("spawn_failed", _F, False, "dispatch.failed", "warning")
    RESPAWN_FAILED = ("respawn_failed", _F, False, "dispatch.failed", "warning")
    HARNESS_EXITED = ("harness_exited", _F, False, "dispatch.failed", "error")
    OCCUPIED_UNREGISTERED = ("occupied_unregistered", _F, False, "dispatch.failed", "error")
    WORKSPACE_FAILED = ("workspace_failed", _F, False, "dispatch.failed", "error")
    TERMINATE_FAILED = ("terminate_failed", _F, False, "dispatch.failed", "warning")
    INTERNAL_ERROR = ("internal_error", _F, False, "dispatch.failed", "error")

    @classmethod
    def of(cls, value: str) -> Reason | None:
        """The member for a stored reason string; None for one this table does not hold."""
        try:
            return cls._value2member_map_[value]  # type: ignore[return-value]
        except KeyError:
            return None


@dataclass(frozen=True)
class Outcome:
    """What became of one event. `reason` is a stable token; `detail` one line for humans."""

    kind: OutcomeKind
    reason: str
    detail: str = ""
    # The harness's own files hold the pasted text (adapters with receipts).
    confirmed: bool = False

    @classmethod
    def of(cls, reason: Reason, detail: str = "", *, confirmed: bool = False) -> Outcome:
        return cls(reason.kind, reason.value, detail, confirmed)

    @property
    def retryable(self) -> bool:
        return self.kind is OutcomeKind.FAILED

    @property
    def transient(self) -> bool:
        """A failure that says nothing about the event (retried, never counted)."""
        member = Reason.of(self.reason)
        return self.kind is OutcomeKind.FAILED and member is not None and member.transient
