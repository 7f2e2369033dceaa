"""Result values of the Tmux client's actions: plain data, no behaviour.

Keyword-only, so a call site names every field it sets and a reordering cannot
swap two of them silently; the shared fields come in one order (ok, session_missing,
error).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .presence import Presence


class SpawnOutcome(str, Enum):
    """What spawn did. The values are stable strings other packages record."""

    SPAWNED = "spawned"
    OCCUPIED_LIVE = "occupied-live"
    OCCUPIED_UNCLEARABLE = "occupied-unclearable"
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class SpawnResult:
    """spawn's answer; ``error`` carries tmux's own text or the reason, never a value."""

    outcome: SpawnOutcome
    error: str | None = None
    cleared: bool = False  # a DEAD occupant was killed (and the kill verified) first
    pid: int | None = None  # the new pane's pid when spawned
    # False when tmux did not answer (failed only): nothing is known, and a new-session
    # may still be carried out when the server resumes. A caller retries, later.
    answered: bool = True

    @property
    def ok(self) -> bool:
        return self.outcome is SpawnOutcome.SPAWNED


@dataclass(frozen=True, kw_only=True)
class RespawnResult:
    """respawn's answer. ``session_missing`` only when tmux said the session is gone."""

    ok: bool
    session_missing: bool = False
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class DeliverResult:
    """deliver's answer.

    ``session_missing`` is True only on a definite ABSENT or DEAD; a tmux that did not
    answer gives ok=False, session_missing=False (a transient fault, seed 002 AC2).
    """

    ok: bool
    session_missing: bool = False
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Pane:
    """One pane of the server, as one line of ``list-panes -a`` describes it."""

    session: str
    pane_id: str
    pid: int
    dead: bool
    command: str
    token: str = ""  # the session's spawn token ("" when it has none: not ours)


@dataclass(frozen=True, kw_only=True)
class PaneView:
    """What a harness's pane shows, read in one tmux call (``Tmux.pane_view``).

    ``alternate_on``: the program switched to the alternate screen (full-screen TUIs do
    once they have drawn); ``command``: the pane's foreground program; ``screen``: the
    visible text when a capture was asked for, else None. Facts only: what they mean for
    a given program is the caller's business.
    """

    alternate_on: bool
    command: str
    dead: bool
    pid: int
    screen: str | None = None


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One look at a session (``Tmux.observe``): presence, spawn token and pane in ONE
    tmux call. Silence is ``Presence.UNKNOWN`` with nothing else known, never ABSENT.

    ``token``: the spawn token the session was created with ("" when unset, None when
    absent or unknown); ``view``: the active pane (its screen when a capture was asked
    for), None unless the session exists.
    """

    presence: Presence
    token: str | None = None
    view: PaneView | None = None
    error: str | None = None

    @property
    def dead(self) -> bool:
        return self.presence is Presence.DEAD
