"""`scrollback`: a pane's last lines, history included, on a real tmux (private socket)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loop_tmux import Tmux, TmuxUnavailable
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux

# 300 numbered lines: more than the screen holds, so most of them are in the history.
MANY = "import time; [print(f'line {i}') for i in range(300)]; time.sleep(60)"


def test_last_lines_reach_into_the_history(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("many", [sys.executable, "-c", MANY], str(tmp_path)).ok
    wait_until(
        lambda: "line 299" in (tmux.scrollback("many", 5) or ""), what="the last line printed"
    )
    tail = tmux.scrollback("many", 120)
    assert tail is not None
    assert tail.splitlines() == [f"line {i}" for i in range(180, 300)]  # beyond one screen
    assert tmux.scrollback("many", 1) == "line 299"  # blank rows under the output dropped


def test_wide_lines_come_back_joined(tmux: Tmux, tmp_path: Path) -> None:
    wide = "x" * 300  # wider than the pane: tmux wraps it on screen
    program = f"import time; print({wide!r}, flush=True); time.sleep(60)"
    assert tmux.spawn("wide", [sys.executable, "-c", program], str(tmp_path)).ok
    wait_until(lambda: wide in (tmux.scrollback("wide", 3) or ""), what="the wide line")


def test_absent_and_silent(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.scrollback("nothing-here", 10) is None  # no server at all
    assert tmux.spawn("keep", ["sleep", "60"], str(tmp_path)).ok
    assert tmux.scrollback("nothing-here", 10) is None  # a server, not this session
    with pytest.raises(ValueError):
        tmux.scrollback("keep", 0)
    silent = Tmux(binary=sys.executable, socket_name="x", probe_timeout=1.0)  # not tmux
    with pytest.raises(TmuxUnavailable):
        silent.scrollback("keep", 10)
