"""Memory of the harnesses (issue 25): the RSS of each session's pane process tree.

One `tmux list-panes -a` and one pass over the process table for every session, so a
`status` of 200 sessions costs the same two reads as one of 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loop_tmux import Tmux

__all__ = ["HostMemory", "available_bytes", "session_rss", "tree_rss"]


@dataclass(frozen=True)
class HostMemory:
    """The host's figures: RAM the kernel reports available and in total."""

    available: int
    total: int


def available_bytes() -> HostMemory | None:
    """None when the platform does not say (never a guess)."""
    import psutil

    try:
        vm = psutil.virtual_memory()
    except (psutil.Error, OSError, RuntimeError):
        return None
    return HostMemory(available=int(vm.available), total=int(vm.total))


def tree_rss(roots: Mapping[str, Iterable[int]]) -> dict[str, int]:
    """For each key, the summed RSS in bytes of its root pids and all their descendants
    (one pass over the process table); a process that went meanwhile counts 0."""
    import psutil

    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for proc in psutil.process_iter(["ppid", "memory_info"]):
        info = proc.info
        memory = info.get("memory_info")
        if memory is None:  # gone or not ours to read
            continue
        rss[proc.pid] = int(memory.rss)
        children.setdefault(int(info.get("ppid") or 0), []).append(proc.pid)
    out: dict[str, int] = {}
    for key, pids in roots.items():
        seen: set[int] = set()
        stack = [p for p in pids if p > 0]
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            stack.extend(children.get(pid, ()))
        out[key] = sum(rss.get(pid, 0) for pid in seen)
    return out


def session_rss(tmux: Tmux, names: Iterable[str]) -> dict[str, int] | None:
    """RSS per tmux session name among `names` (live panes only); None when tmux did
    not answer. A name without a live pane is absent from the result."""
    from loop_tmux import TmuxUnavailable

    wanted = set(names)
    try:
        panes = tmux.panes()
    except TmuxUnavailable:
        return None
    roots: dict[str, list[int]] = {}
    for pane in panes:
        if pane.session in wanted and not pane.dead and pane.pid > 0:
            roots.setdefault(pane.session, []).append(pane.pid)
    return tree_rss(roots)
