"""`env doctor`: where does each declared value live right now?

After a rotation the old value can hide in three places: this process (a daemon or
shell started before the change), the tmux server's global environment (every pane
spawned without the launcher inherits it), and the running sessions. One row per
declared name shows the fingerprint in each place, so the operator sees where the
freeze is without a value ever being shown.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loop_envstate import fingerprint, process_environ

from .drift import live_pids

if TYPE_CHECKING:
    from loop_dispatch import SessionRecord
    from loop_envstate import EnvFile
    from loop_tmux import Pane, Tmux

UNSET = "unset"
GLOBAL_ENV_TIMEOUT = 5.0


@dataclass(frozen=True)
class GlobalEnvironment:
    """tmux's global environment: `values` None when tmux did not answer (`error`)."""

    values: dict[str, str] | None
    error: str | None = None
    server_running: bool = True


def global_environment(tmux: Tmux) -> GlobalEnvironment:
    """tmux's global environment through the client; silence is unknown, never empty."""
    from loop_tmux import TmuxUnavailable

    try:
        values = tmux.global_environment(timeout=GLOBAL_ENV_TIMEOUT)
    except TmuxUnavailable as err:
        return GlobalEnvironment(None, str(err))
    if values is None:
        return GlobalEnvironment({}, None, server_running=False)
    return GlobalEnvironment(values)


@dataclass(frozen=True)
class DoctorRow:
    """One declared name: its fingerprint in the file and in each place it may live.

    `process` / `tmux_global` are a fingerprint, "unset", or None (could not be read);
    `sessions` counts sessions by the fingerprint (or "unset") they hold.
    """

    name: str
    file: str
    process: str
    tmux_global: str | None
    sessions: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "file": self.file,
            "process": self.process,
            "tmuxGlobal": self.tmux_global,
            "sessions": dict(self.sessions),
        }


@dataclass(frozen=True)
class DoctorReport:
    path: str
    rows: tuple[DoctorRow, ...]
    malformed: tuple[int, ...]
    tmux_error: str | None
    tmux_server_running: bool
    sessions_read: int
    sessions_unreadable: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "malformedLines": list(self.malformed),
            "tmuxGlobal": {"running": self.tmux_server_running, "error": self.tmux_error},
            "sessions": {"read": self.sessions_read, "unreadable": self.sessions_unreadable},
            "names": [r.to_dict() for r in self.rows],
        }


def _fp(env: Mapping[str, str], name: str) -> str:
    return fingerprint(env[name]) if name in env else UNSET


def env_doctor(
    declared: EnvFile,
    records: Iterable[SessionRecord],
    panes: Iterable[Pane],
    tmux_global: GlobalEnvironment,
    *,
    environ: Mapping[str, str] | None = None,
    reader: Callable[[int], Mapping[str, str] | None] = process_environ,
) -> DoctorReport:
    """The doctor's table (read-only; `panes` is one `Tmux.panes()` answer)."""
    here = os.environ if environ is None else environ
    pids = live_pids(panes)
    held: list[Mapping[str, str]] = []
    unreadable = 0
    for record in records:
        for pid in pids.get(record.tmux_name, ())[:1]:  # the harness is the first pane
            env = reader(pid)
            if env is None:
                unreadable += 1
            else:
                held.append(env)
    rows = []
    for name in declared.names:
        counts = Counter(_fp(env, name) for env in held)
        glob = None if tmux_global.values is None else _fp(tmux_global.values, name)
        rows.append(
            DoctorRow(
                name,
                fingerprint(declared.values[name]),
                _fp(here, name),
                glob,
                dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            )
        )
    return DoctorReport(
        str(declared.path),
        tuple(rows),
        tuple(declared.malformed),
        tmux_global.error,
        tmux_global.server_running,
        len(held),
        unreadable,
    )
