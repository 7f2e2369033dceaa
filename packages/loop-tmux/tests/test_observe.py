"""`observe`: presence, spawn token, dead flag and screen in ONE tmux call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loop_tmux import Presence, Tmux
from loop_tmux.fake import FakeState
from loop_tmux.testing import wait_until

Fake = tuple[Tmux, FakeState]

PRINT = "import time; print('hello from the pane', flush=True); time.sleep(60)"


@pytest.mark.tmux
def test_observe_on_a_real_tmux(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.observe("loop-none").presence is Presence.ABSENT  # no server
    spawned = tmux.spawn("loop-obs", [sys.executable, "-c", PRINT], str(tmp_path), token="tok-1")
    assert spawned.ok
    wait_until(
        lambda: "hello" in (tmux.observe("loop-obs", capture=True).view.screen or ""),  # type: ignore[union-attr]
        what="the print on the screen",
    )
    seen = tmux.observe("loop-obs", capture=True)
    assert (seen.presence, seen.token) == (Presence.LIVE, "tok-1")
    assert seen.view is not None
    assert not seen.view.dead
    assert seen.view.pid > 0
    assert tmux.observe("loop-obs").view.screen is None  # type: ignore[union-attr]
    assert tmux.observe("loop-none").presence is Presence.ABSENT  # a server, not this one
    assert tmux.spawn("loop-gone", ["true"], str(tmp_path)).ok
    wait_until(lambda: tmux.observe("loop-gone").dead, what="the pane dead")
    gone = tmux.observe("loop-gone")
    assert (gone.presence, gone.token) == (Presence.DEAD, "")
    silent = Tmux(binary=sys.executable, socket_name="x", probe_timeout=1.0)  # not tmux
    assert silent.observe("loop-obs").presence is Presence.UNKNOWN


def test_observe_is_one_call_and_silence_is_unknown(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    with state.edit() as raw:
        raw["sessions"]["loop-a"].setdefault("options", {})["@loop_spawn_token"] = "t-9"
    before = len(state.log())
    seen = tmux.observe("loop-a", capture=True)
    assert len(state.log()) == before + 1  # one tmux process
    assert (seen.presence, seen.token) == (Presence.LIVE, "t-9")
    state.set_screen("loop-a", "a dialog\n")
    assert "a dialog" in (tmux.observe("loop-a", capture=True).view.screen or "")  # type: ignore[union-attr]
    state.set_dead("loop-a")
    assert tmux.observe("loop-a").presence is Presence.DEAD
    assert tmux.observe("loop-b").presence is Presence.ABSENT
    state.set_fault("hang", ["*"])
    unknown = tmux.observe("loop-a", timeout=0.5)
    assert unknown.presence is Presence.UNKNOWN  # never ABSENT
    assert unknown.token is None
    assert unknown.view is None
