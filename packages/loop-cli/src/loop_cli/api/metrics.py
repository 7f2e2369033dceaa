"""`/metrics` in Prometheus text format (prometheus_client).

Two kinds of series. Gauges read the state at scrape time (sessions by presence and
activity, inbox rows by state, the fleet's lease ages, attention). Counters and the
comment-to-paste histogram count event-log records as the daemon sees them appended
(`EventCounters`, fed by a follower thread): they start at zero when the daemon starts,
as Prometheus counters do after a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from pathlib import Path

    from .views import Views

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DELIVERY_TYPES = {
    "dispatch.delivered": "delivered",
    "dispatch.confirmed": "confirmed",
    "dispatch.unconfirmed": "unconfirmed",
    "dispatch.failed": "failed",
    "dispatch.skipped": "skipped",
    "dispatch.duplicate": "duplicate",
    "dispatch.carried": "carried",
    "inbox.gave_up": "gave_up",
}
LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600)


class EventCounters:
    """Counters fed by event-log records (`observe`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deliveries = Counter(
            "the_loop_deliveries",
            "Delivery attempts by outcome (dispatch.* and inbox.gave_up records).",
            ["outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            "the_loop_comment_to_paste_seconds",
            "From a comment's creation to its paste into the agent's session.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.poll_errors = Counter(
            "the_loop_poll_errors",
            "Poll cycles or sources that failed (poll.error).",
            registry=registry,
        )
        self.notifications = Counter(
            "the_loop_notifications",
            "Notifications by outcome (notify.* records: sent, failed, ...).",
            ["outcome"],
            registry=registry,
        )
        self.stalled = Counter(
            "the_loop_stalled",
            "session.stalled records by reason.",
            ["why"],
            registry=registry,
        )
        for outcome in DELIVERY_TYPES.values():
            self.deliveries.labels(outcome)  # every outcome shows, at 0 until it happens
        for outcome in ("sent", "failed"):
            self.notifications.labels(outcome)

    def observe(self, record: dict[str, Any]) -> None:
        kind = str(record.get("type") or "")
        detail = record.get("detail") if isinstance(record.get("detail"), dict) else {}
        assert isinstance(detail, dict)
        if kind in DELIVERY_TYPES:
            self.deliveries.labels(DELIVERY_TYPES[kind]).inc()
            latency = detail.get("latency_seconds")
            if kind == "dispatch.delivered" and isinstance(latency, (int, float)):
                self.latency.observe(max(0.0, float(latency)))
        elif kind == "poll.error":
            self.poll_errors.inc()
        elif kind.startswith("notify."):
            self.notifications.labels(kind.partition(".")[2][:40]).inc()
        elif kind == "session.stalled":
            self.stalled.labels(str(detail.get("why") or detail.get("reason") or "")[:40]).inc()


class StateCollector(Collector):
    """Gauges computed from the daemon's state at scrape time."""

    def __init__(self, views: Views) -> None:
        self.views = views

    def collect(self) -> Iterator[Metric]:
        yield from self._sessions()
        yield from self._inbox()
        yield from self._hosts()
        yield from self._status()

    def _sessions(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "the_loop_sessions",
            "Active sessions by presence (live, dead, absent, unknown) and activity.",
            labels=["state", "activity"],
        )
        counts: dict[tuple[str, str], int] = {}
        for row in self.views.sessions():
            if row.get("status") != "active":
                continue
            state = str(row["presence"])
            key = (state, str(row.get("activity", "unknown")) if state == "live" else "none")
            counts[key] = counts.get(key, 0) + 1
        for (state, activity), n in sorted(counts.items()):
            family.add_metric([state, activity], n)
        yield family

    def _inbox(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "the_loop_inbox",
            "Inbox rows by state (pending, claimed, given_up, done, ...).",
            labels=["state"],
        )
        counts = self.views.inbox_counts()
        for state in ("pending", "claimed", "given_up"):
            counts.setdefault(state, 0)
        for state, n in sorted(counts.items()):
            family.add_metric([state], n)
        yield family

    def _hosts(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "the_loop_host_lease_age_seconds",
            "Seconds since each fleet host last renewed its lease (PostgreSQL store only).",
            labels=["host"],
        )
        for row in self.views.hosts():
            family.add_metric([str(row["name"])], float(row.get("leaseAgeSeconds") or 0))
        yield family

    def _status(self) -> Iterator[Metric]:
        status = self.views.status()
        health = GaugeMetricFamily(
            "the_loop_health_ok",
            "1 when the status health check passes, else 0.",
            labels=["check"],
        )
        for check in status.get("health", []):
            health.add_metric([str(check["check"])], 1 if check.get("state") == "ok" else 0)
        yield health
        oldest = (status.get("inbox") or {}).get("oldestPendingSeconds")
        yield GaugeMetricFamily(
            "the_loop_inbox_oldest_pending_seconds",
            "Age of the oldest pending inbox event (0 when none waits).",
            value=float(oldest or 0),
        )
        attention = GaugeMetricFamily(
            "the_loop_attention", "Sessions that need an operator, by why.", labels=["why"]
        )
        by_why: dict[str, int] = {}
        for row in status.get("attention") or []:
            why = str(row.get("why", "")) if isinstance(row, dict) else ""
            by_why[why] = by_why.get(why, 0) + 1
        for why, n in sorted(by_why.items()):
            attention.add_metric([why], n)
        yield attention


class Metrics:
    """The registry /metrics renders, and the thread that feeds its counters."""

    def __init__(self, views: Views, log_path: Path, *, interval: float = 0.5) -> None:
        from .follow import LogFollower

        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series
        self.registry = CollectorRegistry(auto_describe=False)
        self.counters = EventCounters(self.registry)
        self.registry.register(StateCollector(views))
        self._follower = LogFollower(log_path)
        self._interval = interval
        self._stop = threading.Event()
        self._feeding = threading.Lock()  # the thread and a scrape may feed at once
        self._thread = threading.Thread(target=self._run, name="the-loop-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._follower.close()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.feed()

    def feed(self) -> None:
        """Count what was appended since the last call."""
        with self._feeding:
            for record in self._follower.read():
                self.counters.observe(record)

    def render(self) -> bytes:
        self.feed()
        return generate_latest(self.registry)
