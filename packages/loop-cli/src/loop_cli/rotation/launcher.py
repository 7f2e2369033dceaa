"""The launcher hook: every spawn and respawn runs under `loop-envstate exec`.

A value passed as `tmux new-session -e NAME=VALUE` sits on tmux's argv (visible in
`ps`) and, on some versions, in the server's environment. Instead the pane runs
`loop-envstate exec [FILE] --keep NAME ... --set THE_LOOP_...=... -- <harness argv>`:
the launcher reads the file at that moment and execs the harness with the values, so
they travel only through memory, and the pane pid is the harness itself (drift reads it
directly). `--keep` lists the names an agent may inherit (the allowlist, what tmux sets
in a pane, `harness.passEnv`, the-loop's own): the harness's environment is built from
those, the file and `--set`, never from whatever the tmux server holds (issue 21: a
server the-loop did not start may hold the operator's tokens).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loop_envstate import launcher_argv

if TYPE_CHECKING:
    from loop_dispatch import LaunchSpec, SessionRecord
    from loop_envstate import EnvFile

    from ..config import Config

WORK_ITEM_VAR = "THE_LOOP_WORK_ITEM"
CONFIG_VAR = "THE_LOOP_CONFIG"
OWN_NAMES = (WORK_ITEM_VAR, CONFIG_VAR)
"""the-loop's own names: applied last (`--set`), so the file can never redefine them."""


def own_environment(record: SessionRecord, config_path: Path | None) -> dict[str, str]:
    """The non-secret names every pane carries: which work item, which config."""
    env = {WORK_ITEM_VAR: str(record.work_item)}
    if config_path is not None:
        env[CONFIG_VAR] = str(config_path)
    return env


@dataclass(frozen=True)
class EnvFileLauncher:
    """The `launcher(record, harness_argv) -> LaunchSpec` hook: the env file (None: no
    file) and, with `keep`, an environment built from nothing but those inherited names.

    The tmux-level environment it returns is empty: the-loop's own names ride as `--set`
    so the pane is the same on every tmux version (no `-e` needed) and nothing reaches
    tmux's global environment. `keep` None inherits everything (older behaviour, kept
    for callers that build one by hand).
    """

    file: Path | None
    config_path: Path | None = None
    python: str | None = None
    # Where the harness keeps its own files (harness.stateDir -> CLAUDE_CONFIG_DIR /
    # CODEX_HOME): every start and relaunch must agree with what the adapter reads.
    harness_env: Mapping[str, str] = field(default_factory=dict)
    keep: tuple[str, ...] | None = None

    def sets(self, record: SessionRecord) -> dict[str, str]:
        return {**own_environment(record, self.config_path), **self.harness_env}

    def argv(self, sets: Mapping[str, str], harness_argv: Sequence[str]) -> list[str]:
        """`loop-envstate exec [FILE] [--keep ...] --set ... -- harness_argv`."""
        if self.python is None:
            return launcher_argv(self.file, sets, harness_argv, keep=self.keep)
        return launcher_argv(self.file, sets, harness_argv, python=self.python, keep=self.keep)

    def __call__(self, record: SessionRecord, harness_argv: Sequence[str]) -> LaunchSpec:
        from loop_dispatch import LaunchSpec

        return LaunchSpec(argv=self.argv(self.sets(record), harness_argv), env={})


Launcher = Callable[["SessionRecord", Sequence[str]], "LaunchSpec"]


def env_file_path(config: Config) -> Path | None:
    """The configured env file as an absolute path (panes start in other directories)."""
    file = config.env.file
    if file is None:
        return None
    return Path(os.path.abspath(os.path.expanduser(file)))


def build_launcher(config: Config, config_path: Path | None = None) -> EnvFileLauncher | None:
    """The env-file launcher for this config, or None when `env.file` is unset (then
    `pane_launcher` starts every pane)."""
    if env_file_path(config) is None:
        return None
    return pane_launcher(config, config_path)


def pane_launcher(config: Config, config_path: Path | None = None) -> EnvFileLauncher:
    """The launcher of every pane: the env file when one is configured, and always an
    environment built from the kept names only (`agent_env.kept_names`)."""
    from ..agent_env import kept_names

    resolved = Path(os.path.abspath(config_path)) if config_path is not None else None
    return EnvFileLauncher(
        file=env_file_path(config),
        config_path=resolved,
        harness_env=harness_state_env(config),
        keep=kept_names(config),
    )


def harness_state_env(config: Config) -> dict[str, str]:
    """`CLAUDE_CONFIG_DIR` / `CODEX_HOME` for a configured `harness.stateDir`, else {}."""
    from ..agent_env import HARNESS_STATE_VARS

    state = config.harness.state_dir
    name = HARNESS_STATE_VARS.get(config.harness.adapter)
    if state is None or name is None:
        return {}
    return {name: os.path.abspath(os.path.expanduser(state))}


def require_env_file(config: Config) -> EnvFile:
    """The file as it reads right now, for commands that cannot work without one.

    Refuses (exit 2) naming the key when none is configured, or naming the path when
    it is gone or unreadable: a rotation cannot be applied from a file that is not there.
    """
    from loop_envstate import EnvFileError, declared

    from ..errors import UsageError

    path = env_file_path(config)
    if path is None:
        raise UsageError(
            "no env file configured: set env.file in the config to the file sessions "
            "should hold (key env.file)"
        )
    try:
        env = declared(path)
    except EnvFileError as err:
        raise UsageError(f"{err} (configured as env.file)") from None
    assert env is not None
    return env
