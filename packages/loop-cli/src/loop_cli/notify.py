"""Pushed alerts (issue 26, point 3): chosen events to Slack and/or a signed webhook.

A notification is committed to an outbox table in the store (its own namespace, the
same migrations on SQLite and PostgreSQL) in the process that wrote the event, before
anything is sent; the poll daemon sends what is due at each cycle and retries a failed
post with exponential backoff up to `notify.maxAttempts`, each failure a `notify.failed`
event, never a crash. The backoff lives in the table (not in memory), so a restarted
daemon keeps it; a sender that died mid-post leaves its rows leased for a while, then
due again (at-least-once, like the inbox).

At most one message per (item, reason) per `notify.intervalSeconds`. A message is built
from a few named fields of the event (type, item, reason, level, time), the item's link
and the remedy: never the event's detail as a whole, never an environment value, and
any daemon credential's value that would still appear is replaced (defence in depth).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from loop_dispatch.eventlog import EventLog, Record

if TYPE_CHECKING:
    from loop_dispatch.store import Store

    from .config import Config, NotifyConfig

__all__ = [
    "NOTIFY_MIGRATIONS",
    "NOTIFY_NAMESPACE",
    "SIGNATURE_HEADER",
    "NotifyingEventLog",
    "Outbox",
    "build_message",
    "flush",
    "flush_quietly",
    "sign",
]

NOTIFY_NAMESPACE = "loop_cli_notify"
NOTIFY_MIGRATIONS = [
    """
    CREATE TABLE notify_outbox (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        target     TEXT NOT NULL,
        dedup      TEXT NOT NULL,
        message    TEXT NOT NULL,
        state      TEXT NOT NULL DEFAULT 'pending',
        attempts   INTEGER NOT NULL DEFAULT 0,
        next_at    TEXT NOT NULL,
        created_at TEXT NOT NULL,
        done_at    TEXT,
        error      TEXT
    );
    CREATE INDEX notify_outbox_due ON notify_outbox (state, next_at);
    CREATE TABLE notify_throttle (
        dedup   TEXT PRIMARY KEY,
        last_at TEXT NOT NULL
    );
    """,
]
SIGNATURE_HEADER = "X-The-Loop-Signature-256"
SOURCE = "notify"
SLACK = "slack"
WEBHOOK = "webhook"
_LEASE_FACTOR = 3  # a claimed row is due again after this many send timeouts
KEEP_SECONDS = 7 * 86400  # settled rows are kept this long (for a look), then pruned


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Pending:
    id: int
    target: str
    message: dict[str, Any]
    attempts: int
    readable: bool = True  # False: the stored message is not JSON (damaged state)


class Outbox:
    """The outbox and throttle tables of a store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.ready = store.ensure_schema(NOTIFY_NAMESPACE, NOTIFY_MIGRATIONS) >= len(
            NOTIFY_MIGRATIONS
        )

    def enqueue(
        self, dedup: str, message: Mapping[str, Any], targets: list[str], interval: float
    ) -> bool:
        """Commit one message per target unless (item, reason) was notified within
        `interval`; returns whether it was queued."""
        now = _now()
        text = json.dumps(message, sort_keys=True, ensure_ascii=False)
        with self._store.transaction() as conn:
            row = conn.execute(
                "SELECT last_at FROM notify_throttle WHERE dedup = ?", (dedup,)
            ).fetchone()
            if row is not None and now - datetime.fromisoformat(row[0]) < timedelta(
                seconds=interval
            ):
                return False
            conn.execute(
                "INSERT INTO notify_throttle (dedup, last_at) VALUES (?, ?) ON CONFLICT "
                "(dedup) DO UPDATE SET last_at = excluded.last_at",
                (dedup, now.isoformat()),
            )
            for target in targets:
                conn.execute(
                    "INSERT INTO notify_outbox (target, dedup, message, next_at, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (target, dedup, text, now.isoformat(), now.isoformat()),
                )
        return True

    def claim(self, lease_seconds: float, limit: int = 50) -> list[Pending]:
        """The due rows, leased to this sender (due again if it dies mid-post)."""
        now = _now()
        until = (now + timedelta(seconds=lease_seconds)).isoformat()
        with self._store.transaction() as conn:
            rows = conn.execute(
                "SELECT id, target, message, attempts FROM notify_outbox "
                "WHERE state = 'pending' AND next_at <= ? ORDER BY id LIMIT ?",
                (now.isoformat(), limit),
            ).fetchall()
            for row in rows:
                conn.execute(
                    "UPDATE notify_outbox SET next_at = ?, attempts = attempts + 1 WHERE id = ?",
                    (until, row[0]),
                )
        return [_pending(r) for r in rows]

    def settle(self, row: Pending, error: str | None, retry_at: datetime | None) -> None:
        """Sent (`error` None), due again at `retry_at`, or failed for good."""
        now = _now().isoformat()
        with self._store.transaction() as conn:
            if error is None:
                conn.execute(
                    "UPDATE notify_outbox SET state = 'sent', done_at = ?, error = NULL "
                    "WHERE id = ?",
                    (now, row.id),
                )
            elif retry_at is not None:
                conn.execute(
                    "UPDATE notify_outbox SET next_at = ?, error = ? WHERE id = ?",
                    (retry_at.isoformat(), error, row.id),
                )
            else:
                conn.execute(
                    "UPDATE notify_outbox SET state = 'failed', done_at = ?, error = ? "
                    "WHERE id = ?",
                    (now, error, row.id),
                )

    def prune(self, keep_seconds: float = KEEP_SECONDS) -> int:
        """Forget settled rows (sent, given up) older than `keep_seconds`."""
        cutoff = (_now() - timedelta(seconds=keep_seconds)).isoformat()
        with self._store.transaction() as conn:
            done = conn.execute(
                "DELETE FROM notify_outbox WHERE state <> 'pending' AND done_at < ?", (cutoff,)
            )
            return int(done.rowcount or 0)

    def counts(self) -> dict[str, int]:
        if not self.ready:
            return {}
        rows = self._store.query("SELECT state, COUNT(*) FROM notify_outbox GROUP BY state")
        return {str(r[0]): int(r[1]) for r in rows}


def _pending(row: Any) -> Pending:
    """A claimed row; one whose message cannot be read is handed out to be failed, so
    it never stops the rows behind it."""
    try:
        message = json.loads(row[2])
    except (TypeError, ValueError):
        message = None
    if not isinstance(message, dict):
        return Pending(int(row[0]), str(row[1]), {}, int(row[3]) + 1, readable=False)
    return Pending(int(row[0]), row[1], message, int(row[3]) + 1)


# -- what a message says ------------------------------------------------------------


def item_link(item: str | None, api_url: str) -> str | None:
    """The web page of a GitHub item (`github:owner/repo#N`); None for other refs."""
    if not item or not item.startswith("github:") or "#" not in item:
        return None
    repo, _, number = item[len("github:") :].partition("#")
    if not number.isdigit() or repo.count("/") != 1:
        return None
    api = api_url.rstrip("/")
    web = "https://github.com" if api == "https://api.github.com" else api.removesuffix("/api/v3")
    return f"{web}/{repo}/issues/{number}"


def _reason(record: Record) -> str:
    detail = record.get("detail") or {}
    kind = str(record.get("type"))
    if kind == "session.stalled" and isinstance(detail.get("reason"), str):
        return str(detail["reason"])
    if kind == "session.env_restart" and isinstance(detail.get("outcome"), str):
        return str(detail["outcome"])
    return kind.partition(".")[2]


def _remedy(record: Record) -> str:
    item = record.get("workItem") or ""
    detail = record.get("detail") or {}
    kind = record.get("type")
    if kind == "session.stalled" and isinstance(detail.get("remedy"), str):
        return str(detail["remedy"])
    return {
        "inbox.gave_up": "the-loop inbox list --state given-up",
        "session.resume_failed": f"the-loop sessions attach {item}",
        "session.env_restart": "the-loop env doctor; then the-loop sessions restart",
        "daemon.state_lost": "restart the poll daemon on the real state directory",
        "dispatch.failed": f"the-loop events --work-item {item} --type 'dispatch.*'",
        "session.stall_cleared": "nothing: it is moving again",
    }.get(str(kind), "the-loop status")


def wanted(record: Record, cfg: NotifyConfig) -> bool:
    """Is this event one to push? A `session.env_restart` only when it failed."""
    kind = record.get("type")
    if kind not in cfg.events:
        return False
    if kind == "session.env_restart":
        return record.get("level") in ("warning", "error")
    return True


def scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def secret_values(config: Config, environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the daemon's credential variables (to keep them out of messages)."""
    from .agent_env import credential_names

    env = os.environ if environ is None else environ
    return [env[n] for n in credential_names(config) if env.get(n)]


def build_message(record: Record, config: Config, secrets: list[str]) -> dict[str, Any]:
    """The message of one event: named fields only, every string scrubbed."""
    item = record.get("workItem")
    reason = _reason(record)
    summary = f"{record.get('type')}: {reason}" + (f" on {item}" if item else "")
    message = {
        "event": record.get("type"),
        "item": item,
        "reason": reason,
        "level": record.get("level"),
        "at": record.get("ts"),
        "link": item_link(item, config.github.api_url),
        "remedy": _remedy(record),
        "summary": summary,
    }
    return {k: scrub(v, secrets) if isinstance(v, str) else v for k, v in message.items()}


def targets(cfg: NotifyConfig) -> list[str]:
    out = []
    if cfg.slack_url_env:
        out.append(SLACK)
    if cfg.webhook_url:
        out.append(WEBHOOK)
    return out


class NotifyingEventLog(EventLog):
    """The event log of a process with `notify:` configured: an event chosen for
    notification is committed to the outbox as it is written. A store that cannot take
    it never fails the writer (a `notify.failed` says so)."""

    def __init__(
        self, path: Any, *, config: Config, store: Callable[[], Store], **kwargs: Any
    ) -> None:
        super().__init__(path, **kwargs)
        self._config = config
        self._store = store

    def emit(self, type: str, **kwargs: Any) -> Record:
        record = super().emit(type, **kwargs)
        cfg = self._config.notify
        if wanted(record, cfg):
            self._enqueue(record, cfg)
        return record

    def _enqueue(self, record: Record, cfg: NotifyConfig) -> None:
        message = build_message(record, self._config, secret_values(self._config))
        dedup = f"{record.get('workItem') or '-'}|{record.get('type')}|{message['reason']}"
        try:
            Outbox(self._store()).enqueue(dedup, message, targets(cfg), cfg.interval_seconds)
        except Exception as exc:
            super().emit(
                "notify.failed",
                level="error",
                source=SOURCE,
                work_item=record.get("workItem"),
                detail={"event": record.get("type"), "error": _line(exc), "stage": "queue"},
            )


# -- sending ------------------------------------------------------------------------


def sign(secret: str, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256(secret, body): what the receiver recomputes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


class SendError(Exception):
    """One post that failed; its message never carries a URL or a secret."""


def _post_webhook(row: Pending, cfg: NotifyConfig, environ: Mapping[str, str]) -> None:
    import httpx

    secret = environ.get(cfg.webhook_secret_env or "", "")
    if not secret:
        raise SendError(f"notify.webhookSecretEnv {cfg.webhook_secret_env} is not set")
    body = json.dumps(row.message, sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "the-loop-notify",
        "X-The-Loop-Event": str(row.message.get("event")),
        "X-The-Loop-Delivery": str(row.id),
        SIGNATURE_HEADER: sign(secret, body),
    }
    try:
        answer = httpx.post(
            str(cfg.webhook_url), content=body, headers=headers, timeout=cfg.timeout_seconds
        )
    except httpx.HTTPError as exc:
        raise SendError(type(exc).__name__) from None
    if not 200 <= answer.status_code < 300:
        raise SendError(f"HTTP {answer.status_code}")


def _post_slack(row: Pending, cfg: NotifyConfig, environ: Mapping[str, str]) -> None:
    from .errors import OperationalError
    from .slack import notification_blocks, post_payload

    url = environ.get(cfg.slack_url_env or "", "").strip()
    if not url:
        raise SendError(f"notify.slackUrlEnv {cfg.slack_url_env} is not set")
    try:
        post_payload(notification_blocks(row.message), url, timeout=cfg.timeout_seconds)
    except OperationalError as exc:
        raise SendError(str(exc)) from None


SENDERS: dict[str, Callable[[Pending, NotifyConfig, Mapping[str, str]], None]] = {
    WEBHOOK: _post_webhook,
    SLACK: _post_slack,
}


def backoff(cfg: NotifyConfig, attempts: int) -> float:
    return float(min(cfg.max_backoff_seconds, cfg.backoff_seconds * 2 ** max(0, attempts - 1)))


def flush(
    store: Store, config: Config, log: EventLog, environ: Mapping[str, str] | None = None
) -> dict[str, int]:
    """Send what is due once; returns counts (sent, retrying, failed)."""
    cfg = config.notify
    env = os.environ if environ is None else environ
    box = Outbox(store)
    counts = {"sent": 0, "retrying": 0, "failed": 0}
    box.prune()
    for row in box.claim(cfg.timeout_seconds * _LEASE_FACTOR):
        try:
            if not row.readable:
                raise SendError("unreadable message")
            SENDERS[row.target](row, cfg, env)
        except Exception as exc:
            error = str(exc) if isinstance(exc, SendError) else type(exc).__name__
            final = row.attempts >= cfg.max_attempts or not row.readable
            retry_at = None if final else _now() + timedelta(seconds=backoff(cfg, row.attempts))
            box.settle(row, error, retry_at)
            counts["failed" if final else "retrying"] += 1
            log.emit(
                "notify.failed",
                level="error" if final else "warning",
                source=SOURCE,
                work_item=row.message.get("item"),
                detail={
                    "target": row.target,
                    "event": row.message.get("event"),
                    "attempt": row.attempts,
                    "willRetry": not final,
                    "error": error,
                },
            )
            continue
        box.settle(row, None, None)
        counts["sent"] += 1
        log.emit(
            "notify.sent",
            source=SOURCE,
            work_item=row.message.get("item"),
            detail={
                "target": row.target,
                "event": row.message.get("event"),
                "attempt": row.attempts,
            },
        )
    return counts


def flush_quietly(
    store: Callable[[], Store], config: Config, log: EventLog
) -> dict[str, int] | None:
    """`flush` for the daemon's cycle: a failure is a `notify.failed`, never a stop."""
    if not config.notify.enabled:
        return None
    try:
        return flush(store(), config, log)
    except Exception as exc:
        with contextlib.suppress(Exception):
            log.emit(
                "notify.failed",
                level="error",
                source=SOURCE,
                detail={"error": _line(exc), "stage": "send"},
            )
        return None
