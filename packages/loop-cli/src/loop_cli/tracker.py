"""The built-in local tracker: work items and comments kept in the state store.

It exists so the-loop runs with no GitHub at all (the embedded default and the demo).
Items and their activity live in two tables of the `loop_cli.tracker` schema namespace;
every opening, comment and close is a row of an append-only activity table whose
sequence number is the poll cursor, so `LocalSource` feeds the poller exactly as the
GitHub source does. An item is watched from the moment it is opened: its opening is
its first event; a reopening is a new opening (a new delivery, as on GitHub).

Comments are numbered per item (1, 2, 3 on each item), for people and refs; the
activity sequence number stays the comment's globally unique id, so delivery ids never
repeat across items.
"""

from __future__ import annotations

import builtins
import getpass
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from loop_dispatch import Event, EventKind, PollBatch, WorkItemRef, comment_delivery_id
from loop_dispatch.control import parse_control

from .errors import OperationalError, UsageError

if TYPE_CHECKING:
    from loop_dispatch.store import Store

NAMESPACE = "loop_cli.tracker"
DEFAULT_PROJECT = "loop"
SOURCE_NAME = "local"
MIGRATIONS = [
    """
    CREATE TABLE loop_cli_items (
        project    TEXT NOT NULL,
        number     INTEGER NOT NULL,
        title      TEXT NOT NULL,
        state      TEXT NOT NULL CHECK (state IN ('open', 'closed')),
        author     TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (project, number)
    );
    CREATE TABLE loop_cli_item_activity (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        project    TEXT NOT NULL,
        number     INTEGER NOT NULL,
        kind       TEXT NOT NULL CHECK (kind IN ('opened', 'comment', 'closed')),
        author     TEXT NOT NULL,
        body       TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    """,
    # v2: comments numbered per item (issue 22); existing ones in the order they came.
    """
    ALTER TABLE loop_cli_item_activity ADD COLUMN comment_number INTEGER;
    UPDATE loop_cli_item_activity SET comment_number = (
        SELECT COUNT(*) FROM loop_cli_item_activity b
        WHERE b.project = loop_cli_item_activity.project
          AND b.number = loop_cli_item_activity.number
          AND b.kind = 'comment' AND b.seq <= loop_cli_item_activity.seq)
    WHERE kind = 'comment';
    CREATE UNIQUE INDEX loop_cli_item_comment_number
        ON loop_cli_item_activity (project, number, comment_number);
    """,
]

ItemState = Literal["open", "closed"]
_ITEMS_SQL = (
    "SELECT i.project, i.number, i.title, i.state, i.author, i.created_at, "
    "(SELECT COUNT(*) FROM loop_cli_item_activity a WHERE a.project = i.project "
    " AND a.number = i.number AND a.kind = 'comment') FROM loop_cli_items i "
)


@dataclass(frozen=True)
class Item:
    ref: WorkItemRef
    title: str
    state: ItemState
    author: str
    created_at: datetime
    comments: int


@dataclass(frozen=True)
class Activity:
    """One row of an item's history: opened, a comment, closed, reopened.

    `seq` is unique across every item (the delivery id is made of it); `number` is a
    comment's number on its own item (None for the other kinds)."""

    seq: int
    kind: str
    author: str
    body: str
    created_at: datetime
    number: int | None = None


def _now() -> str:
    from loop_dispatch.store import utcnow_iso

    return utcnow_iso()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


class LocalTracker:
    """Open, comment on, close and list local work items."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema(NAMESPACE, MIGRATIONS)

    def open(
        self,
        title: str,
        body: str = "",
        *,
        project: str = DEFAULT_PROJECT,
        author: str | None = None,
    ) -> WorkItemRef:
        if not title.strip():
            raise UsageError("an item needs a non-empty title")
        WorkItemRef("local", project, 1)  # validates the project name (RefError otherwise)
        author = author or _user()
        now = _now()
        with self.store.transaction() as conn:
            row = conn.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM loop_cli_items WHERE project = ?",
                (project,),
            ).fetchone()
            number = int(row[0])
            conn.execute(
                "INSERT INTO loop_cli_items(project, number, title, state, author, created_at,"
                " updated_at) VALUES (?, ?, ?, 'open', ?, ?, ?)",
                (project, number, title, author, now, now),
            )
            text = title if not body else f"{title}\n\n{body}"
            self._activity(conn, project, number, "opened", author, text, now)
        return WorkItemRef("local", project, number)

    def comment(self, ref: WorkItemRef, text: str, *, author: str | None = None) -> int:
        """Add a comment; returns its number on this item (1 for the first)."""
        if not text.strip():
            raise UsageError("a comment needs some text")
        item = self._require(ref)
        if item.state != "open":
            raise OperationalError(f"{ref} is closed; reopen it with: the-loop item reopen {ref}")
        now = _now()
        with self.store.transaction() as conn:
            # The item's row first: on PostgreSQL the update locks it, so two comments on
            # one item take their numbers in turn (SQLite's write lock does the same).
            conn.execute(
                "UPDATE loop_cli_items SET updated_at = ? WHERE project = ? AND number = ?",
                (now, ref.project, ref.number),
            )
            row = conn.execute(
                "SELECT COALESCE(MAX(comment_number), 0) + 1 FROM loop_cli_item_activity "
                "WHERE project = ? AND number = ?",
                (ref.project, ref.number),
            ).fetchone()
            number = int(row[0])
            self._activity(
                conn, ref.project, ref.number, "comment", author or _user(), text, now, number
            )
        return number

    def reopen(self, ref: WorkItemRef, *, author: str | None = None) -> bool:
        """Open a closed item again: a new opening, so its agent is started (resumed in
        its kept workspace where there is one). False if it was open."""
        item = self._require(ref)
        if item.state == "open":
            return False
        now = _now()
        with self.store.transaction() as conn:
            conn.execute(
                "UPDATE loop_cli_items SET state = 'open', updated_at = ? "
                "WHERE project = ? AND number = ?",
                (now, ref.project, ref.number),
            )
            self._activity(
                conn, ref.project, ref.number, "opened", author or _user(), item.title, now
            )
        return True

    def close(self, ref: WorkItemRef, *, author: str | None = None) -> bool:
        """Close the item (its session is closed by the next poll). False if already closed."""
        item = self._require(ref)
        if item.state == "closed":
            return False
        now = _now()
        with self.store.transaction() as conn:
            conn.execute(
                "UPDATE loop_cli_items SET state = 'closed', updated_at = ? "
                "WHERE project = ? AND number = ?",
                (now, ref.project, ref.number),
            )
            self._activity(conn, ref.project, ref.number, "closed", author or _user(), "", now)
        return True

    def get(self, ref: WorkItemRef) -> Item | None:
        rows = self._items("WHERE i.project = ? AND i.number = ?", (ref.project, ref.number))
        return rows[0] if rows else None

    def activity(self, ref: WorkItemRef) -> list[Activity]:
        """The item's activity (opening, comments, closing), oldest first; what
        `the-loop item show` prints and a cut prompt points at."""
        self._require(ref)
        rows = self.store.query(
            "SELECT seq, kind, author, body, created_at, comment_number "
            "FROM loop_cli_item_activity WHERE project = ? AND number = ? ORDER BY seq",
            (ref.project, ref.number),
        )
        out: builtins.list[Activity] = []
        for r in rows:
            # Every opening after the first is a reopening.
            opened = r[1] == "opened" and any(a.kind in ("opened", "reopened") for a in out)
            kind = "reopened" if opened else r[1]
            number = None if r[5] is None else int(r[5])
            out.append(Activity(int(r[0]), kind, r[2], r[3], datetime.fromisoformat(r[4]), number))
        return out

    def list(self, state: ItemState | None = None) -> list[Item]:
        if state is None:
            return self._items("", ())
        return self._items("WHERE i.state = ?", (state,))

    def _require(self, ref: WorkItemRef) -> Item:
        if ref.source != "local":
            raise UsageError(f"{ref} is not a local item (local:PROJECT#N)")
        item = self.get(ref)
        if item is None:
            raise UsageError(f"no local item {ref}; see `the-loop item list`")
        return item

    def _items(self, where: str, params: tuple[Any, ...]) -> builtins.list[Item]:
        # `where` is one of this class's own constant clauses; values go in as parameters.
        sql = _ITEMS_SQL + where + " ORDER BY i.project, i.number"
        rows = self.store.query(sql, params)
        return [
            Item(
                WorkItemRef("local", r[0], int(r[1])),
                r[2],
                r[3],
                r[4],
                datetime.fromisoformat(r[5]),
                int(r[6]),
            )
            for r in rows
        ]

    def _activity(
        self,
        conn: Any,
        project: str,
        number: int,
        kind: str,
        author: str,
        body: str,
        now: str,
        comment_number: int | None = None,
    ) -> int:
        """One activity row, and its event committed to the inbox in the same transaction:
        the command returns only once the event is durable (the drain delivers it)."""
        cur = conn.execute(
            "INSERT INTO loop_cli_item_activity(project, number, kind, author, body, created_at,"
            " comment_number) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
            (project, number, kind, author, body, now, comment_number),
        )
        seq = int(cur.fetchone()[0])  # RETURNING: the same on SQLite and PostgreSQL
        event = LocalSource.event((seq, project, number, kind, author, body, now))
        if kind == "comment" and is_own_reply(author, body):  # the-loop's: never forwarded
            baseline = [(event.delivery_id, str(event.work_item))]
            self.store.inbox.accept(SOURCE_NAME, [], baseline, conn=conn)
            return seq
        self.store.inbox.accept(SOURCE_NAME, [event], conn=conn)
        return seq


OWN_AUTHOR = "the-loop"
OWN_MARKER = "<!-- the-loop -->"


def is_own_reply(author: str, body: str) -> bool:
    """A comment the-loop itself wrote on a local item (a control word's reply, or the
    record `--comment` leaves of an operator's verb): it carries the marker."""
    return OWN_MARKER in (body or "")


_KINDS = {"opened": EventKind.OPENED, "comment": EventKind.COMMENT, "closed": EventKind.CLOSED}


class LocalSource:
    """dispatch's Source over the local tracker: activity after the cursor, oldest first."""

    name = SOURCE_NAME

    def __init__(self, store: Store, *, batch: int = 500) -> None:
        self.tracker = LocalTracker(store)
        self.batch = batch

    def poll(self, cursor: str | None) -> PollBatch:
        try:
            after = int(cursor) if cursor else 0
        except ValueError:
            return PollBatch([], cursor, errors=[f"local cursor {cursor!r} is not a number"])
        rows = self.tracker.store.query(
            "SELECT seq, project, number, kind, author, body, created_at "
            "FROM loop_cli_item_activity WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, self.batch),
        )
        # the-loop's own replies (acknowledgements) are never read back as anything
        events = [self.event(r) for r in rows if not is_own_reply(r[4], r[5])]
        return PollBatch(events, str(rows[-1][0]) if rows else cursor)

    @staticmethod
    def event(row: Any) -> Event:
        """The event of one activity row (the same whether the command or a poll made it)."""
        seq, project, number, kind, author, body, created = row
        ref = WorkItemRef("local", project, int(number))
        kinds = dict(_KINDS)
        if kind == "comment" and parse_control(body) is not None:
            kinds["comment"] = EventKind.CONTROL  # a control word: run, never pasted
        if kind == "comment":
            delivery = comment_delivery_id(SOURCE_NAME, str(seq))
        else:
            delivery = f"{kind}:{SOURCE_NAME}:{seq}"
        return Event(
            delivery_id=delivery,
            work_item=ref,
            kind=kinds[kind],
            actor=author,
            body=body,
            url=str(ref),
            created_at=datetime.fromisoformat(created),
            comment_id=str(seq) if kind == "comment" else None,
        )
