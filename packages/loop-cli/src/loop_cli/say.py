"""`the-loop sessions say`: the operator's own words to agents, through the inbox.

The text is not a comment and is never posted anywhere: it is an event of kind `say`
committed to the inbox like any other, so it is delivered in order with the item's
other events, by whichever drain owns the item (the poll daemon, `poll --once`), with
readiness, receipts and `dispatch.confirmed` as for a comment. It reaches the agents
there are; it never takes an item on (the decision table's `may_start` row).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from loop_dispatch import WorkItemRef
    from loop_dispatch.registry import SessionRecord

    from .runtime import Runtime

__all__ = ["MAX_CHARS", "Said", "check_text", "say", "targets", "wait_settled"]

# GitHub's own limit on a comment body: no event of ours is longer than a comment.
MAX_CHARS = 65536
# Record states a `say` can reach: a live or dead agent of an active record, and one
# its host ended to free memory (brought back by the ordinary respawn path).
_REACHABLE = ("active", "hibernated")


@dataclass(frozen=True)
class Said:
    """One queued message: which item, its inbox row and delivery id."""

    ref: str
    delivery_id: str
    seq: int | None

    def row(self, state: str) -> dict[str, Any]:
        return {"ref": self.ref, "deliveryId": self.delivery_id, "seq": self.seq, "state": state}


def check_text(text: str, where: str) -> str:
    """The text as given, refused (exit 2) when it says nothing or is over the limit."""
    if not text.strip():
        raise UsageError(f"nothing to say: the text from {where} is empty")
    if len(text) > MAX_CHARS:
        raise UsageError(
            f"the text from {where} is longer than {MAX_CHARS} characters (a comment's "
            "limit on GitHub)"
        )
    return text


def targets(
    rt: Runtime, refs: list[WorkItemRef], all_: bool, project: str | None
) -> list[SessionRecord]:
    """The sessions to say it to: the refs given (each must have one), or every session
    (`--all`), or every session of one project (`--project`)."""
    registry = rt.store.registry
    if refs:
        found = []
        for ref in refs:
            record = registry.get(ref)
            if record is None:
                raise UsageError(
                    f"no session for {ref}; `the-loop sessions start {ref}` starts one"
                )
            # A stopped item's record is closed, and its events wait for `start`.
            held = rt.store.controls.get(ref) is not None
            if record.status not in _REACHABLE and not held:
                raise UsageError(
                    f"the session of {ref} is {record.status}: nothing would read it "
                    f"(`the-loop sessions start {ref}` brings it back)"
                )
            found.append(record)
        return found
    records = [r for r in registry.list() if r.status in _REACHABLE]  # not stopped ones
    if project is None:
        return records
    wanted = project.strip().lower()
    mine = [r for r in records if r.work_item.project.lower() == wanted]
    if not mine:
        known = sorted({r.work_item.project for r in records})
        listed = ", ".join(known) if known else "none"
        raise UsageError(f"no session of project {project!r} (projects with sessions: {listed})")
    return mine


def say(rt: Runtime, records: list[SessionRecord], text: str, actor: str) -> list[Said]:
    """Commit one `say` event per session to the inbox, in one transaction, and record
    `operator.said` for each (its length, never its text)."""
    from loop_dispatch import Event, EventKind

    now = datetime.now(timezone.utc)
    events = [
        Event(
            delivery_id=f"say:{uuid.uuid4()}",
            work_item=record.work_item,
            kind=EventKind.SAY,
            actor=actor,
            body=text,
            url="",
            created_at=now,
        )
        for record in records
    ]
    rt.store.inbox.accept("operator", events)
    said = []
    for event in events:
        entry = rt.store.inbox.by_delivery(event.delivery_id)
        seq = None if entry is None else entry.seq
        said.append(Said(str(event.work_item), event.delivery_id, seq))
        rt.event_log.emit(
            "operator.said",
            source="cli",
            work_item=event.work_item,
            delivery_id=event.delivery_id,
            detail={"actor": actor, "chars": len(text), "seq": seq},
        )
    return said


def wait_settled(rt: Runtime, said: list[Said], seconds: float) -> list[dict[str, Any]]:
    """Each message's row once its inbox row settles, or as it stands after `seconds`:
    `state` is the inbox state, `outcome` and `reason` how it settled."""
    from loop_dispatch.inbox import OPEN_STATES

    deadline = time.monotonic() + seconds
    while True:
        entries = {s.delivery_id: rt.store.inbox.by_delivery(s.delivery_id) for s in said}
        settled = all(e is None or e.state not in OPEN_STATES for e in entries.values())
        if settled or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    rows = []
    for s in said:
        entry = entries[s.delivery_id]
        if entry is None:  # pruned already: settled long ago
            rows.append(s.row("done"))
            continue
        rows.append(s.row(entry.state) | {"outcome": entry.outcome, "reason": entry.last_reason})
    return rows
