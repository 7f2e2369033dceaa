"""Workspace operations behind `the-loop workspace list|gc`: rows, never printing.

gc never removes a worktree that holds unsaved work (uncommitted changes, commits on no
remote branch) unless forced, and never one whose item has an active session, forced or
not: that agent is working in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from loop_dispatch.workspace import WorkspaceState

    from .runtime import Runtime


def _workspaces(rt: Runtime) -> Any:
    if rt.workspaces is None:
        raise UsageError("workspace.mode is shared: there are no per-item worktrees")
    return rt.workspaces


def _active(rt: Runtime) -> set[str]:
    if not rt.has_state:
        return set()
    return {str(r.work_item) for r in rt.store.registry.list("active")}


def _row(state: WorkspaceState, active: set[str]) -> dict[str, Any]:
    ref = None if state.ref is None else str(state.ref)
    return {
        "path": str(state.path),
        "ref": ref,
        "branch": state.branch,
        "worktree": state.exists,
        "uncommitted": state.uncommitted,
        "unpushed": state.unpushed,
        "sessionActive": ref in active,
        "unsaved": state.why_kept(),
    }


def list_rows(rt: Runtime) -> list[dict[str, Any]]:
    """One row per `loop-*` directory under the workspace root."""
    active = _active(rt)
    return [_row(s, active) for s in _workspaces(rt).list()]


def gc(rt: Runtime, *, dry_run: bool, force: bool) -> list[dict[str, Any]]:
    """Remove the worktrees that lose nothing (all of them but active ones with `force`);
    each row says `action`: removed / would-remove / kept, and why."""
    from loop_dispatch.workspace import WorkspaceError

    ws = _workspaces(rt)
    active = _active(rt)
    rows = []
    for state in ws.list():
        row = _row(state, active)
        if row["sessionActive"]:
            row.update(action="kept", why="its session is active")
        elif not state.exists:
            row.update(action="kept", why="not a git worktree (left for you to look at)")
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
        rows.append(row)
    return rows


def kept_reason(rt: Runtime, ref: Any) -> str:
    """For `sessions list`: why a closed item's worktree is still there ("" if it is not)."""
    ws = rt.workspaces
    if ws is None:
        return ""
    path = ws.path_for(ref)
    if not path.exists():
        return ""
    try:
        return ws.state(path).why_kept() or "kept"
    except Exception as exc:  # a broken worktree is named, never a traceback in a listing
        return " ".join(str(exc).split())[:200]
