"""loop_tmux: a tmux client that tells the truth and never clobbers a live session.

It knows nothing of tickets or harnesses: it takes session names, argv lists, a working
directory and an environment mapping. See docs/tmux.md.
"""

from __future__ import annotations

from .client import Tmux
from .environment import ALLOWED_NAMES, allowlisted
from .errors import TmuxCapabilityWarning, TmuxError, TmuxUnavailable
from .names import SESSION_NAME_RE, TERMINATE_NAME_RE, check_name
from .paste import neutralise
from .presence import Presence
from .results import (
    DeliverResult,
    Observation,
    Pane,
    PaneView,
    RespawnResult,
    SpawnOutcome,
    SpawnResult,
)
from .runner import kill_clients
from .versions import NEW_SESSION_ENV, RESPAWN_PANE_ENV, parse_version

__version__ = "0.1.0"

__all__ = [
    "ALLOWED_NAMES",
    "NEW_SESSION_ENV",
    "RESPAWN_PANE_ENV",
    "SESSION_NAME_RE",
    "TERMINATE_NAME_RE",
    "DeliverResult",
    "Observation",
    "Pane",
    "PaneView",
    "Presence",
    "RespawnResult",
    "SpawnOutcome",
    "SpawnResult",
    "Tmux",
    "TmuxCapabilityWarning",
    "TmuxError",
    "TmuxUnavailable",
    "allowlisted",
    "check_name",
    "kill_clients",
    "neutralise",
    "parse_version",
]
