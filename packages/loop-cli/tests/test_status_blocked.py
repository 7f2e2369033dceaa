"""`status` names the sessions whose harness sits on a dialog, read from real panes.

Claude Code's own dialogs are modelled by programs that draw their text on a real tmux
pane (the real CLI's screens are exercised in tests-integration); every other live
session shows an ordinary screen, and one registered session is not running at all.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from loop_cli.config import load_config
from loop_cli.runtime import Runtime
from loop_cli.status import collect_status
from loop_dispatch import WorkItemRef

SCREENS = {
    1: "Do you trust the files in this folder?\n > 1. Yes, I trust this folder",
    2: "Detected a custom API key in your environment",
    3: "an ordinary screen of work",
}


def _drawing(text: str) -> list[str]:
    code = (
        f"import sys, time; sys.stdout.write({text!r} + '\\n'); sys.stdout.flush(); time.sleep(60)"
    )
    return [sys.executable, "-c", code]


def test_status_lists_each_blocked_session_once_with_its_dialog(
    write_config: Callable[..., Path],
    tmux_socket: str,
    isolated: Path,
    wait: Callable[..., object],
) -> None:
    (isolated / "work").mkdir()
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {
                "adapter": "claude-code",
                "binary": "claude",
                "cwd": str(isolated / "work"),
            },
        }
    )
    rt = Runtime(load_config(None))
    try:
        names = {}
        for n in (*SCREENS, 4):
            ref = WorkItemRef.parse(f"local:proj#{n}")
            record = rt.store.registry.register(
                ref, harness="claude-code", conversation_id=str(uuid.uuid4()), cwd=isolated / "work"
            )
            names[n] = record.tmux_name
            if n in SCREENS:  # #4 is registered but never started
                assert rt.tmux.spawn(record.tmux_name, _drawing(SCREENS[n]), str(isolated)).ok
        wait(
            lambda: all(
                SCREENS[n].splitlines()[0]
                in (rt.tmux.pane_view(names[n], capture=True).screen or "")
                for n in SCREENS
            )
        )
        blocked = collect_status(rt)["blocked"]
    finally:
        rt.close()
    assert sorted((b["tmuxName"], b["dialog"]) for b in blocked) == sorted(
        [(names[1], "trust"), (names[2], "api_key")]
    )
    assert {b["workItem"] for b in blocked} == {"local:proj#1", "local:proj#2"}
