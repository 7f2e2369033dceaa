"""`workspace gc` against agents being spawned at the same moment (issue 20, point 10).

Real git worktrees, a real tmux server on a private socket, the bundled demo agent,
and two real processes: `the-loop poll --once` spawns 30 agents while `the-loop
workspace gc` runs back to back beside it. Every item's clean worktree exists before
either starts (made as a spawn's own `ensure` makes it), so a gc that reads the active
set once and takes no item lock removes the worktrees of agents spawned meanwhile.
gc decides each worktree under the item's lock, from the record and tmux read there:
no live agent may lose its worktree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from loop_dispatch.store import Store
from loop_dispatch.workspace import Workspaces

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ITEMS = 30
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _clone(root: Path) -> Path:
    seed = root / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "README.md").write_text("hello\n")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "first")
    origin = root / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(origin)], check=True)
    clone = root / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    return clone


def _is_worktree(path: Path) -> bool:
    done = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and Path(done.stdout.strip()).resolve() == path.resolve()


def test_gc_never_removes_the_worktree_of_an_agent_spawned_during_it(
    tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    clone = _clone(tmp_path)
    root = tmp_path / "worktrees"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "stateDir": str(tmp_path / "state"),
                "routing": {"tmuxSocket": tmux_socket},
                "harness": {"survivalSeconds": 0.2},
                "delivery": {"concurrency": 8},
                "workspace": {
                    "mode": "worktree",
                    "root": str(root),
                    "fetch": False,
                    "repositories": {"loop": str(clone)},
                },
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(
        THE_LOOP_CONFIG=str(config),
        THE_LOOP_DEMO_AGENT_DIR=str(tmp_path / "agent"),
        HOME=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
    )
    the_loop = [sys.executable, "-m", "loop_cli.main"]

    from loop_cli.tracker import LocalTracker

    store = Store.open(tmp_path / "state")
    try:
        refs = [LocalTracker(store).open(f"task {n}") for n in range(ITEMS)]
    finally:
        store.close()
    workspaces = Workspaces(root, {"loop": clone}, fetch=False)
    for ref in refs:  # clean worktrees of items with no session yet
        workspaces.ensure(ref)

    poll = subprocess.Popen(
        [*the_loop, "poll", "--once"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    gc_runs: list[tuple[float, float]] = []
    removed: list[str] = []
    while True:  # gc back to back for as long as the spawns go on
        started = time.time()
        done = subprocess.run(
            [*the_loop, "workspace", "gc", "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        gc_runs.append((started, time.time()))
        assert done.returncode == 0, done.stdout + done.stderr
        removed += [r["ref"] for r in json.loads(done.stdout) if r["action"] == "removed"]
        if poll.poll() is not None:
            break
    out = poll.communicate(timeout=60)[0].decode(errors="replace")
    assert poll.returncode == 0, out

    store = Store.open(tmp_path / "state")
    try:
        records = [r for r in store.registry.list() if r.active]
    finally:
        store.close()
    live = subprocess.run(
        ["tmux", "-L", tmux_socket, "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()

    def during_gc(moment: float) -> bool:
        return any(a <= moment <= b for a, b in gc_runs)

    spawned = [r for r in records if r.tmux_name in live and during_gc(r.created_at.timestamp())]
    lost = [r for r in records if r.tmux_name in live and not _is_worktree(r.cwd)]
    print(
        f"{len(spawned)} spawned during gc ({len(gc_runs)} gc runs), "
        f"{len(lost)} worktrees of live agents removed; gc removed {len(removed)} in all"
    )
    assert spawned, "no agent was spawned while a gc ran: the race was not exercised"
    assert lost == []
