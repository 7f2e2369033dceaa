"""Workspace operations behind `the-loop workspace list|gc`: rows, never printing.

gc never removes a worktree that holds unsaved work (uncommitted changes, hidden edits,
commits on no remote branch) unless forced, and never one a live process uses, forced or
not: an item with an active session, a LIVE tmux session (or a tmux that does not
answer), a process whose working directory is inside it. Each worktree is decided and
removed under its item's lock, the one the dispatcher spawns under, with the record and
the worktree read again there: a spawn is either seen or starts after the removal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from loop_dispatch import WorkItemRef
    from loop_dispatch.workspace import WorkspaceState

    from .runtime import Runtime


def _workspaces(rt: Runtime) -> Any:
    if rt.workspaces is None:
        raise UsageError("workspace.mode is shared: there are no per-item worktrees")
    return rt.workspaces


def _active(rt: Runtime) -> set[str]:
    if not rt.has_state:
        return set()
    # A hibernated item is taken on too: its worktree waits for its next event.
    return {str(r.work_item) for r in rt.store.registry.list() if r.active}


def _row(state: WorkspaceState, active: set[str]) -> dict[str, Any]:
    ref = None if state.ref is None else str(state.ref)
    return {
        "path": str(state.path),
        "ref": ref,
        "branch": state.branch,
        "worktree": state.exists,
        "uncommitted": state.uncommitted,
        "unpushed": state.unpushed,
        "hidden": state.hidden,
        "sessionActive": ref in active,
        "unsaved": state.why_kept(),
    }


def list_rows(rt: Runtime) -> list[dict[str, Any]]:
    """One row per `loop-*` directory under the workspace root."""
    active = _active(rt)
    return [_row(s, active) for s in _workspaces(rt).list()]


GC_LOCK_TIMEOUT = 10.0  # an item busy longer than this (a spawn, a delivery) is kept


def gc(rt: Runtime, *, dry_run: bool, force: bool) -> list[dict[str, Any]]:
    """Remove the worktrees that lose nothing (all of them but those in use with
    `force`); each row says `action`: removed / would-remove / kept, and why."""
    from loop_dispatch.lock import LockTimeout, LockUnavailable, item_lock

    ws = _workspaces(rt)
    rows = []
    for path in ws.paths():
        ref = ws.owner(path)
        if ref is None:
            # No item owns the name: no lock to take, no session to ask; only processes.
            rows.append(_collect(rt, ws, path, None, dry_run=dry_run, force=force))
            continue
        try:
            with item_lock(rt.lock_dir, ref, timeout=GC_LOCK_TIMEOUT):
                rows.append(_collect(rt, ws, path, ref, dry_run=dry_run, force=force))
        except (LockTimeout, LockUnavailable) as exc:
            row = _row(ws.state(path), _active(rt))
            row.update(action="kept", why=f"its item is busy ({' '.join(str(exc).split())})")
            rows.append(row)
    return rows


def _collect(
    rt: Runtime, ws: Any, path: Path, ref: WorkItemRef | None, *, dry_run: bool, force: bool
) -> dict[str, Any]:
    """One worktree's decision (and removal), from the record, the worktree, tmux and the
    process table read now: under the item's lock when it has an item."""
    from loop_dispatch.workspace import WorkspaceError, in_use, occupants

    record = rt.store.registry.get(ref) if ref is not None and rt.has_state else None
    state = ws.state(path)
    row = _row(state, {str(ref)} if record is not None and record.active else set())
    if row["sessionActive"]:
        row.update(action="kept", why="its session is active")
        return row
    if not state.exists:
        row.update(action="kept", why="not a git worktree (left for you to look at)")
        return row
    if ref is not None:
        busy = in_use(path, rt.tmux, record.tmux_name if record else ref.tmux_name())
    else:
        pids = occupants(path)
        busy = f"{len(pids)} process(es) work in it (pid {pids[0]})" if pids else ""
    if busy:
        row.update(action="kept", why=busy)
    elif not state.clean and not force:
        row.update(action="kept", why=state.why_kept())
    elif dry_run:
        row.update(action="would-remove", why="")
    else:
        try:
            ws.remove(state, force=force)
        except WorkspaceError as exc:
            row.update(action="kept", why=str(exc))
        else:
            row.update(action="removed", why="")
    return row


def kept_reason(rt: Runtime, ref: Any, presence: str | None = None) -> str:
    """For `sessions list`: why a closed item's worktree is still there ("" if it is not).
    `presence` is the item's tmux session from the listing's one fleet read."""
    from loop_dispatch.workspace import occupants

    from .fleet import LIVE, UNKNOWN

    ws = rt.workspaces
    if ws is None:
        return ""
    path = ws.path_for(ref)
    if not path.exists():
        return ""
    try:
        unsaved: str = ws.state(path).why_kept()
    except Exception as exc:  # a broken worktree is named, never a traceback in a listing
        return " ".join(str(exc).split())[:200]
    if unsaved:
        return unsaved
    if presence == LIVE:
        return "its agent is running"
    if presence == UNKNOWN:
        return "tmux did not answer"
    pids = occupants(path)
    return f"{len(pids)} process(es) work in it" if pids else "kept"
