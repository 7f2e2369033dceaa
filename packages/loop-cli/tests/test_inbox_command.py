"""`the-loop inbox list|retry|drop` on a big backlog and on ids no row can have
(issue 20, point 14)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from loop_dispatch import Event, EventKind, WorkItemRef
from loop_dispatch.store import Store

BACKLOG = 5000


def _events(n: int) -> list[Event]:
    now = datetime.now(timezone.utc)
    return [
        Event(
            delivery_id=f"comment:local:{i}",
            work_item=WorkItemRef.parse(f"local:loop#{1 + i % 50}"),
            kind=EventKind.COMMENT,
            actor="alice",
            body=f"comment {i}",
            url="",
            created_at=now,
        )
        for i in range(n)
    ]


@pytest.fixture
def backlog(loop_config, isolated):
    store = Store.open(isolated / "state")
    try:
        store.inbox.accept("test", _events(BACKLOG))
        store.inbox.drop(2, "settled by the test")
    finally:
        store.close()


@pytest.mark.parametrize(
    "args",
    [("retry", str(2**63)), ("retry", str(2**64 + 5)), ("drop", str(2**63), "--reason", "x")],
)
def test_an_id_above_2_63_is_a_one_line_refusal(run_cli, backlog, args):
    result = run_cli("inbox", *args)
    assert result.exit_code == 2
    assert not isinstance(result.exception, OverflowError)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "out of range" in lines[0]
    assert "Traceback" not in result.output


def test_list_is_bounded_by_default_and_takes_limit_and_state(run_cli, backlog):
    text = run_cli("inbox", "list")
    assert text.exit_code == 0
    body = [line for line in text.stdout.splitlines() if line.strip()]
    assert len(body) == 1 + 100  # the header and the default limit's rows
    assert len(text.stdout) < 16_000  # 384 KB printed before
    assert f"showing the oldest 100 of {BACKLOG - 1} rows" in text.stderr
    rows = json.loads(run_cli("inbox", "list", "--limit", "7", "--format", "json").stdout)
    assert [r["seq"] for r in rows] == [1, 3, 4, 5, 6, 7, 8]
    every = json.loads(run_cli("inbox", "list", "--limit", "0", "--format", "json").stdout)
    assert len(every) == BACKLOG - 1
    done = json.loads(run_cli("inbox", "list", "--state", "done", "--format", "json").stdout)
    assert [(r["seq"], r["state"]) for r in done] == [(2, "done")]
    assert run_cli("inbox", "list", "--state", "in-flight").stdout.startswith("inbox: nothing")
    item = run_cli("inbox", "list", "--item", "local:loop#3", "--limit", "0", "--format", "json")
    assert {r["workItem"] for r in json.loads(item.stdout)} == {"local:loop#3"}
    assert run_cli("inbox", "list", "--limit", "-1").exit_code == 2
