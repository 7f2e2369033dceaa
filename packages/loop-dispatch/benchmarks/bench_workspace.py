"""Worktree costs with real git: making one per item, and reading what one holds.

A bare 'origin' with a small tree (200 files) and a clone of it; for 1, 10 and 30
items: `Workspaces.ensure` per new item (git worktree add, fetch included), `ensure`
of an existing one (what every respawn pays), and `state` (what `sessions list`,
`workspace list` and gc pay per worktree). Prints medians in ms. Bounded: loopback
git only, a fixed number of items.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loop_dispatch.model import WorkItemRef
from loop_dispatch.workspace import Workspaces

ENV = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.invalid",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def clone_with_files(root: Path, files: int) -> Path:
    seed = root / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    for n in range(files):
        (seed / f"f{n}.txt").write_text(f"line {n}\n" * 20)
    git(seed, "add", ".")
    git(seed, "commit", "-q", "-m", "seed")
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(root / "o.git")], check=True)
    subprocess.run(["git", "clone", "-q", str(root / "o.git"), str(root / "clone")], check=True)
    return root / "clone"


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms"


def main() -> int:
    if shutil.which("git") is None:
        print("git not found: skipping the workspace benchmark")
        return 0
    os.environ.update(ENV)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clone = clone_with_files(root, 200)
        ws = Workspaces(root / "wt", {"bench/app": clone})
        made, again, state = [], [], []
        for count in (1, 10, 30):
            start_n = len(made)
            for n in range(start_n, count):
                ref = WorkItemRef("github", "bench/app", n + 1)
                t0 = time.perf_counter()
                ws.ensure(ref)
                made.append(time.perf_counter() - t0)
            refs = [WorkItemRef("github", "bench/app", n + 1) for n in range(count)]
            again.clear()
            state.clear()
            for ref in refs:
                t0 = time.perf_counter()
                ws.ensure(ref)
                again.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                ws.state(ws.path_for(ref))
                state.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ws.list()
            listing = time.perf_counter() - t0
            print(
                f"{count:>2} worktree(s), 200 files: make {ms(made)} each (median so far), "
                f"ensure existing {ms(again)}, state {ms(state)}, list all {listing * 1000:.0f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
