"""The stalled-agent detector (issue 26, points 1-2): its transitions as a table, then
real tmux panes drawing a permission prompt, a busy screen and a dead harness.

The prompt screens under tests/screens/ are modelled on the pinned CLIs' wording (see
their adapters); the panes that draw them are real tmux panes on a private socket.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from loop_cli.attention import BLOCKED, DEAD_OPEN, NO_PROGRESS, UNCONFIRMED, Seen, plan, sweep
from loop_cli.attention_store import Stall
from loop_cli.config import load_config
from loop_cli.main import cli
from loop_cli.runtime import Runtime
from loop_cli.slack import render_status_blocks
from loop_cli.status import collect_status, render_text
from loop_dispatch import WorkItemRef
from loop_dispatch.adapters import ClaudeCodeAdapter, CodexAdapter
from loop_tmux import PaneView

SCREENS = Path(__file__).parent / "screens"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- the table ------------------------------------------------------------------------


def test_a_new_condition_is_kept_but_not_raised_before_its_threshold() -> None:
    todo = plan([Seen("local:p#1", BLOCKED, 60.0, note="permission")], [], T0)
    assert todo.put == [Stall("local:p#1", BLOCKED, T0, "permission", None)]
    assert todo.raise_ == []
    assert todo.clear == []


def test_a_condition_held_past_its_threshold_is_raised_once_with_its_first_since() -> None:
    held = [Stall("local:p#1", BLOCKED, T0, "permission", None)]
    todo = plan([Seen("local:p#1", BLOCKED, 60.0, note="permission")], held, _at(61))
    assert todo.raise_ == [Stall("local:p#1", BLOCKED, T0, "permission", _at(61))]
    again = plan([Seen("local:p#1", BLOCKED, 60.0, note="permission")], todo.raise_, _at(120))
    assert again.raise_ == []
    assert again.put == []
    assert again.clear == []


def test_a_condition_that_stops_holding_is_cleared() -> None:
    held = [Stall("local:p#1", DEAD_OPEN, T0, "dead", _at(1)), Stall("local:p#2", NO_PROGRESS, T0)]
    todo = plan([], held, _at(5))
    assert sorted(s.work_item for s in todo.clear) == ["local:p#1", "local:p#2"]


def test_a_threshold_of_zero_raises_at_once_and_no_progress_keeps_its_own_since() -> None:
    todo = plan(
        [
            Seen("local:p#1", DEAD_OPEN, 0.0, note="dead"),
            Seen("local:p#2", NO_PROGRESS, 30.0, since=_at(-40)),
        ],
        [],
        T0,
    )
    assert [(s.work_item, s.since) for s in todo.raise_] == [
        ("local:p#1", T0),
        ("local:p#2", _at(-40)),
    ]


# -- the adapters' dialogs -------------------------------------------------------------


def _view(screen: str) -> PaneView:
    return PaneView(alternate_on=True, command="x", dead=False, pid=1, screen=screen)


def test_claude_code_permission_prompt_is_a_dialog() -> None:
    screen = (SCREENS / "claude-permission.txt").read_text(encoding="utf-8")
    assert ClaudeCodeAdapter().readiness(_view(screen)).dialog == "permission"
    assert ClaudeCodeAdapter().readiness(_view("\u276f ")).dialog is None


def test_codex_approval_prompt_is_a_dialog() -> None:
    screen = (SCREENS / "codex-approval.txt").read_text(encoding="utf-8")
    assert CodexAdapter().readiness(_view(screen)).dialog == "approval"


# -- real panes -------------------------------------------------------------------------


def _drawing(text: str, *, then_exit: bool = False) -> list[str]:
    end = "" if then_exit else "time.sleep(600)"
    code = f"import sys, time; sys.stdout.write({text!r} + '\\n'); sys.stdout.flush(); {end}"
    return [sys.executable, "-c", code]


@pytest.fixture
def detector(
    write_config: Callable[..., Path], tmux_socket: str, isolated: Path
) -> Callable[[], Runtime]:
    (isolated / "work").mkdir()
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {
                "adapter": "claude-code",
                "binary": "claude",
                "cwd": str(isolated / "work"),
                "stateDir": str(isolated / "claude"),
            },
            "attention": {
                "deadSeconds": 0,
                "blockedSeconds": 30,
                "quietSeconds": 60,
                "unconfirmedCount": 2,
            },
        }
    )
    return lambda: Runtime(load_config(None))


def _start(rt: Runtime, n: int, argv: list[str], isolated: Path) -> tuple[str, str]:
    ref = WorkItemRef.parse(f"local:proj#{n}")
    cid = str(uuid.uuid4())
    record = rt.store.registry.register(
        ref, harness="claude-code", conversation_id=cid, cwd=isolated / "work"
    )
    rt.store.registry.mark_started(ref)
    assert rt.tmux.spawn(record.tmux_name, argv, str(isolated)).ok
    return record.tmux_name, cid


def _types(rt: Runtime, kind: str) -> list[tuple[str, str]]:
    return [(r["workItem"], r["detail"]["reason"]) for r in rt.event_log.read(kind)]


def test_detector_on_real_panes_raises_once_survives_a_restart_and_clears(
    detector: Callable[[], Runtime], isolated: Path, wait: Callable[..., object]
) -> None:
    permission = (SCREENS / "claude-permission.txt").read_text(encoding="utf-8")
    rt = detector()
    try:
        names = {
            1: _start(rt, 1, _drawing(permission), isolated)[0],
            2: _start(rt, 2, _drawing("working \u00b7 esc to interrupt"), isolated)[0],
            3: _start(rt, 3, _drawing("bye", then_exit=True), isolated)[0],
            4: _start(rt, 4, _drawing("\u276f "), isolated)[0],
        }
        conversation = isolated / "claude" / "projects" / "-w"
        conversation.mkdir(parents=True)
        wait(lambda: rt.tmux.pane_view(names[3]).dead)
        wait(lambda: "proceed" in (rt.tmux.pane_view(names[1], capture=True).screen or ""))
        wait(lambda: "interrupt" in (rt.tmux.pane_view(names[2], capture=True).screen or ""))
        for _ in range(2):  # #4's deliveries: twice in a row without a receipt
            rt.event_log.emit("dispatch.unconfirmed", source="test", work_item="local:proj#4")
        now = datetime.now(timezone.utc)
        first = sweep(rt, now)
        # dead and unconfirmed at once; the prompt and the quiet turn wait for their time
        assert sorted((s.work_item, s.reason) for s in first.raised) == [
            ("local:proj#3", DEAD_OPEN),
            ("local:proj#4", UNCONFIRMED),
        ]
        later = sweep(rt, now + timedelta(seconds=61))
        assert sorted((s.work_item, s.reason) for s in later.raised) == [
            ("local:proj#1", BLOCKED),
            ("local:proj#2", NO_PROGRESS),
        ]
        status = collect_status(rt)
    finally:
        rt.close()
    text = render_text(status)
    assert "attention: local:proj#1: blocked-dialog (permission) since" in text
    assert "    remedy: the-loop sessions start local:proj#3" in text
    assert "Needs attention" in json.dumps(render_status_blocks(status))
    block = {(a["item"], a["reason"]): a for a in status["attention"]}
    assert set(block) == {
        ("local:proj#1", BLOCKED),
        ("local:proj#2", NO_PROGRESS),
        ("local:proj#3", DEAD_OPEN),
        ("local:proj#4", UNCONFIRMED),
    }
    assert block[("local:proj#1", BLOCKED)]["why"] == "blocked-dialog (permission)"
    assert block[("local:proj#1", BLOCKED)]["since"] == now.isoformat(timespec="seconds")
    assert block[("local:proj#3", DEAD_OPEN)]["remedy"] == "the-loop sessions start local:proj#3"

    # A restarted daemon (a new runtime on the same store) raises nothing again.
    rt = detector()
    try:
        again = sweep(rt, now + timedelta(seconds=90))
        assert again.raised == []
        assert again.cleared == []
        assert len(_types(rt, "session.stalled")) == 4
        # #4 gets a receipt; #1's prompt is answered (the pane now shows the input box)
        rt.event_log.emit("dispatch.confirmed", source="test", work_item="local:proj#4")
        rt.tmux.respawn(names[1], _drawing("\u276f "), str(isolated))
        wait(lambda: "proceed" not in (rt.tmux.pane_view(names[1], capture=True).screen or ""))
        cleared = sweep(rt, now + timedelta(seconds=95))
        assert sorted((s.work_item, s.reason) for s in cleared.cleared) == [
            ("local:proj#1", BLOCKED),
            ("local:proj#4", UNCONFIRMED),
        ]
        assert sorted(_types(rt, "session.stall_cleared")) == [
            ("local:proj#1", BLOCKED),
            ("local:proj#4", UNCONFIRMED),
        ]
    finally:
        rt.close()

    out = CliRunner().invoke(cli, ["sessions", "list", "--attention", "-o", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert sorted(r["ref"] for r in rows) == ["local:proj#2", "local:proj#3"]
    assert {a["reason"] for r in rows for a in r["attention"]} == {NO_PROGRESS, DEAD_OPEN}


def test_a_hibernated_session_is_not_a_dead_agent(
    detector: Callable[[], Runtime], isolated: Path, wait: Callable[..., object]
) -> None:
    """Its harness was ended on purpose (hibernation): no dead-with-open-item for it,
    while an agent that died on its own beside it is raised."""
    rt = detector()
    try:
        slept = _start(rt, 5, _drawing("bye", then_exit=True), isolated)[0]
        died = _start(rt, 6, _drawing("bye", then_exit=True), isolated)[0]
        wait(lambda: rt.tmux.pane_view(slept).dead and rt.tmux.pane_view(died).dead)
        assert rt.store.registry.hibernate(WorkItemRef.parse("local:proj#5"))
        raised = sweep(rt, datetime.now(timezone.utc)).raised
    finally:
        rt.close()
    assert [(s.work_item, s.reason) for s in raised] == [("local:proj#6", DEAD_OPEN)]
