"""Preflight: the setup mistakes that would make spawns fail, found before any event.

Without this, a missing folder or a missing tmux shows only as events "to retry" for a
day. `config check` lists every finding as a warning naming its key; the daemons and
`sessions start|restart` refuse (exit 2, one line) on the fatal ones: tmux absent or too
old, and the findings that make every spawn fail. Returns findings; never prints.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

__all__ = [
    "Finding",
    "claim_socket",
    "setup_findings",
    "socket_file",
    "tmux_problem",
]

CLAIMS_DIR = "sockets"  # under the user state dir: which config uses which tmux server


@dataclass(frozen=True)
class Finding:
    """One setup problem: the config key it names, what is wrong, and whether it makes
    every spawn fail (a daemon then refuses to start)."""

    key: str
    message: str
    fatal: bool = False

    def line(self) -> str:
        return f"{self.key}: {self.message}"


def tmux_problem(
    binary: str = "tmux",
    *,
    which: Callable[[str], str | None] = shutil.which,
    version: Callable[[], tuple[int, int] | None] | None = None,
) -> str | None:
    """Why tmux cannot run the-loop's sessions (absent from PATH, older than the oldest
    version every command the-loop sends needs), or None. The line names tmux."""
    from loop_tmux import versions

    if which(binary) is None:
        return (
            f"tmux: {binary!r} is not found on PATH; every session runs in tmux "
            f"(install tmux {_dotted(versions.MINIMUM)} or newer)"
        )
    if version is None:
        from loop_tmux import Tmux

        version = Tmux(binary).version
    have = version()
    if have is not None and not versions.supports(have, versions.MINIMUM):
        return (
            f"tmux: version {_dotted(have)} is too old; the-loop needs tmux "
            f"{_dotted(versions.MINIMUM)} or newer (respawn-pane -c)"
        )
    return None


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def _missing_dir(path: Path) -> str | None:
    if path.is_dir():
        return None
    return f"{path} is not a directory" if path.exists() else f"{path} does not exist"


def _writable_dir(path: Path) -> str | None:
    """Why the state directory cannot be written (it, or the folder it would be made in)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    import tempfile

    try:  # a real try: os.access says yes to root on a read-only or virtual filesystem
        with tempfile.TemporaryFile(dir=probe, prefix=".the-loop-check-"):
            pass
    except OSError as err:
        made = "" if probe == path else f" (it would be made in {probe})"
        reason = err.strerror or type(err).__name__
        return f"{path} is not writable by this user{made}: {reason}"
    return None


def setup_findings(config: Config) -> list[Finding]:
    """Every setup problem of `config`, in the order of the documented keys."""
    found: list[Finding] = []
    state = config.effective_state_dir()
    problem = _writable_dir(state)
    if problem:
        found.append(Finding("stateDir", problem, fatal=True))
    harness = config.harness
    if harness.cwd is not None:
        problem = _missing_dir(Path(os.path.abspath(harness.cwd)))
        if problem:
            found.append(
                Finding("harness.cwd", f"{problem}; no session could start there", fatal=True)
            )
    for project, folder in harness.cwd_by_project.items():
        problem = _missing_dir(Path(os.path.abspath(folder)))
        if problem:
            found.append(
                Finding(
                    f"harness.cwdByProject.{project}",
                    f"{problem}; the sessions of {project} could not start",
                )
            )
    found += _env_file(config)
    found += _project_env_files(config)
    found += _workspaces(config)
    found += _socket_sharing(config)
    return found


def _env_file(config: Config) -> list[Finding]:
    from .rotation.launcher import env_file_path

    path = env_file_path(config)
    if path is None:
        return []
    from loop_envstate import EnvFileError, declared

    try:
        declared(path)
    except EnvFileError as err:
        return [Finding("env.file", f"{err}; no session could start", fatal=True)]
    return []


def _project_env_files(config: Config) -> list[Finding]:
    """A project's own `env.file` that cannot be read: its sessions could not start
    (a warning: the other projects' sessions can; their attempts wait, retried)."""
    from loop_envstate import EnvFileError, declared

    found: list[Finding] = []
    for project, settings in config.projects.items():
        if settings.env.file is None:
            continue
        try:
            declared(Path(os.path.abspath(os.path.expanduser(settings.env.file))))
        except EnvFileError as err:
            found.append(
                Finding(
                    f"projects.{project}.env.file",
                    f"{err}; the sessions of {project} could not start",
                )
            )
    return found


def _workspaces(config: Config) -> list[Finding]:
    ws = config.workspace
    if ws.mode != "worktree":
        return []
    found: list[Finding] = []
    clones = {k.lower() for k in ws.repositories}
    if "github" in config.active_trackers():
        for repo in config.github.repositories:
            if repo.lower() not in clones:
                found.append(
                    Finding(
                        "workspace.repositories",
                        f"no clone for {repo} (listed in github.repositories); its items "
                        "could not get a worktree",
                    )
                )
    if "jira" in config.active_trackers():
        site = (config.jira.site or "").lower()
        for key in config.jira.projects:
            if key.lower() not in clones and f"{site}/{key}".lower() not in clones:
                found.append(
                    Finding(
                        "workspace.repositories",
                        f"no clone for Jira project {key} (listed in jira.projects; key "
                        f"{key} or {site}/{key}); its items could not get a worktree",
                    )
                )
    for project, clone in ws.repositories.items():
        problem = _missing_dir(Path(os.path.abspath(clone)))
        if problem:
            found.append(Finding(f"workspace.repositories.{project}", problem))
    return found


def socket_file(config: Config) -> str:
    """Where `routing.tmuxSocket`'s server listens (tmux's rule: $TMUX_TMPDIR or /tmp)."""
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"  # noqa: S108 -- tmux's own default
    return os.path.join(base, f"tmux-{os.getuid()}", config.routing.tmux_socket or "default")


def _claim_path(socket: str) -> Path:
    import hashlib

    from . import paths

    digest = hashlib.sha256(socket.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return paths.user_state_dir() / CLAIMS_DIR / f"{digest}.json"


def claim_socket(config: Config, config_path: Path | None) -> None:
    """Note that this config (its state dir) uses its tmux server, for `config check`
    run with another config to see the sharing. Best effort: never fails a command."""
    from loop_dispatch.private import private_dir

    socket = socket_file(config)
    path = _claim_path(socket)
    record = {
        "socket": socket,
        "stateDir": os.path.abspath(config.effective_state_dir()),
        "config": None if config_path is None else os.path.abspath(config_path),
    }
    try:
        private_dir(path.parent.parent)  # the default state dir: made private, not loose
        private_dir(path.parent)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(tmp, path)
    except OSError:
        return


def _socket_sharing(config: Config) -> list[Finding]:
    """Another config (another state dir) that used the same tmux server."""
    socket = socket_file(config)
    try:
        data = json.loads(_claim_path(socket).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("socket") != socket:
        return []
    other = data.get("stateDir")
    mine = os.path.abspath(config.effective_state_dir())
    if not isinstance(other, str) or other == mine or not os.path.isdir(other):
        return []
    by = data.get("config") or "embedded defaults"
    return [
        Finding(
            "routing.tmuxSocket",
            f"the tmux server {config.routing.tmux_socket or 'default'} is also used by "
            f"{by} (state dir {other}); each sees the other's sessions as strangers: give "
            "each config its own tmuxSocket",
        )
    ]
