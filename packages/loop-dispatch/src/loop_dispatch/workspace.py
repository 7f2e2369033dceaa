"""Workspaces: one git worktree and branch per work item, so agents never share a checkout.

Five agents editing one checkout overwrite each other's files and move each other's
branch. In `worktree` mode every item gets `<root>/loop-<slug>` on branch `loop/<slug>`,
made from a base ref of the item's local clone. The worktree outlives respawns, resumes
and env restarts (its path is derived from the item, never re-chosen), and is removed
only when removing it loses nothing: no uncommitted change and no commit that is not on
a remote branch (or, in a clone without remotes, on another local branch).

Git is driven through its own CLI (argv, never a shell); every failure becomes one
`WorkspaceError` line naming the command and the repository. Nothing from a payload
reaches a path here: paths come from the item's slug, which is `[A-Za-z0-9_-]` only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .model import WorkItemRef
from .registry import slug_owner

__all__ = [
    "WorkspaceError",
    "WorkspaceState",
    "Workspaces",
    "branch_for",
]

PREFIX = "loop-"
BRANCH_PREFIX = "loop/"


class WorkspaceError(Exception):
    """A git operation on a workspace failed; `str()` is one line naming what and where."""


def branch_for(ref: WorkItemRef) -> str:
    """The item's branch: `loop/<slug>`."""
    return BRANCH_PREFIX + ref.slug()


@dataclass(frozen=True)
class WorkspaceState:
    """What a worktree holds that removing it would lose."""

    path: Path
    ref: WorkItemRef | None
    branch: str | None
    exists: bool
    uncommitted: int  # changed or untracked paths (ignored files do not count)
    unpushed: int  # commits on the branch not on any remote branch (see `Workspaces`)

    @property
    def clean(self) -> bool:
        return self.exists and self.uncommitted == 0 and self.unpushed == 0

    def why_kept(self) -> str:
        """Why removing it would lose work ("" when it would not)."""
        parts = []
        if self.uncommitted:
            parts.append(f"{self.uncommitted} uncommitted change(s)")
        if self.unpushed:
            parts.append(f"{self.unpushed} commit(s) not on a remote branch")
        return ", ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


class Workspaces:
    """Creates, inspects and removes the per-item worktrees under `root`.

    `repositories` maps a project (`OWNER/REPO` for GitHub, `PROJECT` for local; matched
    case-insensitively) to its local clone. `base_ref` None means the clone's default
    branch (its remote's HEAD, else its current branch); with `fetch`, a clone that has
    a remote is fetched before a worktree is made (a failed fetch falls back to what is
    already there: a network blip must not stop an agent from starting).
    """

    def __init__(
        self,
        root: Path,
        repositories: Mapping[str, Path],
        *,
        base_ref: str | None = None,
        fetch: bool = True,
        git: str = "git",
        timeout: float = 120.0,
        prepare: Callable[[Path], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.repositories = {k.lower(): Path(v) for k, v in repositories.items()}
        self.base_ref = base_ref
        self.fetch = fetch
        self.git = git
        self.timeout = timeout
        self.prepare = prepare

    # -- git -----------------------------------------------------------------------------

    def _run(self, cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [self.git, "-C", str(cwd), *args]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                stdin=subprocess.DEVNULL,
                env=None,
            )
        except FileNotFoundError:
            raise WorkspaceError(f"git not found ({self.git!r}); install git") from None
        except subprocess.TimeoutExpired:
            raise WorkspaceError(
                f"git {args[0]} in {cwd} did not finish within {self.timeout:g}s"
            ) from None
        except OSError as exc:
            raise WorkspaceError(f"git {args[0]} in {cwd}: {exc.strerror or exc}") from None
        if check and proc.returncode != 0:
            raise WorkspaceError(
                f"git {' '.join(args[:2])} in {cwd} failed: "
                f"{_one_line(proc.stderr or proc.stdout) or f'exit {proc.returncode}'}"
            )
        return proc

    def _out(self, cwd: Path, *args: str) -> str:
        return self._run(cwd, *args).stdout.strip()

    # -- naming --------------------------------------------------------------------------

    def path_for(self, ref: WorkItemRef) -> Path:
        return self.root / (PREFIX + ref.slug())

    def clone_for(self, ref: WorkItemRef) -> Path:
        clone = self.repositories.get(ref.project.lower())
        if clone is None:
            raise WorkspaceError(
                f"no local clone for {ref.project} (key workspace.repositories); "
                "add it to make worktrees for its items"
            )
        if not clone.is_dir():
            raise WorkspaceError(
                f"workspace.repositories[{ref.project}]: {clone} is not a directory"
            )
        return clone

    # -- create --------------------------------------------------------------------------

    def ensure(self, ref: WorkItemRef) -> Path:
        """The item's worktree, made if it is not there yet (idempotent: a respawn, a
        resume or a restart finds the same one). Raises WorkspaceError."""
        path = self.path_for(ref)
        if self._is_worktree(path):
            return path
        if path.exists() and any(path.iterdir()):
            raise WorkspaceError(
                f"{path} exists and is not a git worktree; move it away or remove it"
            )
        clone = self.clone_for(ref)
        self.root.mkdir(parents=True, exist_ok=True)
        self._run(clone, "worktree", "prune", check=False)
        branch = branch_for(ref)
        if self._has_branch(clone, branch):
            self._run(clone, "worktree", "add", "--quiet", str(path), branch)
        else:
            base = self._base(clone)
            self._run(clone, "worktree", "add", "--quiet", "-b", branch, str(path), base)
        if self.prepare is not None:
            self.prepare(path)
        return path

    def _is_worktree(self, path: Path) -> bool:
        if not (path / ".git").exists():
            return False
        proc = self._run(path, "rev-parse", "--show-toplevel", check=False)
        return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == path.resolve()

    def _has_branch(self, clone: Path, branch: str) -> bool:
        proc = self._run(
            clone, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False
        )
        return proc.returncode == 0

    def _remote(self, clone: Path) -> str | None:
        remotes = self._out(clone, "remote").split()
        if not remotes:
            return None
        return "origin" if "origin" in remotes else remotes[0]

    def _base(self, clone: Path) -> str:
        """`workspace.baseRef`, else the clone's default branch, fetched first."""
        remote = self._remote(clone)
        if remote is not None and self.fetch:
            # A failed fetch is not fatal: the local view of the remote still serves.
            self._run(clone, "fetch", "--quiet", remote, check=False)
        if self.base_ref:
            return self.base_ref
        if remote is not None:
            proc = self._run(
                clone,
                "symbolic-ref",
                "--quiet",
                "--short",
                f"refs/remotes/{remote}/HEAD",
                check=False,
            )
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.strip()
        return self._out(clone, "rev-parse", "--abbrev-ref", "HEAD")

    # -- inspect -------------------------------------------------------------------------

    def state(self, path: Path) -> WorkspaceState:
        """What the worktree at `path` holds that removing it would lose."""
        ref = slug_owner(path.name[len(PREFIX) :]) if path.name.startswith(PREFIX) else None
        if not self._is_worktree(path):
            return WorkspaceState(path, ref, None, False, 0, 0)
        status = self._out(path, "status", "--porcelain", "--untracked-files=all")
        uncommitted = len([line for line in status.splitlines() if line.strip()])
        branch = self._out(path, "rev-parse", "--abbrev-ref", "HEAD")
        if self._out(path, "remote"):
            unsaved = ["--not", "--remotes"]
        else:  # no remote: saved means reachable from another local branch
            heads = self._out(path, "for-each-ref", "--format=%(refname)", "refs/heads/")
            own = f"refs/heads/{branch}"
            unsaved = [f"^{h}" for h in heads.splitlines() if h and h != own]
        unpushed = int(self._out(path, "rev-list", "--count", "HEAD", *unsaved) or 0)
        return WorkspaceState(path, ref, branch, True, uncommitted, unpushed)

    def list(self) -> list[WorkspaceState]:
        """Every `loop-*` directory under the root, in name order."""
        if not self.root.is_dir():
            return []
        return [
            self.state(p)
            for p in sorted(self.root.iterdir())
            if p.is_dir() and p.name.startswith(PREFIX)
        ]

    # -- remove --------------------------------------------------------------------------

    def remove(self, state: WorkspaceState, *, force: bool = False) -> None:
        """Remove a worktree and its branch. Without `force` only a clean one (re-checked
        here, and git itself refuses a dirty one too)."""
        if not state.exists:
            return
        if not force:
            fresh = self.state(state.path)
            if not fresh.clean:
                raise WorkspaceError(f"{state.path} holds {fresh.why_kept()}; not removed")
        common = Path(
            self._out(state.path, "rev-parse", "--path-format=absolute", "--git-common-dir")
        )
        clone = common.parent if common.name == ".git" else common
        args = ["worktree", "remove", *(["--force"] if force else []), str(state.path)]
        self._run(clone, *args)
        if state.branch and state.branch.startswith(BRANCH_PREFIX):
            self._run(
                clone, "branch", "-D" if force or state.clean else "-d", state.branch, check=False
            )

    def release(self, ref: WorkItemRef) -> WorkspaceState:
        """On close: remove the item's worktree when that loses nothing; the state says
        what was found (`clean` true: removed)."""
        state = self.state(self.path_for(ref))
        if state.clean:
            self.remove(state)
        return state
