"""tmux version parsing and the capability gates loop_tmux depends on.

Established from tmux's CHANGES file:
- ``respawn-pane -e`` (and new-window/split-window/respawn-window -e): tmux 3.0.
- ``new-session -e``: tmux 3.2.
- exact-match targets with ``=``: tmux 2.1; ``respawn-pane -c``: tmux 2.6.
- ``copy-mode -q`` (leave every mode) is used from 3.3, the oldest release verified to
  have it; older ones get ``send-keys -X cancel`` (leaves copy mode only).
"""

from __future__ import annotations

import re

NEW_SESSION_ENV = (3, 2)
RESPAWN_PANE_ENV = (3, 0)
COPY_MODE_QUIT = (3, 3)
MINIMUM = (2, 6)

_VERSION = re.compile(r"(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int] | None:
    """``"tmux 3.3a"`` -> (3, 3); ``"tmux next-3.4"`` -> (3, 4); ``"tmux master"`` -> None."""
    match = _VERSION.search(text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def supports(version: tuple[int, int] | None, needed: tuple[int, int]) -> bool:
    """Whether ``version`` has a feature introduced in ``needed``.

    An unparseable version (``tmux master``) is a development build, newer than any
    release we gate on, so it is treated as capable. (OpenBSD's ``openbsd-7.4`` parses
    as 7.4, which passes every gate, as OpenBSD's base tmux is current.)
    """
    return version is None or version >= needed
