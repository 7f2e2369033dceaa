"""Issue 25 with the pinned real CLIs: the activity signal, and a rollout that cuts no turn.

Each test runs for both harnesses: Claude Code and Codex run in real tmux against
loop_cli.fakemodel on loopback, which holds a reply open for as long as the newest user
turn asks (`loop-hold-<N>s`) and records every reply it began and whether the client
took it whole. Two of three sessions are mid-turn when `sessions restart --all` starts:
none of their replies may be cut, and every session must be relaunched once its turn
has ended.
"""

from __future__ import annotations

import json
import time

import pytest
from integration_support import end_private_server
from test_real_harnesses import KINDS, _cli, _cycle_until, _marker, _runtime, model

from loop_cli.fakemodel import hold_marker

__all__ = ["model"]  # the loopback model API fixture, shared with test_real_harnesses

pytestmark = pytest.mark.tmux

HOLD = 12.0  # seconds a held turn streams: long enough to be caught mid-turn


def _activity(rt) -> dict[str, str | None]:
    """Each session's activity as the poll daemon's cycle sees it: first the Codex ids
    spawns missed (on a loaded host Codex can open its rollout file after the spawn's
    wait; late_ids.py), then the adapters' reading."""
    from loop_cli.activity import activities, live_views
    from loop_cli.fleet import read_fleet
    from loop_cli.late_ids import LateConversations

    LateConversations().sweep(rt)
    records = rt.store.registry.list("active")
    views = live_views(rt.tmux, records, read_fleet(rt.tmux), capture=True)
    return activities(rt.adapter_of, records, views)


def _wait(predicate, limit: float, step: float = 0.3):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


@pytest.mark.parametrize("kind", KINDS)
def test_a_rollout_cuts_no_turn_and_relaunches_each_session_after_its_turn(
    tmp_path, model, kind
) -> None:
    from loop_cli.poller import drain_once
    from loop_cli.tracker import LocalTracker

    rt, config, socket = _runtime(tmp_path, kind, model)
    try:
        tracker = LocalTracker(rt.store)
        openings = [_marker(f"open{n}") for n in range(3)]
        refs = [tracker.open(f"item {n}", text, project="demo") for n, text in enumerate(openings)]
        for text in openings:
            assert _cycle_until(rt, model, text), f"{kind} never started on {text}"
        assert _wait(lambda: set(_activity(rt).values()) == {"idle"}, 60), _activity(rt)
        ids = {str(r): rt.store.registry.get(r).conversation_id for r in refs}
        assert all(ids.values()), ids
        if kind == "codex":  # as if its spawn had missed the id: the cycle finds that one
            assert rt.store.registry.set_conversation(refs[2], None)
            assert _activity(rt)[str(refs[2])] == "idle"
            assert rt.store.registry.get(refs[2]).conversation_id == ids[str(refs[2])]

        # Two sessions get a comment whose reply the model holds open for HOLD seconds.
        held = refs[:2]
        begun = len(model.responses())
        for ref in held:
            tracker.comment(ref, f"think about it {hold_marker(HOLD)} {_marker('held')}")

        def both_held() -> dict[str, str | None] | None:
            drain_once(rt)
            now = _activity(rt)  # the signal, read from the harness's own files
            return now if [now[str(r)] for r in refs] == ["busy", "busy", "idle"] else None

        assert _wait(both_held, 60, 0.2), (_activity(rt), model.responses()[begun:])
        assert [r.whole for r in model.responses()[begun:] if r.held].count(None) >= 2

        done = _cli(
            "--config",
            str(config),
            "sessions",
            "restart",
            "--all",
            "--force",
            "--wait-idle",
            "90",
            "-o",
            "json",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        rows = {r["ref"]: r for r in json.loads(done.stdout)["rows"]}
        assert {ref: row["outcome"] for ref, row in rows.items()} == dict.fromkeys(
            map(str, refs), "restarted"
        ), rows

        # No reply was cut: the model saw every one it began go out whole.
        replies = model.responses()
        assert replies
        assert all(r.whole for r in replies), [(r.id, r.held, r.whole, r.error) for r in replies]
        # ... and each harness wrote a held reply into its conversation: taken whole.
        held_ids = [r.id for r in replies[begun:] if r.held]
        for ref in held:
            conversation = ids[str(ref)]
            path = (
                rt.adapter.conversation_file(conversation)
                if kind == "claude-code"
                else rt.adapter.rollout_file(conversation)
            )
            assert path is not None
            text = path.read_text()
            assert any(i in text for i in held_ids), f"{ref}: no held reply in {path}"
        # Each session was relaunched once its turn had ended, resuming its conversation.
        events = [
            json.loads(line)
            for line in rt.config.event_log_path().read_text().splitlines()
            if '"session.env_restart"' in line
        ]
        assert sorted(e["workItem"] for e in events) == sorted(map(str, refs))
        for ref in held:
            assert rows[str(ref)]["activity"] == "idle"  # the verdict that let it go
            assert rt.store.registry.get(ref).conversation_id == ids[str(ref)]
    finally:
        rt.close()
        end_private_server(socket)


@pytest.mark.parametrize("kind", KINDS)
def test_the_activity_signal_follows_a_held_turn(tmp_path, model, kind) -> None:
    """idle after the opening's turn, busy while the model streams a held reply, idle
    again once it was taken whole: read from the CLI's own files."""
    from loop_cli.poller import drain_once
    from loop_cli.tracker import LocalTracker

    rt, _config, socket = _runtime(tmp_path, kind, model)
    try:
        tracker = LocalTracker(rt.store)
        opening = _marker("open")
        ref = tracker.open("item", opening, project="demo")
        assert _cycle_until(rt, model, opening)
        assert _wait(lambda: _activity(rt).get(str(ref)) == "idle", 60), _activity(rt)
        begun = len(model.responses())
        tracker.comment(ref, f"slowly {hold_marker(HOLD)}")

        def busy_while_held() -> bool:
            drain_once(rt)
            held = [r for r in model.responses()[begun:] if r.held]
            return bool(held) and held[0].whole is None and _activity(rt)[str(ref)] == "busy"

        assert _wait(busy_while_held, 60, 0.2), (_activity(rt), model.responses()[begun:])
        assert _wait(lambda: _activity(rt)[str(ref)] == "idle", HOLD + 30), _activity(rt)
        held = [r for r in model.responses()[begun:] if r.held]
        assert held
        assert all(r.whole for r in held), held
    finally:
        rt.close()
        end_private_server(socket)


@pytest.mark.parametrize("kind", KINDS)
def test_the_fake_model_sees_a_cut_turn(tmp_path, model, kind) -> None:
    """The detector can fail: `--busy=restart --wait-idle 0` relaunches a session mid-turn
    (what every rollout did before issue 25), and the model records the reply cut."""
    from loop_cli.poller import drain_once
    from loop_cli.tracker import LocalTracker

    rt, config, socket = _runtime(tmp_path, kind, model)
    try:
        tracker = LocalTracker(rt.store)
        opening = _marker("open")
        ref = tracker.open("item", opening, project="demo")
        assert _cycle_until(rt, model, opening)
        assert _wait(lambda: _activity(rt).get(str(ref)) == "idle", 60)
        begun = len(model.responses())
        tracker.comment(ref, f"long one {hold_marker(HOLD)}")
        drain_once(rt)
        assert _wait(lambda: any(r.held for r in model.responses()[begun:]), 60, 0.1)
        done = _cli(
            "--config",
            str(config),
            "sessions",
            "restart",
            "--all",
            "--force",
            "--wait-idle",
            "0",
            "--busy",
            "restart",
            "-o",
            "json",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert _wait(
            lambda: all(r.whole is not None for r in model.responses()[begun:] if r.held), 30
        )
        held = [r for r in model.responses()[begun:] if r.held]
        assert [r.whole for r in held] == [False], held
    finally:
        rt.close()
        end_private_server(socket)
