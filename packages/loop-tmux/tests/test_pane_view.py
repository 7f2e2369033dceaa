"""`pane_view`: a pane's facts in one tmux call, on a real tmux (private socket)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from loop_tmux_testlib import wait_for

from loop_tmux import Tmux, TmuxUnavailable

pytestmark = pytest.mark.tmux

ALT = (
    "import sys,time; sys.stdout.write('\\x1b[?1049hon the alternate screen'); "
    "sys.stdout.flush(); time.sleep(60)"
)
MAIN = "import time; print('plain screen', flush=True); time.sleep(60)"


def test_alternate_screen_command_and_capture(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("plain", [sys.executable, "-c", MAIN], str(tmp_path)).ok
    assert tmux.spawn("full", [sys.executable, "-c", ALT], str(tmp_path)).ok
    wait_for(
        lambda: "alternate" in (tmux.pane_view("full", capture=True).screen or ""),
        what="the alternate screen drawn",
    )
    full = tmux.pane_view("full", capture=True)
    assert full.alternate_on
    assert not full.dead
    assert full.pid > 0
    assert full.command.startswith("python")
    wait_for(lambda: "plain" in (tmux.pane_view("plain", capture=True).screen or ""), what="print")
    plain = tmux.pane_view("plain")
    assert not plain.alternate_on
    assert plain.screen is None  # no capture unless asked


def test_absent_dead_and_silent(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.pane_view("nothing-here") is None  # no server at all
    assert tmux.spawn("keep", ["sleep", "60"], str(tmp_path)).ok
    assert tmux.pane_view("nothing-here") is None  # a server, not this session
    assert tmux.spawn("gone", ["true"], str(tmp_path)).ok
    wait_for(lambda: tmux.pane_view("gone").dead, what="the pane dead")
    silent = Tmux(binary=sys.executable, socket_name="x", probe_timeout=1.0)  # not tmux
    with pytest.raises(TmuxUnavailable):
        silent.pane_view("keep")
