"""Where the launched harness keeps its files, from the environment the-loop gives it.

Claude Code writes its conversations under `$CLAUDE_CONFIG_DIR` (else `$HOME/.claude`,
with its settings in `$HOME/.claude.json`); Codex under `$CODEX_HOME` (else
`$HOME/.codex`). The adapter must read them where the harness writes them: resume
checks, receipts and conversation discovery all look there. The pane's environment is
composed, not the daemon's: the tmux server's allowlist plus `harness.passEnv`, then
`env.file` layered over it by the launcher. So with `HOME` (or the harness's variable)
set in `env.file`, the harness writes elsewhere than the daemon's own home, and this
module says where. `harness.stateDir`, when set, is injected into the pane and wins,
unless `env.file` sets the harness's variable too: the launcher applies the file last,
so then the harness writes where the file says (`mismatch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

__all__ = ["HarnessState", "harness_state"]

# adapter -> (its state variable, its folder under HOME)
_LAYOUT = {"claude-code": ("CLAUDE_CONFIG_DIR", ".claude"), "codex": ("CODEX_HOME", ".codex")}


@dataclass(frozen=True)
class HarnessState:
    """The harness's folder, how it was found, and where Claude Code's settings are."""

    path: Path
    source: str  # e.g. "harness.stateDir", "env.file HOME", "daemon HOME"
    config_file: Path | None  # Claude Code's .claude.json (None for Codex)
    mismatch: str | None = None  # why the harness would write elsewhere than `path`


def _composed(config: Config) -> tuple[dict[str, str], set[str]]:
    """The pane's environment as far as it decides the folder, and the names the env
    file set (an unreadable file counts as empty: `check_launch` reports it)."""
    from loop_envstate import EnvFileError, declared

    from .agent_env import server_environment
    from .rotation.launcher import env_file_path

    env = server_environment(config)
    from_file: dict[str, str] = {}
    file = env_file_path(config)
    if file is not None:
        try:
            found = declared(file)
        except EnvFileError:
            found = None
        from_file = dict(found.values) if found is not None else {}
    env.update(from_file)
    return env, set(from_file)


def _home(env: Mapping[str, str], from_file: set[str]) -> tuple[Path, str]:
    if env.get("HOME"):
        where = "env.file" if "HOME" in from_file else "daemon"
        return Path(env["HOME"]).expanduser(), f"{where} HOME"
    return Path.home(), "daemon home"


def harness_state(config: Config) -> HarnessState | None:
    """Where the configured harness keeps its files (None for the generic adapter)."""
    layout = _LAYOUT.get(config.harness.adapter)
    if layout is None:
        return None
    variable, folder = layout
    env, from_file = _composed(config)
    claude = config.harness.adapter == "claude-code"
    configured = config.harness.state_dir
    if configured is not None:
        path = Path(configured).expanduser().absolute()
        mismatch = None
        if variable in from_file:
            mismatch = (
                f"env.file sets {variable}, which the launcher applies over harness.stateDir: "
                f"the harness writes elsewhere than {path}, where the adapter reads"
            )
        return HarnessState(
            path, "harness.stateDir", path / ".claude.json" if claude else None, mismatch
        )
    if env.get(variable):
        path = Path(env[variable]).expanduser()
        where = "env.file" if variable in from_file else "harness.passEnv"
        return HarnessState(path, f"{where} {variable}", path / ".claude.json" if claude else None)
    home, source = _home(env, from_file)
    return HarnessState(home / folder, source, home / ".claude.json" if claude else None)
