"""What tmux says about a session name: the four answers a probe can give."""

from __future__ import annotations

from enum import Enum


class Presence(Enum):
    """The state of a session as tmux reported it.

    UNKNOWN is deliberately separate from ABSENT: a server too busy to answer says
    nothing about whether the session exists, and reading silence as absence is how
    a live agent gets clobbered (seed 002, AC1).
    """

    ABSENT = "absent"  # tmux answered: no such session (or no server at all)
    DEAD = "dead"  # the session exists and every pane's program has exited
    LIVE = "live"  # the session exists and at least one pane's program runs
    UNKNOWN = "unknown"  # tmux did not answer: timeout, OSError, no binary, odd error
