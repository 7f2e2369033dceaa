"""loop_dispatch: tickets to tmux sessions, with nothing lost and no live agent destroyed."""

from __future__ import annotations

from .model import Event, EventKind, RefError, WorkItemRef, comment_delivery_id
from .poll import CycleReport, PollBatch, Source

__version__ = "0.1.0"

__all__ = [
    "CycleReport",
    "Event",
    "EventKind",
    "PollBatch",
    "RefError",
    "Source",
    "WorkItemRef",
    "__version__",
    "comment_delivery_id",
]
