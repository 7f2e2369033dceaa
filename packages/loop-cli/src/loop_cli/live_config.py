"""Live config: a daemon re-reads its config file between cycles, never half of it.

`poll start` and `gh-webhook start` ask `LiveConfig.check()` before each cycle (and at
once on SIGHUP). A file whose bytes did not change costs one read and one digest. A
changed file is read and validated whole into a new frozen Config; only then is it
compared with the one in force, key path by key path:

- keys that the daemon reads anew each time (repositories, labels, actors, intervals,
  delivery, workspace, harness for the next spawn, projects, harnesses) apply at once;
- keys bound into the process at start (`RESTART_ONLY`: the state directory, the store,
  the host, the webhook's listener and secret, the tmux socket, the event log) keep
  their old value in this process and are named in `config.reload_refused`;
- an invalid file changes nothing (`config.reload_failed`, with the first line
  `config check` prints for it).

The caller swaps the whole new object in at once (`Runtime.apply_config`). Events name
key paths, never values (a value may be a token pasted in the wrong place).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .config import Config, LoadedConfig, dump, load_file
from .errors import ConfigError

if TYPE_CHECKING:
    from loop_dispatch.eventlog import EventLog

__all__ = [
    "RESTART_ONLY",
    "LiveConfig",
    "Reload",
    "changed_paths",
    "file_digest",
    "keep_old",
    "split_restart_only",
]

# Key paths (and everything under them) a running daemon cannot take over: they were
# bound into its store, locks, sockets and listener when it started.
RESTART_ONLY: tuple[str, ...] = (
    "stateDir",
    "store",
    "host",
    "routing.tmuxSocket",
    "routing.runner",
    "webhook",
    "eventLog",
)

Kind = Literal["unchanged", "reloaded", "refused", "failed"]


def file_digest(data: bytes) -> str:
    """A short digest of a config file's bytes (what `status` compares)."""
    return hashlib.sha256(data).hexdigest()[:12]


def changed_paths(old: Config, new: Config) -> list[str]:
    """The camelCase key paths whose effective value differs, deepest first found;
    a list is one leaf (`authorizedActors`), a mapping is walked (`projects.a/b.harness`)."""
    out: list[str] = []
    _walk(dump(old), dump(new), "", out)
    return out


def _walk(old: Any, new: Any, loc: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            _walk(
                old.get(key, _MISSING), new.get(key, _MISSING), f"{loc}.{key}" if loc else key, out
            )
    elif old != new:
        out.append(loc)


_MISSING = object()


def _restart_only(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in RESTART_ONLY)


def split_restart_only(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """(live, restart-only) key paths."""
    live: list[str] = []
    refused: list[str] = []
    for path in paths:
        (refused if _restart_only(path) else live).append(path)
    return live, refused


def keep_old(new: Config, old: Config, paths: Iterable[str]) -> Config:
    """`new` with the value of `old` at each restart-only key path (whole new object;
    cross-key rules run again and raise ValueError when the mix is not valid)."""
    result = new
    for path in paths:
        result = _replace(result, old, path.split("."))
    return result


def _replace(new: Any, old: Any, parts: list[str]) -> Any:
    if not isinstance(new, msgspec.Struct):  # a mapping entry under a struct field
        return old
    names = {f.encode_name: f.name for f in msgspec.structs.fields(new)}
    name = names[parts[0]]
    value = getattr(old, name)
    if len(parts) > 1 and isinstance(value, msgspec.Struct):
        value = _replace(getattr(new, name), value, parts[1:])
    return msgspec.structs.replace(new, **{name: value})


@dataclass(frozen=True)
class Reload:
    """What one look at the file found."""

    kind: Kind
    digest: str  # of the file as read now
    changed: tuple[str, ...] = ()  # applied
    refused: tuple[str, ...] = ()  # restart-only, old value kept
    error: str = ""  # the first problem line, when the file is invalid
    loaded: LoadedConfig | None = None  # the config to swap in (reloaded/refused)


@dataclass
class LiveConfig:
    """The config a daemon runs and the file it came from.

    `apply` swaps a whole validated config into the daemon (between cycles); `events`
    records each outcome once per file content (a file left broken is not re-reported
    every cycle)."""

    loaded: LoadedConfig
    apply: Callable[[LoadedConfig], None]
    events: EventLog
    source: str  # "poller" or "webhook": the event's source
    digest: str | None = None  # of the file whose (live) keys are in force
    seen: str | None = None  # of the file last read
    refused: tuple[str, ...] = ()
    error: str = ""
    reloads: int = 0

    def __post_init__(self) -> None:
        if self.loaded.path is not None and self.digest is None:
            try:
                self.digest = self.seen = file_digest(self.loaded.path.read_bytes())
            except OSError:
                self.digest = self.seen = None

    def check(self) -> Reload | None:
        """Read the file; apply, refuse or report it if its content changed. None when
        it did not (or the daemon runs embedded defaults: no file to watch)."""
        path = self.loaded.path
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError as exc:
            digest = "unreadable"
            if digest == self.seen:
                return None
            return self._failed(digest, f"{path}: cannot read: {exc.strerror or exc}")
        digest = file_digest(data)
        if digest == self.seen:
            return None
        try:
            config = load_file(path)
        except ConfigError as exc:
            return self._failed(digest, exc.problems[0] if exc.problems else str(exc))
        return self._compare(path, digest, config)

    def _compare(self, path: Path, digest: str, config: Config) -> Reload:
        old = self.loaded.config
        live, refused = split_restart_only(changed_paths(old, config))
        try:
            config = keep_old(config, old, refused)
        except ValueError as exc:
            line = f"{path}: {exc} (with the restart-only keys kept: {', '.join(refused)})"
            return self._failed(digest, line)
        self.seen = digest
        self.error = ""
        self.refused = tuple(refused)
        loaded = LoadedConfig(config, path, self.loaded.origin)
        if live:
            self.apply(loaded)
            self.loaded = loaded
            self.reloads += 1
            self.events.emit(
                "config.reloaded",
                source=self.source,
                detail={
                    "path": str(path),
                    "digest": digest,
                    "previous": self.digest,
                    "changed": live,
                },
            )
        self.digest = digest
        if refused:
            self.events.emit(
                "config.reload_refused",
                level="warning",
                source=self.source,
                detail={
                    "path": str(path),
                    "digest": digest,
                    "keys": refused,
                    "why": "these keys take a restart; their old values stay in force",
                },
            )
            return Reload("refused", digest, tuple(live), tuple(refused), loaded=loaded)
        return Reload("reloaded" if live else "unchanged", digest, tuple(live), loaded=loaded)

    def _failed(self, digest: str, line: str) -> Reload:
        self.seen = digest
        self.error = line
        self.events.emit(
            "config.reload_failed",
            level="error",
            source=self.source,
            detail={
                "path": str(self.loaded.path),
                "digest": digest,
                "running": self.digest,
                "error": line[:500],
            },
        )
        return Reload("failed", digest, error=line)

    def state(self) -> dict[str, Any]:
        """What the daemon's heartbeat says of its config (status compares it with the
        file): the digest in force, and why a newer file is not (wholly) in force."""
        out: dict[str, Any] = {
            "path": str(self.loaded.path) if self.loaded.path else None,
            "digest": self.digest,
            "reloads": self.reloads,
        }
        if self.refused:
            out["refused"] = list(self.refused)
        if self.error:
            out["error"] = self.error[:500]
            out["failedDigest"] = self.seen
        return out
