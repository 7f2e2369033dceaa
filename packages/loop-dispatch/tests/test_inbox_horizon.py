"""The inbox's clocks and bounds: a re-arm restarts the give-up horizon, a push ingress
takes over a poller's baseline id, settled rows are forgotten after a month, and the
operator's commands act only on rows still in the state they were read in."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from loop_dispatch.inbox import Inbox, versions_key

V = versions_key({"loop-cli": "1", "loop-dispatch": "1", "loop-tmux": "1"})


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def _fail(inbox: Inbox, seq: int, *, horizon: float):
    return inbox.fail(
        seq,
        "me",
        reason="tmux_unavailable",
        error="silent",
        definite=False,
        max_attempts=5,
        give_up_after=horizon,
        delay=lambda tries, attempts: 0.0,
        versions=V,
    )


def test_a_retried_give_up_gets_a_whole_new_horizon(store, make_event) -> None:
    clock = Clock()
    inbox = Inbox(store, clock=clock)
    e = make_event()
    inbox.accept("t", [e])
    (entry,) = inbox.claim("me", limit=1, lease_seconds=60)
    clock.advance(hours=25)
    assert _fail(inbox, entry.seq, horizon=86400).given_up  # past the horizon
    inbox.retry(seqs=[entry.seq])
    clock.advance(minutes=1)
    (again,) = inbox.claim("me", limit=1, lease_seconds=60)
    # Measured from the retry, not from the arrival a day ago: it is retried, not given up.
    retry = _fail(inbox, again.seq, horizon=86400)
    assert retry is not None
    assert not retry.given_up
    assert retry.why == "tmux_unavailable"
    clock.advance(hours=25)
    (third,) = inbox.claim("me", limit=1, lease_seconds=60)
    assert _fail(inbox, third.seq, horizon=86400).why == "horizon"


def test_a_version_rearm_also_restarts_the_horizon(store, make_event) -> None:
    clock = Clock()
    inbox = Inbox(store, clock=clock)
    inbox.accept("t", [make_event()])
    (entry,) = inbox.claim("me", limit=1, lease_seconds=60)
    clock.advance(hours=30)
    assert _fail(inbox, entry.seq, horizon=86400).given_up
    assert len(inbox.rearm(versions_key({"loop-cli": "2"}))) == 1
    (again,) = inbox.claim("me", limit=1, lease_seconds=60)
    assert not _fail(inbox, again.seq, horizon=86400).given_up


def test_a_webhook_push_takes_over_a_poller_baseline_but_not_a_delivered_id(
    store, make_event
) -> None:
    inbox = Inbox(store)
    baselined, done = make_event(), make_event()
    inbox.accept("github", [], baseline=[baselined.delivery_id])
    inbox.accept("github", [done])
    (entry,) = inbox.claim("me", limit=1, lease_seconds=60)
    assert inbox.done(entry.seq, "me", "processed", "delivered")
    # The poller re-listing it never forwards a baseline id ...
    assert inbox.accept("github", [baselined]) == []
    # ... a push from GitHub (the comment is new) does; a settled id stays settled.
    assert inbox.accept("webhook", [baselined, done], over_baseline=True) == [baselined]
    row = inbox.by_delivery(baselined.delivery_id)
    assert (row.state, row.source) == ("pending", "webhook")
    assert inbox.by_delivery(done.delivery_id).state == "done"
    assert inbox.accept("webhook", [baselined], over_baseline=True) == []  # once


def test_settled_rows_are_forgotten_after_a_month_open_ones_never(store, make_event) -> None:
    clock = Clock()
    inbox = Inbox(store, clock=clock)
    old_done, old_open, base = make_event(), make_event(), make_event()
    inbox.accept("t", [old_done, old_open], baseline=[base.delivery_id])
    (entry,) = [
        e
        for e in inbox.claim("me", limit=5, lease_seconds=60)
        if e.delivery_id == old_done.delivery_id
    ]
    inbox.done(entry.seq, "me", "processed", "delivered")
    inbox.release("me")
    clock.advance(days=29)
    assert inbox.prune() == 0
    clock.advance(days=2)
    assert inbox.prune() == 2  # the settled row and the baseline id
    assert inbox.by_delivery(old_done.delivery_id) is None
    assert inbox.by_delivery(base.delivery_id) is None
    assert inbox.by_delivery(old_open.delivery_id).state == "pending"


def test_drop_and_retry_act_only_on_rows_still_open(store, make_event) -> None:
    inbox = Inbox(store)
    e = make_event()
    inbox.accept("t", [e])
    (entry,) = inbox.claim("me", limit=1, lease_seconds=60)
    # Claimed (a drain is pasting it): the operator's commands leave it alone.
    assert inbox.drop(entry.seq, "obsolete") is None
    assert inbox.retry(seqs=[entry.seq]) == []
    assert inbox.by_delivery(e.delivery_id).state == "claimed"


def test_a_v2_state_file_gains_the_arming_time_and_token_events(tmp_path) -> None:
    """A state file written by the first inbox release (v2) opens as v3: its rows keep
    their state, and their horizon counts from their arrival until a re-arm."""
    import sqlite3

    from loop_dispatch.store import CORE_MIGRATIONS, Store, _run_script

    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    _run_script(conn, CORE_MIGRATIONS[0])
    _run_script(conn, CORE_MIGRATIONS[1])
    conn.execute("CREATE TABLE schema_versions (namespace TEXT PRIMARY KEY, version INTEGER)")
    conn.execute("INSERT INTO schema_versions VALUES ('loop_dispatch', 2)")
    conn.execute("PRAGMA user_version = 2")
    conn.execute(
        "INSERT INTO inbox(delivery_id, work_item, source, state, event, due_at, received_at, "
        "updated_at) VALUES ('d1', 'local:p#1', 't', 'pending', NULL, 'x', "
        "'2026-01-01T00:00:00+00:00', 'x')"
    )
    conn.commit()
    conn.close()
    store = Store.open(tmp_path)
    try:
        row = store.query("SELECT state, armed_at FROM inbox WHERE delivery_id = 'd1'")[0]
        assert tuple(row) == ("pending", None)
        columns = [r[1] for r in store.query("PRAGMA table_info(spawn_tokens)")]
        assert "delivery_id" in columns
    finally:
        store.close()
