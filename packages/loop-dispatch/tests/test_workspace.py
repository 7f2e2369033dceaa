"""Workspaces with real git: one worktree and branch per item, removed only when clean.

The dispatcher test at the end runs five items on one repository with real tmux
(private socket) and the fake harness: each agent edits the same file in its own
worktree, a respawn keeps the worktree, a close keeps unsaved work and says why.

A bare repository plays the remote ("origin"); a clone of it is the operator's local
clone that `workspace.repositories` names.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from loop_dispatch.adapters import ClaudeCodeAdapter
from loop_dispatch.claude_trust import TrustError, is_trusted, trust_folder
from loop_dispatch.launch import LaunchSpec
from loop_dispatch.model import EventKind, WorkItemRef
from loop_dispatch.workspace import WorkspaceError, Workspaces, branch_for, in_use, occupants

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

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


@pytest.fixture(autouse=True)
def _git_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))


def make_clone(tmp_path: Path, *, remote: bool = True) -> Path:
    """A clone of a bare 'origin' with one commit on main (or a lone repo)."""
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "README.md").write_text("hello\n")
    git(seed, "add", "README.md")
    git(seed, "commit", "-q", "-m", "first")
    if not remote:
        return seed
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(origin)], check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    return clone


REF = WorkItemRef.parse("github:acme/widgets#3")
REFS = [WorkItemRef.parse(f"github:acme/widgets#{n}") for n in range(1, 6)]
NOTES = "notes.txt"


def test_ensure_makes_a_worktree_on_its_branch_from_the_default_branch(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    ws = Workspaces(tmp_path / "wt", {"Acme/Widgets": clone})
    path = ws.ensure(REF)
    assert path == tmp_path / "wt" / f"loop-{REF.slug()}"
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == branch_for(REF)
    assert git(path, "rev-parse", "HEAD") == git(clone, "rev-parse", "origin/main")
    assert ws.ensure(REF) == path  # idempotent: a respawn finds the same one
    state = ws.state(path)
    assert state.ref == REF
    assert state.clean


def test_ensure_remakes_a_removed_worktree_on_the_existing_branch(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone})
    path = ws.ensure(REF)
    (path / "work.txt").write_text("x\n")
    git(path, "add", "work.txt")
    git(path, "commit", "-q", "-m", "work")
    head = git(path, "rev-parse", "HEAD")
    shutil.rmtree(path)
    assert ws.ensure(REF) == path
    assert git(path, "rev-parse", "HEAD") == head


def test_release_keeps_uncommitted_and_unpushed_work(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone})
    path = ws.ensure(REF)
    (path / "new.txt").write_text("untracked\n")
    state = ws.release(REF)
    assert path.is_dir()
    assert state.uncommitted == 1
    assert "uncommitted" in state.why_kept()
    git(path, "add", "new.txt")
    git(path, "commit", "-q", "-m", "local only")
    state = ws.release(REF)
    assert path.is_dir()
    assert state.unpushed == 1
    assert state.uncommitted == 0
    assert "not on a remote branch" in state.why_kept()
    with pytest.raises(WorkspaceError, match="not removed"):
        ws.remove(state)
    git(path, "push", "-q", "origin", branch_for(REF))
    state = ws.release(REF)
    assert state.clean
    assert not path.exists()
    assert branch_for(REF) not in git(clone, "branch", "--list")


def test_no_remote_counts_commits_on_other_local_branches_as_saved(tmp_path: Path) -> None:
    repo = make_clone(tmp_path, remote=False)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": repo})
    path = ws.ensure(REF)
    assert ws.state(path).clean
    (path / "a.txt").write_text("a\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "a")
    assert ws.state(path).unpushed == 1


def test_force_removes_unsaved_work(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone})
    path = ws.ensure(REF)
    (path / "README.md").write_text("changed\n")
    ws.remove(ws.state(path), force=True)
    assert not path.exists()


def test_errors_are_one_line_naming_what_and_where(tmp_path: Path) -> None:
    ws = Workspaces(tmp_path / "wt", {})
    with pytest.raises(WorkspaceError, match=r"workspace.repositories"):
        ws.ensure(REF)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": tmp_path / "missing"})
    with pytest.raises(WorkspaceError, match="not a directory"):
        ws.ensure(REF)
    notrepo = tmp_path / "plain"
    notrepo.mkdir()
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": notrepo})
    with pytest.raises(WorkspaceError) as info:
        ws.ensure(REF)
    assert "\n" not in str(info.value)
    assert str(notrepo) in str(info.value)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": notrepo}, git="no-such-git-binary")
    with pytest.raises(WorkspaceError, match="git not found"):
        ws.ensure(REF)


def test_a_foreign_directory_in_the_way_is_refused_not_overwritten(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone})
    blocker = ws.path_for(REF)
    blocker.mkdir(parents=True)
    (blocker / "precious.txt").write_text("mine\n")
    with pytest.raises(WorkspaceError, match="not a git worktree"):
        ws.ensure(REF)
    assert (blocker / "precious.txt").read_text() == "mine\n"


def test_base_ref_and_failed_fetch(tmp_path: Path) -> None:
    clone = make_clone(tmp_path)
    git(clone, "checkout", "-q", "-b", "develop")
    (clone / "dev.txt").write_text("d\n")
    git(clone, "add", "dev.txt")
    git(clone, "commit", "-q", "-m", "dev")
    git(clone, "remote", "set-url", "origin", str(tmp_path / "gone.git"))  # fetch fails
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone}, base_ref="develop")
    path = ws.ensure(REF)
    assert (path / "dev.txt").exists()


def test_claude_trust_is_seeded_once_and_keeps_other_keys(tmp_path: Path) -> None:
    config = tmp_path / "home" / ".claude.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"theme": "dark", "projects": {"/x": {"a": 1}}}))
    folder = tmp_path / "wt" / "loop-x"
    folder.mkdir(parents=True)
    assert not is_trusted(folder, config)
    assert trust_folder(folder, config) is True
    assert trust_folder(folder, config) is False
    data = json.loads(config.read_text())
    assert data["theme"] == "dark"
    assert data["projects"]["/x"] == {"a": 1}
    assert is_trusted(folder, config)
    config.write_text("[1, 2]")
    with pytest.raises(TrustError, match="not a JSON object"):
        trust_folder(folder, config)
    assert config.read_text() == "[1, 2]"  # never replaced


@pytest.fixture
def rig(real_tmux, fake_harness, make_dispatcher, tmp_path):
    program, convo = fake_harness
    clone = make_clone(tmp_path)

    def launch(record, argv):
        return LaunchSpec(list(argv), {"FAKE_HARNESS_DIR": str(convo), "FAKE_HARNESS_EDIT": NOTES})

    workspaces = Workspaces(tmp_path / "worktrees", {"acme/widgets": clone})
    disp = make_dispatcher(
        real_tmux,
        ClaudeCodeAdapter(binary=str(program)),
        launcher=launch,
        survival_delay=1.0,
        workspaces=workspaces,
    )
    return disp, real_tmux, workspaces, clone


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.tmux
def test_five_items_never_interfere_and_close_keeps_unsaved_work(
    rig, store, events, make_event, wait_for
):
    disp, tmux, workspaces, clone = rig
    for ref in REFS:
        assert disp.dispatch(make_event(ref, body=f"work on {ref}")).reason == "spawned"
    paths = {ref: workspaces.path_for(ref) for ref in REFS}
    for ref in REFS:
        record = store.registry.get(ref)
        assert record.cwd == paths[ref]
        assert git(paths[ref], "rev-parse", "--abbrev-ref", "HEAD") == branch_for(ref)
        assert is_trusted(paths[ref])  # Claude Code opens no trust dialog there
    for ref in REFS:
        assert disp.dispatch(make_event(ref, body="more")).reason == "delivered"
    for ref in REFS:
        conversation = store.registry.get(ref).conversation_id
        lines = wait_for(lambda p=paths[ref]: len(_lines(p / NOTES)) >= 2 and _lines(p / NOTES))
        # Only this item's agent wrote this worktree's file: no interference.
        assert {line.split()[0] for line in lines} == {conversation}
    assert not (clone / NOTES).exists()  # the operator's clone is untouched

    # Respawn (the session was killed) keeps the same worktree.
    victim = REFS[0]
    assert tmux.kill(victim.tmux_name())
    assert disp.dispatch(make_event(victim, body="after kill")).reason.startswith("respawned")
    assert store.registry.get(victim).cwd == paths[victim]
    wait_for(lambda: any("start" in x for x in _lines(paths[victim] / NOTES)[2:]))

    # Close: the agents' notes are uncommitted work, so every worktree is kept ...
    kept = REFS[1]
    assert disp.dispatch(make_event(kept, kind=EventKind.CLOSED)).reason == "closed"
    assert paths[kept].is_dir()
    record = events.read("workspace.kept")
    assert record
    assert record[-1]["workItem"] == str(kept)
    assert "uncommitted" in record[-1]["detail"]["reason"]
    # ... and one whose work was pushed is removed.
    clean = REFS[2]
    git(paths[clean], "add", NOTES)
    git(paths[clean], "commit", "-q", "-m", "agent work")
    git(paths[clean], "push", "-q", "origin", branch_for(clean))
    disp.close(clean)
    wait_for(lambda: not paths[clean].exists())
    removed = events.read("workspace.removed")
    assert [r["workItem"] for r in removed] == [str(clean)]
    assert json.dumps(removed).count(str(paths[clean])) == 1


# -- hidden edits (issue 20, point 11) ----------------------------------------------------


def test_edits_hidden_by_assume_unchanged_or_skip_worktree_are_unsaved_work(
    tmp_path: Path,
) -> None:
    clone = make_clone(tmp_path)
    for name in ("a.txt", "b.txt", "sparse.txt"):
        (clone / name).write_text(f"{name}\n")
    git(clone, "add", ".")
    git(clone, "commit", "-q", "-m", "more files")
    git(clone, "push", "-q", "origin", "main")
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone})
    path = ws.ensure(REF)
    git(path, "update-index", "--assume-unchanged", "a.txt")
    git(path, "update-index", "--skip-worktree", "b.txt", "sparse.txt")
    (path / "sparse.txt").unlink()  # as a sparse checkout leaves it: nothing to lose
    assert ws.state(path).clean  # flags alone, unchanged content: nothing to lose
    (path / "a.txt").write_text("an edit git is told not to look at\n")
    (path / "b.txt").write_text("another\n")
    assert git(path, "status", "--porcelain") == ""  # git itself shows nothing
    state = ws.release(REF)
    assert path.is_dir()
    assert state.hidden == 2
    assert not state.clean
    assert "2 change(s) hidden by assume-unchanged/skip-worktree" in state.why_kept()
    with pytest.raises(WorkspaceError, match="not removed"):
        ws.remove(state)
    assert (path / "a.txt").read_text() == "an edit git is told not to look at\n"


# -- a running agent's worktree stays (issue 20, point 10) -------------------------------


def test_in_use_sees_a_process_working_inside_the_worktree(tmp_path: Path, real_tmux) -> None:
    clone = make_clone(tmp_path)
    ws = Workspaces(tmp_path / "wt", {"acme/widgets": clone})
    path = ws.ensure(REF)
    (path / "deep").mkdir()
    assert in_use(path, real_tmux, REF.tmux_name()) == ""
    proc = subprocess.Popen(["sleep", "60"], cwd=path / "deep")
    try:
        assert occupants(path) == [proc.pid]
        assert f"1 process(es) work in it (pid {proc.pid})" == in_use(
            path, real_tmux, REF.tmux_name()
        )
    finally:
        proc.kill()
        proc.wait()
    assert occupants(path) == []
    assert real_tmux.spawn(REF.tmux_name(), ["sleep", "60"], str(tmp_path)).ok
    assert "is live" in in_use(path, real_tmux, REF.tmux_name())


def test_close_keeping_the_harness_keeps_its_worktree_and_branch(
    real_tmux, fake_harness, make_dispatcher, tmp_path, store, events, make_event, wait_for
):
    """sessions.killHarnessOnClose false: the agent keeps running after the close, so
    its worktree (clean: its notes are ignored) must stay and its next write land."""
    program, convo = fake_harness
    clone = make_clone(tmp_path)
    (clone / ".git" / "info" / "exclude").write_text(f"{NOTES}\n")

    def launch(record, argv):
        return LaunchSpec(list(argv), {"FAKE_HARNESS_DIR": str(convo), "FAKE_HARNESS_EDIT": NOTES})

    workspaces = Workspaces(tmp_path / "worktrees", {"acme/widgets": clone})
    disp = make_dispatcher(
        real_tmux,
        ClaudeCodeAdapter(binary=str(program)),
        launcher=launch,
        survival_delay=0.5,
        workspaces=workspaces,
        kill_harness_on_close=False,
    )
    assert disp.dispatch(make_event(REF, body="start")).reason == "spawned"
    path = workspaces.path_for(REF)
    wait_for(lambda: _lines(path / NOTES))
    assert workspaces.state(path).clean  # removing it would lose nothing in git
    assert disp.dispatch(make_event(REF, kind=EventKind.CLOSED)).reason == "closed"
    assert not store.registry.get(REF).active
    assert path.is_dir()
    assert branch_for(REF) in git(clone, "branch", "--list")
    kept = events.read("workspace.kept")
    assert [r["workItem"] for r in kept] == [str(REF)]
    assert "is live" in kept[-1]["detail"]["reason"]
    assert not events.read("workspace.removed")
    # The agent works on: its next write lands in its worktree.
    assert real_tmux.deliver(REF.tmux_name(), "after the close").ok
    wait_for(lambda: any("message" in line for line in _lines(path / NOTES)))


def test_close_keeps_the_worktree_when_tmux_does_not_answer(
    fake_tmux, make_dispatcher, store, events, make_event, tmp_path
):
    clone = make_clone(tmp_path)
    workspaces = Workspaces(tmp_path / "worktrees", {"acme/widgets": clone})
    disp = make_dispatcher(fake_tmux.tmux, workspaces=workspaces, kill_harness_on_close=False)
    assert disp.dispatch(make_event(REF, body="start")).reason == "spawned"
    path = workspaces.path_for(REF)
    assert workspaces.state(path).clean
    fake_tmux.state.set_fault("hang", ["*"])  # UNKNOWN is never taken for absent
    assert disp.close(REF).reason == "closed"
    assert path.is_dir()
    kept = events.read("workspace.kept")
    assert "tmux did not answer" in kept[-1]["detail"]["reason"]


@pytest.mark.tmux
def test_a_close_by_someone_else_keeps_even_a_clean_worktree(
    rig, store, events, make_event, wait_for
):
    """Issue 20: a close event marked `keep_workspace` (its closer is not an authorized
    actor) leaves the worktree and branch in place even when nothing would be lost, so a
    reopen starts the agent there again; the same close by an authorized actor removes
    the clean worktree as before."""
    import dataclasses

    disp, _tmux, workspaces, clone = rig
    mine, theirs = REFS[0], REFS[1]
    for ref in (mine, theirs):
        assert disp.dispatch(make_event(ref, body=f"work on {ref}")).reason == "spawned"
    for ref in (mine, theirs):
        path = workspaces.path_for(ref)
        wait_for(lambda p=path: _lines(p / NOTES))
        (path / NOTES).unlink()  # nothing unsaved: a plain close would remove it
    by_reporter = dataclasses.replace(
        make_event(theirs, kind=EventKind.CLOSED, body="", actor="reporter"), keep_workspace=True
    )
    assert disp.dispatch(by_reporter).reason == "closed"
    assert workspaces.path_for(theirs).is_dir()
    assert git(clone, "rev-parse", "--verify", "-q", branch_for(theirs))
    [closed] = events.read("session.closed")
    assert closed["detail"]["closed_by"] == "reporter"
    assert closed["detail"]["workspace_kept"] is True
    by_alice = make_event(mine, kind=EventKind.CLOSED, body="", actor="alice")
    assert disp.dispatch(by_alice).reason == "closed"
    wait_for(lambda: not workspaces.path_for(mine).exists())
    # Reopened and labeled again: the agent starts in the kept worktree, on its branch.
    assert disp.dispatch(make_event(theirs, body="again")).reason == "spawned"
    assert store.registry.get(theirs).cwd == workspaces.path_for(theirs)
