"""The launch hook: how a harness argv becomes what tmux runs.

The dispatcher calls the launcher for every spawn and respawn, so a caller (loop-cli's
env-file launcher) can wrap the harness without the dispatcher knowing how.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .registry import SessionRecord

__all__ = ["LaunchSpec", "Launcher", "default_launcher"]


@dataclass(frozen=True)
class LaunchSpec:
    """argv for the pane, and env handed to tmux (`-e`): not secret, the-loop's own names."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


Launcher = Callable[[SessionRecord, list[str]], LaunchSpec]


def default_launcher(record: SessionRecord, harness_argv: list[str]) -> LaunchSpec:
    return LaunchSpec(list(harness_argv), {"THE_LOOP_WORK_ITEM": str(record.work_item)})
