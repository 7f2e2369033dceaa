"""The environment a tmux server is started with: an allowlist, nothing else.

A tmux server copies the environment of the client that starts it into its global
environment, and every pane inherits that. A daemon's own credentials (a GitHub token,
a webhook secret) would therefore reach every agent, so the-loop starts its server from
an allowlisted environment and empties `update-environment`, so that a client attaching
later cannot push its variables into the sessions either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "PANE_NAMES", "allowlisted", "is_allowed"]

ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "XDG_RUNTIME_DIR",
    }
)
"""Names a terminal program needs to behave like it does in a login shell."""
ALLOWED_PREFIXES = ("LC_",)
PANE_NAMES = ("TMUX", "TMUX_PANE", "TERM_PROGRAM", "TERM_PROGRAM_VERSION")
"""Names tmux itself sets in each pane (which server and pane it runs in): not inherited."""
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_allowed(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether `name` may reach a tmux server started from this environment."""
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES) or name in set(extra)


def allowlisted(
    environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()
) -> dict[str, str]:
    """The allowlisted part of `environ` (default: this process's), plus `extra` names.

    `extra` is the operator's own additions (`harness.passEnv`); a name that is not a
    valid environment name is ignored rather than matched.
    """
    source = os.environ if environ is None else environ
    added = {name for name in extra if _NAME_RE.fullmatch(name)}
    return {k: v for k, v in source.items() if is_allowed(k, added)}
