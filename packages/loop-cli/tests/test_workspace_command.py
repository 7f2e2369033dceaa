"""Worktree mode through the CLI: real git, a private tmux server, the demo agent.

Each item's session runs in its own worktree; an env restart keeps it; closing an item
with uncommitted work keeps its worktree and `sessions list` says why; `workspace gc
--dry-run` lists exactly the clean ones and gc removes only those.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from loop_dispatch import WorkItemRef
from loop_dispatch.store import Store

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]

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


@pytest.fixture
def clone(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    seed = isolated / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "README.md").write_text("hello\n")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "first")
    origin = isolated / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(origin)], check=True)
    out = isolated / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(out)], check=True)
    return out


def _records(isolated: Path) -> dict[str, object]:
    store = Store.open(isolated / "state")
    try:
        return {str(r.work_item): r for r in store.registry.list()}
    finally:
        store.close()


def _pane_path(socket: str, name: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "-t", f"={name}:", "#{pane_current_path}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def test_worktree_mode_end_to_end(run_cli, write_config, tmux_socket, isolated, clone, wait):
    env_file = isolated / "agent.env"
    env_file.write_text("API_TOKEN=one\n", encoding="utf-8")
    root = isolated / "worktrees"
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "env": {"file": str(env_file)},
            "workspace": {
                "mode": "worktree",
                "root": str(root),
                "repositories": {"loop": str(clone)},
            },
        }
    )
    refs = [run_cli("item", "open", f"task {n}").output.strip() for n in range(3)]
    assert run_cli("poll", "--once").exit_code == 0
    records = _records(isolated)
    paths = {ref: root / f"loop-{WorkItemRef.parse(ref).slug()}" for ref in refs}
    for ref in refs:
        assert records[ref].cwd == paths[ref]
        assert (
            git(paths[ref], "rev-parse", "--abbrev-ref", "HEAD")
            == f"loop/{WorkItemRef.parse(ref).slug()}"
        )
        assert wait(lambda r=ref: _pane_path(tmux_socket, records[r].tmux_name) == str(paths[r]))

    # An env restart relaunches in place: same worktree.
    env_file.write_text("API_TOKEN=two\n", encoding="utf-8")
    restarted = run_cli("sessions", "restart", "--all", "--format", "json")
    assert restarted.exit_code == 0, restarted.output
    assert {r["outcome"] for r in json.loads(restarted.output)["rows"]} == {"restarted"}
    for ref in refs:
        assert _records(isolated)[ref].cwd == paths[ref]
        assert wait(lambda r=ref: _pane_path(tmux_socket, records[r].tmux_name) == str(paths[r]))

    # Close two: one holds uncommitted work (kept, said why), one is clean (removed).
    dirty, clean, active = refs
    (paths[dirty] / "draft.txt").write_text("unsaved\n")
    run_cli("item", "close", dirty)
    run_cli("item", "close", clean)
    assert run_cli("poll", "--once").exit_code == 0
    assert paths[dirty].is_dir()
    assert not paths[clean].exists()
    listing = run_cli("sessions", "list")
    assert f"{dirty}: worktree kept (1 uncommitted change(s))" in listing.output
    assert clean not in [
        line.split(":")[0] for line in listing.output.splitlines() if "kept" in line
    ]

    # gc: the dirty one is kept, the active one is kept; once the draft is gone the dry
    # run lists exactly it, and gc removes it (and only it).
    dry = json.loads(run_cli("workspace", "gc", "--dry-run", "--format", "json").output)
    assert {r["ref"]: r["action"] for r in dry} == {dirty: "kept", active: "kept"}
    (paths[dirty] / "draft.txt").unlink()
    dry = json.loads(run_cli("workspace", "gc", "--dry-run", "--format", "json").output)
    assert [r["ref"] for r in dry if r["action"] == "would-remove"] == [dirty]
    assert paths[dirty].is_dir()
    done = json.loads(run_cli("workspace", "gc", "--format", "json").output)
    assert [r["ref"] for r in done if r["action"] == "removed"] == [dirty]
    assert not paths[dirty].exists()
    assert paths[active].is_dir()
    listed = json.loads(run_cli("workspace", "list", "--format", "json").output)
    assert [(r["ref"], r["sessionActive"]) for r in listed] == [(active, True)]


def test_workspace_commands_in_shared_mode_say_so(run_cli, loop_config):
    result = run_cli("workspace", "list")
    assert result.exit_code == 2
    assert "workspace.mode is shared" in result.output


def test_worktree_mode_without_repositories_is_one_config_line(run_cli, write_config):
    write_config({"workspace": {"mode": "worktree"}})
    result = run_cli("workspace", "list")
    assert result.exit_code == 2
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1
    assert "workspace: mode worktree needs at least one repositories entry" in lines[0]


def test_a_running_agent_keeps_its_worktree_through_close_and_gc(
    run_cli, write_config, tmux_socket, isolated, clone
):
    """Issue 20, point 10: with sessions.killHarnessOnClose false the agent outlives the
    close; neither the close nor `workspace gc --force` removes its worktree, nor one a
    process works in, nor one tmux cannot be asked about. Once nothing runs, gc does."""
    root = isolated / "worktrees"
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "sessions": {"killHarnessOnClose": False},
            "workspace": {
                "mode": "worktree",
                "root": str(root),
                "repositories": {"loop": str(clone)},
            },
        }
    )
    ref = run_cli("item", "open", "task").output.strip()
    assert run_cli("poll", "--once").exit_code == 0
    path = root / f"loop-{WorkItemRef.parse(ref).slug()}"
    name = WorkItemRef.parse(ref).tmux_name()
    assert git(path, "status", "--porcelain") == ""  # clean: only its agent holds it
    run_cli("item", "close", ref)
    assert run_cli("poll", "--once").exit_code == 0
    assert not _records(isolated)[ref].active
    assert path.is_dir()
    assert f"loop/{WorkItemRef.parse(ref).slug()}" in git(clone, "branch", "--list")
    assert f"{ref}: worktree kept (its agent is running)" in run_cli("sessions", "list").output

    rows = json.loads(run_cli("workspace", "gc", "--force", "--format", "json").output)
    assert [(r["ref"], r["action"]) for r in rows] == [(ref, "kept")]
    assert f"tmux session {name} is live" in rows[0]["why"]
    assert path.is_dir()

    # The agent ends; a process still works inside the worktree: kept.
    subprocess.run(["tmux", "-L", tmux_socket, "kill-session", "-t", f"={name}"], check=True)
    proc = subprocess.Popen(["sleep", "60"], cwd=path)
    try:
        rows = json.loads(run_cli("workspace", "gc", "--force", "--format", "json").output)
        assert rows[0]["action"] == "kept"
        assert f"pid {proc.pid}" in rows[0]["why"]
    finally:
        proc.kill()
        proc.wait()
    rows = json.loads(run_cli("workspace", "gc", "--format", "json").output)
    assert [(r["ref"], r["action"]) for r in rows] == [(ref, "removed")]
    assert not path.exists()


def test_gc_keeps_a_worktree_when_tmux_does_not_answer(
    run_cli, write_config, isolated, clone, tmp_path
):
    """UNKNOWN is never absent: a tmux that does not answer keeps every worktree."""
    from loop_dispatch.workspace import Workspaces

    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    hang = fakebin / "tmux"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    root = isolated / "worktrees"
    write_config(
        {"workspace": {"mode": "worktree", "root": str(root), "repositories": {"loop": str(clone)}}}
    )
    ref = WorkItemRef.parse("local:loop#1")
    path = Workspaces(root, {"loop": clone}).ensure(ref)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{fakebin}{os.pathsep}{old_path}"
    try:
        rows = json.loads(run_cli("workspace", "gc", "--format", "json").output)
    finally:
        os.environ["PATH"] = old_path
    assert [(r["ref"], r["action"]) for r in rows] == [(str(ref), "kept")]
    assert "tmux did not answer" in rows[0]["why"]
    assert path.is_dir()
