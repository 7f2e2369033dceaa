"""Read another process's environment, or learn that it cannot be read.

What is read is the environment block the process was started with (what
/proc/<pid>/environ shows): exactly what a launcher hands over. Later changes a program
makes to its own os.environ are invisible here, which is right for an audit of what a
session was launched with.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    EnvironReader = Callable[[int], "Mapping[str, str] | None"]

PROC_ROOT = "/proc"


def process_environ(pid: int, *, reader: EnvironReader | None = None) -> dict[str, str] | None:
    """That process's environment, or None when it cannot be known. Never raises.

    None covers an exited pid (or a zombie), a permission refusal, and a platform that
    will not say. ``reader`` replaces the source (a callable taking the pid and
    returning a mapping or None, and free to raise) so every None path can be tested.
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    source = reader if reader is not None else default_reader
    try:
        env = source(pid)
        return None if env is None else dict(env)
    except Exception:  # the contract: an unknown platform's failure is "cannot say"
        return None


def default_reader(pid: int) -> dict[str, str] | None:
    """/proc when it is mounted, else psutil (macOS, the BSDs)."""
    return chained_reader()(pid)


def chained_reader(
    proc_root: str = PROC_ROOT,
    fallback: Callable[[int], Mapping[str, str] | None] | None = None,
) -> Callable[[int], dict[str, str] | None]:
    """A reader over ``proc_root``, handing off to ``fallback`` where there is no procfs.

    ``fallback`` defaults to psutil; pass a stub to model a platform without either.
    """

    def read(pid: int) -> dict[str, str] | None:
        if os.path.isdir(os.path.join(proc_root, "self")):
            return read_proc_environ(pid, proc_root)
        other = fallback if fallback is not None else read_psutil_environ
        env = other(pid)
        return None if env is None else dict(env)

    return read


def read_proc_environ(pid: int, proc_root: str = PROC_ROOT) -> dict[str, str] | None:
    """Parse /proc/<pid>/environ; None for a gone, refused or zombie process."""
    base = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(base, "environ"), "rb") as handle:
            block = handle.read()
    except OSError:  # ENOENT/ESRCH: exited; EACCES/EPERM: refused
        return None
    if not block and _has_no_memory(base):
        return None
    return parse_environ_block(block)


def _has_no_memory(base: str) -> bool:
    """A zombie or kernel thread shows an empty environment it never had.

    Both have an empty cmdline; a live program started with an empty environment
    (``env -i prog``) still has its argv, so it keeps its honest empty answer.
    """
    try:
        with open(os.path.join(base, "cmdline"), "rb") as handle:
            return not handle.read(1)
    except OSError:
        return True


def parse_environ_block(block: bytes) -> dict[str, str]:
    """NAME=VALUE entries separated by NUL, decoded losslessly (surrogateescape).

    The first of duplicate names wins, as getenv() would see it; entries without ``=``
    are skipped.
    """
    # os.fsdecode's own steps, hoisted out of the loop: a fleet read decodes every
    # variable of every pane (about 17,000 at 200 sessions).
    encoding, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    env: dict[str, str] = {}
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if not sep or not name:
            continue
        key = name.decode(encoding, errors)
        if key not in env:
            env[key] = value.decode(encoding, errors)
    return env


def read_psutil_environ(pid: int) -> dict[str, str] | None:
    """The portable source; imported only when there is no /proc (it costs ~60 ms)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        return dict(psutil.Process(pid).environ())
    except (psutil.Error, NotImplementedError, OSError):
        return None
