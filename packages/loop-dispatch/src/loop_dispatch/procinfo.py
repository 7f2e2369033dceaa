"""What /proc says of a process: its start time (with its pid, what tells a live claimer
from a reused pid), and the files its process tree holds open (which conversation file
is a harness's own)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["proc_start", "tree_open_files"]


def proc_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' where /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return ""
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


def tree_open_files(roots: Iterable[int]) -> list[Path] | None:
    """The regular files the processes of `roots` and all their descendants hold open;
    None when that cannot be known (no live root, or a process of the tree not ours to
    read, or a platform without the means): never a partial answer taken for whole."""
    import psutil

    files: list[Path] = []
    readable = False
    for root in roots:
        try:
            parent = psutil.Process(root)
            procs = [parent, *parent.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except (psutil.Error, OSError, NotImplementedError):
            return None
        for proc in procs:
            try:
                files.extend(Path(f.path) for f in proc.open_files())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # ended meanwhile: it holds nothing
            except (psutil.Error, OSError, NotImplementedError):
                return None
        readable = True
    return files if readable else None
