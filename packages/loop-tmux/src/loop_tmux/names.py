"""Session names and the exact-match tmux targets built from them.

tmux resolves ``-t loop-foo-1`` to ``loop-foo-12`` by prefix when only the latter
exists, and a window target without a colon (``-t =loop-foo-1``) is first looked up as
a window of the *current* session. So sessions are always targeted as ``=name`` and
windows/panes as ``=name:``. tmux also rewrites ``.`` and ``:`` in session names to
``_`` and expands ``#`` formats, so such names are refused rather than silently renamed.
"""

from __future__ import annotations

import re

# What tmux keeps verbatim as a session name and can target exactly.
SESSION_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_+-]{0,399}$")
# The only names terminate() may signal (the-loop's own sessions).
TERMINATE_NAME_RE = re.compile(r"^loop-[A-Za-z0-9._-]+$")


def check_name(name: str) -> str:
    """Return ``name`` if tmux would keep it verbatim; raise ValueError otherwise."""
    if not isinstance(name, str) or not SESSION_NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid tmux session name {name!r}: must match {SESSION_NAME_RE.pattern}"
        )
    return name


def session_target(name: str) -> str:
    """Exact-match target for commands taking a target-session."""
    return "=" + check_name(name)


def pane_target(name: str) -> str:
    """Exact-match target for the session's current window / active pane."""
    return "=" + check_name(name) + ":"
