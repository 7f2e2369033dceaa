"""Accepting a webhook delivery: its `X-GitHub-Delivery` GUID and its event, one commit.

GitHub redelivers (by hand or on a timeout) with the same delivery GUID; keeping the
ids in the store means a receiver restarted between the two still answers "duplicate".
The GUID is recorded in the same transaction as the inbox row, so a GUID is never
recorded for an event that was not kept (a crash loses neither, or both before 202).
Comment events are also de-duplicated by their delivery id in the inbox.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from loop_dispatch import Event

__all__ = ["COMMIT_TIMEOUT_SECONDS", "GroundChanged", "InboxAccept", "LogAccept", "StoreSeen"]

NAMESPACE = "loop_cli.webhook"
MIGRATIONS = [
    """
    CREATE TABLE loop_cli_webhook_deliveries (
        guid        TEXT PRIMARY KEY,
        event       TEXT NOT NULL,
        received_at TEXT NOT NULL
    );
    CREATE INDEX loop_cli_webhook_deliveries_by_time ON loop_cli_webhook_deliveries (received_at);
    """,
]
KEEP = timedelta(days=30)
PRUNE_EVERY = timedelta(hours=1)
# The longest an accept waits for the store's write lock (another process's, or this
# process's drain's): past it nothing is committed and the receiver answers 503, well
# within GitHub's 10 s, so GitHub redelivers instead of timing out (docs/github.md).
COMMIT_TIMEOUT_SECONDS = 4.0


class GroundChanged(RuntimeError):
    """The state the receiver started on was deleted or replaced: nothing it commits
    now is seen by the daemons on the real state, so it must not answer 202."""


class StoreSeen:
    """The ids in dispatch's Store, in this package's own namespace and table."""

    def __init__(self, store: Any, *, timeout: float | None = None) -> None:
        self._store = store
        self._timeout = timeout
        store.ensure_schema(NAMESPACE, MIGRATIONS)
        self._pruned = datetime.min.replace(tzinfo=timezone.utc)
        self.prune()

    def record(self, conn: Any, guid: str, event: str) -> bool:
        """Record `guid` inside the caller's transaction; True when it is new."""
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        cur = conn.execute(
            "INSERT INTO loop_cli_webhook_deliveries(guid, event, received_at) "
            "VALUES (?, ?, ?) ON CONFLICT(guid) DO NOTHING",
            (guid, event, now),
        )
        return bool(cur.rowcount > 0)

    def prune(self, timeout: float | None = None) -> None:
        """Forget ids older than GitHub would redeliver (bounded table)."""
        now = datetime.now(timezone.utc)
        cutoff = (now - KEEP).isoformat(timespec="seconds")
        with self._store.transaction(timeout=timeout) as conn:
            conn.execute("DELETE FROM loop_cli_webhook_deliveries WHERE received_at < ?", (cutoff,))
        self._pruned = now

    def prune_due(self) -> None:
        """Prune at most hourly, so a receiver running for weeks keeps the table bounded.
        A busy store skips it (within the accept's bound): a later delivery prunes."""
        from loop_dispatch.store import StoreBusy

        if datetime.now(timezone.utc) - self._pruned >= PRUNE_EVERY:
            with contextlib.suppress(StoreBusy):
                self.prune(self._timeout)

    def transaction(self) -> Any:
        """The accept's transaction, bounded by the timeout (StoreBusy past it)."""
        return self._store.transaction(timeout=self._timeout)


class InboxAccept:
    """`accept` for the receiver with --route: the GUID and the inbox row, one commit.

    A GUID seen before, or an event whose delivery id the inbox already holds (the
    poller saw the same comment), is a duplicate. `on_accepted` runs after the commit
    (it wakes the drain of this process).
    """

    source = "webhook"

    def __init__(
        self,
        store: Any,
        on_accepted: Callable[[], None] | None = None,
        watch: Callable[[], str | None] | None = None,
        *,
        timeout: float | None = COMMIT_TIMEOUT_SECONDS,
    ) -> None:
        self._store = store
        self._seen = StoreSeen(store, timeout=timeout)
        self._on_accepted = on_accepted
        self._watch = watch

    def __call__(self, guid: str, kind: str, event: Event) -> str:
        self._seen.prune_due()
        with self._seen.transaction() as conn:
            if not self._seen.record(conn, guid, kind):
                return "duplicate"
            # A push is GitHub saying the comment is new: it overrides a poller baseline.
            accepted = self._store.inbox.accept(self.source, [event], conn=conn, over_baseline=True)
        # Checked after the commit: a state replaced before it landed means the row is in
        # a file no daemon reads, so the answer is 503 and GitHub delivers it again.
        problem = self._watch() if self._watch is not None else None
        if problem:
            raise GroundChanged(problem)
        if not accepted:
            return "duplicate"
        if self._on_accepted is not None:
            self._on_accepted()
        return "accepted"


class LogAccept:
    """`accept` without --route: the GUID is recorded and the event only logged."""

    def __init__(
        self,
        store: Any,
        log: Callable[[Event], object],
        *,
        timeout: float | None = COMMIT_TIMEOUT_SECONDS,
    ) -> None:
        self._store = store
        self._seen = StoreSeen(store, timeout=timeout)
        self._log = log

    def __call__(self, guid: str, kind: str, event: Event) -> str:
        self._seen.prune_due()
        with self._seen.transaction() as conn:
            if not self._seen.record(conn, guid, kind):
                return "duplicate"
        self._log(event)
        return "accepted"
