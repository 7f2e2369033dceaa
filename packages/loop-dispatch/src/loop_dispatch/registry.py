"""The session registry: one record per work item, naming its tmux session and conversation.

The slug and tmux name are derived once, at register, and stored; later code reads the
stored name. Every lookup re-checks the stored ref against the one asked for, and the
stored slug and tmux name against that ref, so a row can never aim one item's events at
another item's session (a future change of the slug scheme must migrate the rows).
"""

from __future__ import annotations

import builtins
import re
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from .model import RefError, WorkItemRef
from .tables import StoreError, TableStore, utcnow_iso

__all__ = ["Quarantined", "Registry", "SessionRecord", "SessionStatus", "SpawnRecord"]

# "hibernated": taken on, its harness ended while idle (issue 25); its next event
# respawns it, resuming the conversation.
SessionStatus = Literal["active", "hibernated", "closed"]
# What a conversation id may be (ours are uuid4s): never a flag, a space or a newline.
_CONVERSATION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_COLUMNS = (
    "work_item, slug, tmux_name, harness, conversation_id, cwd, status, created_at, updated_at,"
    " started_at"
)
_SELECT = "SELECT " + _COLUMNS + " FROM sessions"  # noqa: S608 (constant column list)
_PLACEHOLDERS = ", ".join("?" * 10)
# A record replaced whole (the same SQL on SQLite and PostgreSQL).
_INSERT = (
    f"INSERT INTO sessions({_COLUMNS}) VALUES ({_PLACEHOLDERS}) "  # noqa: S608
    "ON CONFLICT(work_item) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS.split(", ")[1:])
)


@dataclass(frozen=True)
class SessionRecord:
    """What the-loop knows about one work item's session."""

    work_item: WorkItemRef
    slug: str
    tmux_name: str
    harness: str
    conversation_id: str | None
    cwd: Path
    status: SessionStatus
    created_at: datetime
    updated_at: datetime
    # When the harness was last started: spawn, respawn or rotation relaunch (issue 22).
    started_at: datetime | None = None

    @property
    def active(self) -> bool:
        """The item is taken on (its harness running, or hibernated until its next event)."""
        return self.status in ("active", "hibernated")

    @property
    def hibernated(self) -> bool:
        return self.status == "hibernated"


@dataclass(frozen=True)
class Quarantined:
    """A stored row that does not load (hand-edited, damaged, or written by a bug).

    It is set aside rather than allowed to stop every other item: `key` is the row's
    raw work_item text, `reason` one line, and `sessions reset KEY` removes it.
    """

    table: str
    key: str
    reason: str

    def line(self) -> str:
        return (
            f"quarantined {self.table} row {self.key!r}: {self.reason} "
            f"(remedy: the-loop sessions reset {_shell_word(self.key)})"
        )


def _shell_word(text: str) -> str:
    """`text` as one shell word for a remedy line (printable, single-quoted)."""
    shown = "".join(ch if ch.isprintable() else "?" for ch in text)[:200]
    return "'" + shown.replace("'", "'\\''") + "'"


def slug_owner(slug: str) -> WorkItemRef | None:
    """The ref whose current slug is `slug`, or None (a legacy or foreign slug).

    The slug code is prefix-free (see `WorkItemRef.slug`), so it reads back uniquely.
    """
    source, _, rest = slug.partition("_")
    escaped, _, number = rest.rpartition("_")
    if source == "jira":
        return _jira_slug_owner(escaped, number, slug)
    if source == "gh":
        owner, _, escaped = escaped.partition("_")
        project_prefix = owner + "/"
    elif source == "local":
        project_prefix = ""
    else:
        return None
    name = escaped.replace("__", "\0").replace("_d", ".").replace("\0", "_")
    try:
        ref = WorkItemRef(
            "github" if source == "gh" else "local", project_prefix + name, int(number)
        )
    except (RefError, ValueError):
        return None
    return ref if ref.slug() == slug else None


def _unescape(escaped: str) -> str:
    return escaped.replace("__", "\0").replace("_d", ".").replace("\0", "_")


def _jira_slug_owner(escaped: str, number: str, slug: str) -> WorkItemRef | None:
    """`<site>_<KEY>`: the site's escapes are `_d`, so the first '_' before a capital
    letter ends it."""
    m = re.fullmatch(r"(.*?)_([A-Z].*)", escaped)
    if m is None:
        return None
    try:
        ref = WorkItemRef("jira", f"{_unescape(m.group(1))}/{_unescape(m.group(2))}", int(number))
    except (RefError, ValueError):
        return None
    return ref if ref.slug() == slug else None


def _reason(text: str, key: str) -> str:
    """The StoreError's reason without the row prefix it repeats, on one line."""
    prefix = f"sessions row {key!r}: "
    text = text[len(prefix) :] if text.startswith(prefix) else text
    return " ".join(text.split())[:300]


class Registry:
    """Registry operations over a Store; each change is one transaction."""

    def __init__(self, store: TableStore) -> None:
        self._store = store

    def _row_to_record(
        self, row: sqlite3.Row | tuple[Any, ...], expected: WorkItemRef | None
    ) -> SessionRecord:
        try:
            ref = WorkItemRef.parse(row[0])
        except RefError as exc:
            raise StoreError(self._store.path, f"sessions row {row[0]!r}: {exc}") from None
        if expected is not None and ref != expected:
            raise StoreError(self._store.path, f"sessions row {row[0]!r} does not match {expected}")
        if row[6] not in ("active", "hibernated", "closed"):
            raise StoreError(self._store.path, f"sessions row {row[0]!r}: bad status {row[6]!r}")
        # A row naming another item's session (hand-edited, or a bug) must never become a
        # tmux target: it would paste this item's comments into another agent. The stored
        # name is kept (a legacy slug still reads back) but must be `loop-<stored slug>`,
        # and a slug that is some OTHER item's slug is refused.
        owner = slug_owner(row[1]) if isinstance(row[1], str) else None
        if row[2] != f"loop-{row[1]}" or (owner is not None and owner != ref):
            remedy = f"DELETE FROM sessions WHERE work_item = '{ref}'"  # noqa: S608 (shown)
            raise StoreError(
                self._store.path,
                f"sessions row {row[0]!r}: tmux_name {row[2]!r} / slug {row[1]!r} do not "
                f"belong to it; refusing to use them (remedy: sqlite3 {self._store.path} "
                f'"{remedy}")',
            )
        # The conversation id reaches the harness's argv (`--resume ID`): one that could
        # read as a flag or hold a separator is refused, not passed.
        if row[4] is not None and not (
            isinstance(row[4], str) and _CONVERSATION_ID_RE.fullmatch(row[4])
        ):
            raise StoreError(
                self._store.path, f"sessions row {row[0]!r}: bad conversation_id {row[4]!r}"
            )
        return SessionRecord(
            work_item=ref,
            slug=row[1],
            tmux_name=row[2],
            harness=row[3],
            conversation_id=row[4],
            cwd=Path(row[5]),
            status=row[6],
            created_at=self._timestamp(row, 7, "created_at"),
            updated_at=self._timestamp(row, 8, "updated_at"),
            started_at=self._timestamp(row, 9, "started_at") if row[9] is not None else None,
        )

    def _timestamp(self, row: sqlite3.Row | tuple[Any, ...], index: int, column: str) -> datetime:
        try:
            return datetime.fromisoformat(row[index])
        except (TypeError, ValueError):
            raise StoreError(
                self._store.path, f"sessions row {row[0]!r}: bad {column} {row[index]!r}"
            ) from None

    def get(self, ref: WorkItemRef) -> SessionRecord | None:
        rows = self._store.query(_SELECT + " WHERE work_item = ?", (str(ref),))
        return self._row_to_record(rows[0], ref) if rows else None

    def conversations_of_others(self, ref: WorkItemRef) -> set[str]:
        """The conversation ids every other item's record holds (one column read: a
        discovery must never take one of them)."""
        rows = self._store.query(
            "SELECT conversation_id FROM sessions WHERE work_item != ? "
            "AND conversation_id IS NOT NULL",
            (str(ref),),
        )
        return {str(row[0]) for row in rows if row[0]}

    def by_tmux_name(self, tmux_name: str) -> SessionRecord | None:
        rows = self._store.query(_SELECT + " WHERE tmux_name = ?", (tmux_name,))
        return self._row_to_record(rows[0], None) if rows else None

    def list(self, status: SessionStatus | None = None) -> list[SessionRecord]:
        """The rows that load; a row that does not is left out (see `scan`)."""
        return self.scan(status)[0]

    def scan(
        self, status: SessionStatus | None = None
    ) -> tuple[builtins.list[SessionRecord], builtins.list[Quarantined]]:
        """Every row: the ones that load, and the ones quarantined with a reason each.

        One bad row never hides the others (nor stops a poller or a status)."""
        if status is None:
            rows = self._store.query(_SELECT + " ORDER BY work_item")
        else:
            rows = self._store.query(_SELECT + " WHERE status = ? ORDER BY work_item", (status,))
        good: list[SessionRecord] = []
        bad: list[Quarantined] = []
        for row in rows:
            try:
                good.append(self._row_to_record(row, None))
            except (StoreError, TypeError, ValueError) as exc:
                key = row[0] if isinstance(row[0], str) else repr(row[0])
                why = exc.reason if isinstance(exc, StoreError) else f"unreadable ({exc})"
                bad.append(Quarantined("sessions", key, _reason(why, key)))
        return good, bad

    def quarantined(self) -> builtins.list[Quarantined]:
        """The rows that do not load."""
        return self.scan()[1]

    def reset_key(self, key: str) -> bool:
        """Remove a row by its raw work_item text (the remedy for a quarantined row)."""
        with self._store.transaction() as conn:
            return conn.execute("DELETE FROM sessions WHERE work_item = ?", (key,)).rowcount > 0

    def register(
        self,
        ref: WorkItemRef,
        *,
        harness: str,
        conversation_id: str | None,
        cwd: str | Path,
    ) -> SessionRecord:
        """Record `ref` as active (a closed record is replaced; created_at restarts).

        The slug and tmux name are derived here, once, and stored.
        """
        now = utcnow_iso()
        slug = ref.slug()
        with self._store.transaction() as conn:
            clash = conn.execute(
                "SELECT work_item FROM sessions "
                "WHERE (slug = ? OR tmux_name = ?) AND work_item != ?",
                (slug, ref.tmux_name(), str(ref)),
            ).fetchone()
            if clash is not None:
                raise StoreError(
                    self._store.path, f"slug {slug!r} of {ref} is already held by {clash[0]}"
                )
            conn.execute(
                _INSERT,
                (
                    str(ref),
                    slug,
                    ref.tmux_name(),
                    harness,
                    conversation_id,
                    str(cwd),
                    "active",
                    now,
                    now,
                    now,
                ),
            )
        record = self.get(ref)
        assert record is not None
        return record

    def restore(self, record: SessionRecord) -> None:
        """Put a record back exactly as it was (undo of a register whose spawn failed)."""
        with self._store.transaction() as conn:
            conn.execute(
                _INSERT,
                (
                    str(record.work_item),
                    record.slug,
                    record.tmux_name,
                    record.harness,
                    record.conversation_id,
                    str(record.cwd),
                    record.status,
                    record.created_at.isoformat(),
                    record.updated_at.isoformat(),
                    None if record.started_at is None else record.started_at.isoformat(),
                ),
            )

    def _update(self, ref: WorkItemRef, assignments: str, params: tuple[object, ...]) -> bool:
        with self._store.transaction() as conn:
            cur = conn.execute(
                f"UPDATE sessions SET {assignments}, updated_at = ? WHERE work_item = ?",  # noqa: S608
                (*params, utcnow_iso(), str(ref)),
            )
            return cur.rowcount > 0

    def set_conversation(self, ref: WorkItemRef, conversation_id: str | None) -> bool:
        return self._update(ref, "conversation_id = ?", (conversation_id,))

    def mark_started(self, ref: WorkItemRef) -> bool:
        """The item's harness was (re)started now: a rotation relaunch in place."""
        with self._store.transaction() as conn:
            return _mark_started(conn, ref, utcnow_iso())

    def close(self, ref: WorkItemRef) -> bool:
        """Mark the record closed (kept for history; a later event re-registers)."""
        return self._update(ref, "status = 'closed'", ())

    def hibernate(self, ref: WorkItemRef) -> bool:
        """An active record's harness was ended while idle: hibernated (not closed)."""
        with self._store.transaction() as conn:
            cur = conn.execute(
                "UPDATE sessions SET status = 'hibernated', updated_at = ? "
                "WHERE work_item = ? AND status = 'active'",
                (utcnow_iso(), str(ref)),
            )
            return bool(cur.rowcount > 0)

    def wake(self, ref: WorkItemRef) -> bool:
        """A hibernated record is active again (its respawn takes a slot)."""
        with self._store.transaction() as conn:
            cur = conn.execute(
                "UPDATE sessions SET status = 'active', updated_at = ? "
                "WHERE work_item = ? AND status = 'hibernated'",
                (utcnow_iso(), str(ref)),
            )
            return bool(cur.rowcount > 0)

    def reset(self, ref: WorkItemRef) -> bool:
        """Forget the record entirely (the operator's remedy for a stuck item)."""
        with self._store.transaction() as conn:
            return (
                conn.execute("DELETE FROM sessions WHERE work_item = ?", (str(ref),)).rowcount > 0
            )

    # -- spawn tokens ----------------------------------------------------------------

    def issue_token(
        self,
        ref: WorkItemRef,
        *,
        harness: str,
        conversation_id: str | None,
        cwd: str | Path,
        delivery_id: str | None = None,
    ) -> str:
        """Record a new spawn token for `ref` BEFORE the spawn is sent.

        tmux sets it on the session in the command that creates it, so a session tmux
        creates late (the call timed out, the registry was rolled back) still carries a
        token this item recorded: it is ours, and is adopted rather than called a stranger.
        `delivery_id` names the event the harness is started with as its prompt.
        """
        token = uuid.uuid4().hex
        now = utcnow_iso()
        with self._store.transaction() as conn:
            conn.execute(
                "INSERT INTO spawn_tokens(token, work_item, conversation_id, harness, cwd, "
                "delivery_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (token, str(ref), conversation_id, harness, str(cwd), delivery_id, now),
            )
            # Every spawn (first, respawn, resume) goes through here: the start time
            # `sessions list` shows.
            _mark_started(conn, ref, now)
        return token

    def tokens_carrying(self, ref: WorkItemRef, delivery_id: str) -> set[str]:
        """The tokens of this item's spawns that were started with `delivery_id` as prompt.

        Empty for nearly every event (one indexed lookup): only an event whose earlier
        attempt spawned a harness (then crashed, or heard nothing back) has any.
        """
        rows = self._store.query(
            "SELECT token FROM spawn_tokens WHERE delivery_id = ? AND work_item = ?",
            (delivery_id, str(ref)),
        )
        return {str(r[0]) for r in rows}

    def token_spawn(self, ref: WorkItemRef, token: str) -> SpawnRecord | None:
        """What this item recorded with `token`; None when the token is not this item's."""
        rows = self._store.query(
            "SELECT conversation_id, harness, cwd FROM spawn_tokens "
            "WHERE token = ? AND work_item = ?",
            (token, str(ref)),
        )
        if not rows:
            return None
        conversation = rows[0][0]
        if conversation is not None and not _CONVERSATION_ID_RE.fullmatch(str(conversation)):
            conversation = None
        return SpawnRecord(conversation_id=conversation, harness=rows[0][1], cwd=Path(rows[0][2]))


def _mark_started(conn: Any, ref: WorkItemRef, now: str) -> bool:
    cur = conn.execute(
        "UPDATE sessions SET started_at = ?, updated_at = ? WHERE work_item = ?",
        (now, now, str(ref)),
    )
    return bool(cur.rowcount > 0)


@dataclass(frozen=True, kw_only=True)
class SpawnRecord:
    """What was recorded with a spawn token: enough to adopt the session it names."""

    conversation_id: str | None
    harness: str
    cwd: Path
