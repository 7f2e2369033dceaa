"""Workspaces: one git worktree and branch per work item, so agents never share a checkout.

Five agents editing one checkout overwrite each other's files and move each other's
branch. In `worktree` mode every item gets `<root>/loop-<slug>` on branch `loop/<slug>`,
made from a base ref of the item's local clone. The worktree outlives respawns, resumes
and env restarts (its path is derived from the item, never re-chosen), and is removed
only when removing it loses nothing: no uncommitted change and no commit that is not on
a remote branch (or, in a clone without remotes, on another local branch).

Edits git hides (`update-index --assume-unchanged`, `--skip-worktree`) count as unsaved
work too: `git status` does not show them, but removing the worktree loses them.

A worktree a live process uses is never removed, whatever it holds: `in_use` asks tmux
about the item's session (LIVE or no answer: in use) and looks for processes whose
working directory is inside it. Callers ask under the item's lock, so no spawn can slip
in between the question and the removal.

Git is driven through its own CLI (argv, never a shell); every failure becomes one
`WorkspaceError` line naming the command and the repository. Nothing from a payload
reaches a path here: paths come from the item's slug, which is `[A-Za-z0-9_-]` only.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DispatchError
from .model import WorkItemRef
from .registry import slug_owner

if TYPE_CHECKING:
    from loop_tmux import Tmux

__all__ = [
    "WorkspaceError",
    "WorkspaceState",
    "Workspaces",
    "branch_for",
    "in_use",
    "occupants",
]

PREFIX = "loop-"
BRANCH_PREFIX = "loop/"


class WorkspaceError(DispatchError):
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
    hidden: int = 0  # edited files git is told to ignore (assume-unchanged, skip-worktree)

    @property
    def clean(self) -> bool:
        return self.exists and self.uncommitted == 0 and self.unpushed == 0 and self.hidden == 0

    def why_kept(self) -> str:
        """Why removing it would lose work ("" when it would not)."""
        parts = []
        if self.uncommitted:
            parts.append(f"{self.uncommitted} uncommitted change(s)")
        if self.hidden:
            parts.append(f"{self.hidden} change(s) hidden by assume-unchanged/skip-worktree")
        if self.unpushed:
            parts.append(f"{self.unpushed} commit(s) not on a remote branch")
        return ", ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


class Workspaces:
    """Creates, inspects and removes the per-item worktrees under `root`.

    `repositories` maps a project (`OWNER/REPO` for GitHub, `PROJECT` for local,
    `SITE/KEY` or just `KEY` for a Jira project; matched case-insensitively) to its
    local clone. `base_ref` None means the clone's default
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

    def _run(
        self, cwd: Path, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.git, "-C", str(cwd), *args]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                input=input,
                stdin=subprocess.DEVNULL if input is None else None,
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
        if clone is None and ref.source == "jira":  # a Jira project by its key alone
            clone = self.repositories.get(ref.project.partition("/")[2].lower())
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
        ref = self.owner(path)
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
        hidden = self._hidden_edits(path)
        return WorkspaceState(path, ref, branch, True, uncommitted, unpushed, hidden)

    def _hidden_edits(self, path: Path) -> int:
        """Files flagged assume-unchanged or skip-worktree whose content differs from
        the index: `git status` is told not to look at them, so it cannot count them.
        A flagged file absent from the worktree (a sparse checkout) loses nothing."""
        listing = self._run(path, "ls-files", "-v", "-s", "-z").stdout
        flagged: list[tuple[str, str]] = []  # (index object, path)
        for entry in listing.split("\0"):
            head, _, name = entry.partition("\t")
            fields = head.split()
            if len(fields) != 4 or not name:
                continue
            tag, mode, obj, _stage = fields
            if not (tag.islower() or tag == "S") or mode not in ("100644", "100755"):
                continue
            if (path / name).is_file() and not (path / name).is_symlink():
                flagged.append((obj, name))
        # A name hash-object cannot take one per line is counted as changed, unread.
        odd = sum(1 for _, name in flagged if "\n" in name)
        flagged = [(obj, name) for obj, name in flagged if "\n" not in name]
        if not flagged:
            return odd
        names = "".join(f"{name}\n" for _, name in flagged)
        now = self._run(path, "hash-object", "--stdin-paths", input=names).stdout.split()
        return odd + sum(1 for (obj, _), cur in zip(flagged, now, strict=False) if obj != cur)

    def paths(self) -> list[Path]:
        """Every `loop-*` directory under the root, in name order (no git call)."""
        if not self.root.is_dir():
            return []
        return [p for p in sorted(self.root.iterdir()) if p.is_dir() and p.name.startswith(PREFIX)]

    def owner(self, path: Path) -> WorkItemRef | None:
        """The item a `loop-<slug>` directory belongs to (None: no item's name)."""
        return slug_owner(path.name[len(PREFIX) :]) if path.name.startswith(PREFIX) else None

    def list(self) -> list[WorkspaceState]:
        """What every `loop-*` directory under the root holds, in name order."""
        return [self.state(p) for p in self.paths()]

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


# -- in use ----------------------------------------------------------------------------


def occupants(path: Path) -> list[int]:
    """Pids (other than this process) whose working directory is `path` or inside it.

    Processes this user may not inspect are not seen; the item's agent runs as the
    daemon's user, and its tmux session is asked about separately (`in_use`).
    """
    import psutil

    root = os.path.realpath(path)
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            cwd = proc.cwd()
        except (psutil.Error, OSError):
            continue  # gone, a zombie, or another user's
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(proc.pid)
    return sorted(found)


def in_use(path: Path, tmux: Tmux, tmux_name: str) -> str:
    """Why the worktree must stay because something runs there ("" when nothing does).

    The item's tmux session LIVE means its agent works there; tmux not answering
    (UNKNOWN) is never taken for absent, so it keeps the worktree too. Then any process
    whose working directory is inside it (an agent outliving its pane, a shell).
    Ask under the item's lock: the answer holds only while no spawn can start.
    """
    from loop_tmux import Presence

    presence = tmux.probe(tmux_name)
    if presence is Presence.LIVE:
        return f"its agent is running (tmux session {tmux_name} is live)"
    if presence is Presence.UNKNOWN:
        return f"tmux did not answer about {tmux_name}; a running agent cannot be ruled out"
    if not path.exists():
        return ""
    pids = occupants(path)
    if pids:
        shown = ", ".join(str(p) for p in pids[:5]) + (", ..." if len(pids) > 5 else "")
        return f"{len(pids)} process(es) work in it (pid {shown})"
    return ""
