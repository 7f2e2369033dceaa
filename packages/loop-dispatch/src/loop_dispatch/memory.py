"""Memory of the harnesses (issue 25): the RSS of each session's pane process tree.

One `tmux list-panes -a` and one pass over the process table for every session, so a
`status` of 200 sessions costs the same two reads as one of 2.
"""

from __future__ import annotations

import os
import sys
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
    found = _meminfo()
    if found is not None:
        return found
    import psutil

    try:
        vm = psutil.virtual_memory()
    except (psutil.Error, OSError, RuntimeError):
        return None
    return HostMemory(available=int(vm.available), total=int(vm.total))


def _meminfo() -> HostMemory | None:
    """Linux: MemAvailable and MemTotal of /proc/meminfo, what psutil reports there
    (without importing psutil: a third of a local `status`'s memory figures)."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            text = handle.read()
    except OSError:  # not Linux, or no /proc mounted
        return None
    found: dict[bytes, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(b":")
        if name in (b"MemAvailable", b"MemTotal"):
            number, _, unit = value.strip().partition(b" ")
            if not number.isdigit() or unit not in (b"kB", b""):
                return None
            found[name] = int(number) * (1024 if unit == b"kB" else 1)
    if len(found) != 2:
        return None  # a kernel before 3.14 has no MemAvailable: psutil estimates it
    return HostMemory(available=found[b"MemAvailable"], total=found[b"MemTotal"])


def tree_rss(roots: Mapping[str, Iterable[int]]) -> dict[str, int]:
    """For each key, the summed RSS in bytes of its root pids and all their descendants
    (one pass over the process table); a process that went meanwhile counts 0."""
    table = _proc_table() if sys.platform.startswith("linux") else None
    if table is None:
        table = _psutil_table()
    children, rss = table
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


Table = tuple[dict[int, list[int]], dict[int, int]]  # children by parent, RSS by pid


def _proc_table() -> Table | None:
    """Linux: each process's parent and RSS from /proc/PID/stat, one small read per
    process (psutil's process_iter costs ten times as much: 50 ms at 300 processes).
    None when /proc cannot be listed or not one process in it read."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                line = handle.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # pid (comm) state ppid ... rss is field 24; comm may hold spaces and parens.
        fields = line[line.rfind(b")") + 2 :].split()
        if len(fields) < 22:
            continue
        pid = int(name)
        rss[pid] = int(fields[21]) * page
        children.setdefault(int(fields[1]), []).append(pid)
    return (children, rss) if rss else None  # not one readable: let psutil say


def _psutil_table() -> Table:
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
    return children, rss


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
