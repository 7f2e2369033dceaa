"""`pane_view`: a pane's facts in one tmux call, on a real tmux (private socket)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loop_tmux import PaneView, Tmux, TmuxUnavailable
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux

ALT = (
    "import sys,time; sys.stdout.write('\\x1b[?1049hon the alternate screen'); "
    "sys.stdout.flush(); time.sleep(60)"
)
MAIN = "import time; print('plain screen', flush=True); time.sleep(60)"


def test_alternate_screen_command_and_capture(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("plain", [sys.executable, "-c", MAIN], str(tmp_path)).ok
    assert tmux.spawn("full", [sys.executable, "-c", ALT], str(tmp_path)).ok
    wait_until(
        lambda: "alternate" in (tmux.pane_view("full", capture=True).screen or ""),
        what="the alternate screen drawn",
    )
    full = tmux.pane_view("full", capture=True)
    assert full.alternate_on
    assert not full.dead
    assert full.pid > 0
    assert full.command.startswith("python")
    wait_until(
        lambda: "plain" in (tmux.pane_view("plain", capture=True).screen or ""), what="print"
    )
    plain = tmux.pane_view("plain")
    assert not plain.alternate_on
    assert plain.screen is None  # no capture unless asked


def test_absent_dead_and_silent(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.pane_view("nothing-here") is None  # no server at all
    assert tmux.spawn("keep", ["sleep", "60"], str(tmp_path)).ok
    assert tmux.pane_view("nothing-here") is None  # a server, not this session
    assert tmux.spawn("gone", ["true"], str(tmp_path)).ok
    wait_until(lambda: tmux.pane_view("gone").dead, what="the pane dead")
    silent = Tmux(binary=sys.executable, socket_name="x", probe_timeout=1.0)  # not tmux
    with pytest.raises(TmuxUnavailable):
        silent.pane_view("keep")


def _screen_program(text: str) -> list[str]:
    return [sys.executable, "-c", f"import time; print({text!r}, flush=True); time.sleep(60)"]


def test_pane_views_match_pane_view_across_batches(tmux: Tmux, tmp_path: Path) -> None:
    """Many sessions (more than one tmux command line holds), some absent or dead: the
    same views one `pane_view` per session gives, in a handful of tmux calls."""
    names = [f"view-{i:03d}-" + "n" * 40 for i in range(90)]
    for i, name in enumerate(names[:80]):
        assert tmux.spawn(name, _screen_program(f"screen of {i}"), str(tmp_path)).ok
    assert tmux.spawn("dead-one", ["true"], str(tmp_path)).ok
    wait_until(lambda: tmux.pane_view("dead-one").dead, what="the pane dead")
    wait_until(
        lambda: all("screen of" in (v.screen or "") for v in _views(tmux, names[:80])),
        what="every screen drawn",
    )
    asked = [*names, "dead-one"]  # names[80:] were never started
    calls = _count_calls(tmux)
    views = tmux.pane_views(asked, capture=True)
    batched = calls()
    single = {name: tmux.pane_view(name, capture=True) for name in asked}
    assert views == single
    assert all(views[n] is None for n in names[80:])
    assert views["dead-one"] is not None
    assert views["dead-one"].dead
    assert [views[n].screen.splitlines()[0] for n in names[:3]] == [  # type: ignore[union-attr]
        "screen of 0",
        "screen of 1",
        "screen of 2",
    ]
    # 80 live sessions need several command lines (16 KiB each at most); each of the
    # 10 absent ones ends a batch (tmux stops at its has-session): far fewer than 91.
    assert 2 <= batched <= 16, batched
    # Without screens: the same views (absent and dead ones too) from ONE tmux call.
    calls = _count_calls(tmux)
    plain = tmux.pane_views(asked)
    assert calls() == 1
    assert plain == {name: tmux.pane_view(name) for name in asked}
    assert plain == {n: None if v is None else replace(v, screen=None) for n, v in views.items()}


def test_views_without_screens_read_the_pane_pane_view_targets(tmux: Tmux, tmp_path: Path) -> None:
    """A session with two windows, the second split: the active pane of the current
    window, as `pane_view` (display-message -t =NAME:) reads it, never another pane;
    another session's panes are not taken for it."""
    assert tmux.spawn("multi", ["sleep", "60"], str(tmp_path)).ok
    assert tmux.spawn("multi-other", ["cat"], str(tmp_path)).ok
    server = ["tmux", "-L", tmux.socket_name or "", "-f", "/dev/null"]
    subprocess.run([*server, "new-window", "-t", "=multi:", "sh"], check=True)
    subprocess.run([*server, "split-window", "-t", "=multi:", "top"], check=True)
    subprocess.run([*server, "select-pane", "-t", "=multi:", "-U"], check=True)  # the sh
    wait_until(lambda: tmux.pane_view("multi").command == "sh", what="the sh pane active")
    views = tmux.pane_views(["multi", "multi-other"])
    assert views == {"multi": tmux.pane_view("multi"), "multi-other": tmux.pane_view("multi-other")}
    assert views["multi"].command == "sh"  # type: ignore[union-attr]
    assert views["multi-other"].command == "cat"  # type: ignore[union-attr]


def test_absent_sessions_cost_at_most_one_call_each(tmux: Tmux, tmp_path: Path) -> None:
    """Every second name absent: what was read before each absent one is kept, so the
    calls are about one per absent name, never more than one `pane_view` per name."""
    names = [f"every-{i:02d}" for i in range(40)]
    for name in names[::2]:
        assert tmux.spawn(name, _screen_program(f"screen of {name}"), str(tmp_path)).ok
    wait_until(
        lambda: all("screen of" in (v.screen or "") for v in _views(tmux, names[::2])),
        what="every screen drawn",
    )
    calls = _count_calls(tmux)
    views = tmux.pane_views(names, capture=True)
    assert calls() <= 21
    assert views == {name: tmux.pane_view(name, capture=True) for name in names}
    assert [n for n, v in views.items() if v is None] == names[1::2]


def test_a_program_name_with_a_line_separator_reads_as_pane_view_reads_it(
    tmux: Tmux, tmp_path: Path
) -> None:
    """A carriage return (or another line separator) in argv[0] stays in the command."""
    program = "import os; os.execv('/bin/sleep', ['odd\\rname\\u2028x', '60'])"
    assert tmux.spawn("odd", [sys.executable, "-c", program], str(tmp_path)).ok
    assert tmux.spawn("plain", ["sleep", "60"], str(tmp_path)).ok
    wait_until(lambda: "odd" in tmux.pane_view("odd").command, what="the renamed program")
    views = tmux.pane_views(["odd", "plain"], capture=True)
    assert views == {
        "odd": tmux.pane_view("odd", capture=True),
        "plain": tmux.pane_view("plain", capture=True),
    }
    assert views["odd"].command == "odd\rname\u2028x"  # type: ignore[union-attr]


def test_one_name_is_not_taken_for_its_letters(tmux: Tmux) -> None:
    with pytest.raises(TypeError):
        tmux.pane_views("s001")


def test_pane_views_with_no_server_and_silent(tmux: Tmux) -> None:
    assert tmux.pane_views(["a", "b"], capture=True) == {"a": None, "b": None}
    assert tmux.pane_views([]) == {}
    silent = Tmux(binary=sys.executable, socket_name="x", probe_timeout=1.0)  # not tmux
    with pytest.raises(TmuxUnavailable):
        silent.pane_views(["keep"])


def test_a_screen_cannot_forge_another_sessions_view(tmux: Tmux, tmp_path: Path) -> None:
    """A harness that prints what looks like a view header only shows text on its own
    screen: the header mark is random per call."""
    forged = "loop-tmux-views-0000000000000000\t1\t1\t0\t4242\tforged"
    assert tmux.spawn("first", _screen_program(forged), str(tmp_path)).ok
    assert tmux.spawn("second", _screen_program("honest"), str(tmp_path)).ok
    wait_until(
        lambda: "forged" in (tmux.pane_view("first", capture=True).screen or ""),
        what="the forged line drawn",
    )
    views = tmux.pane_views(["first", "second"], capture=True)
    assert "4242    forged" in (views["first"].screen or "")  # type: ignore[union-attr]
    assert views["second"].pid != 4242
    assert not views["second"].alternate_on


def _views(tmux: Tmux, names: list[str]) -> list[PaneView]:
    views = [tmux.pane_view(n, capture=True) for n in names]
    return [v for v in views if v is not None]


def _count_calls(tmux: Tmux) -> Callable[[], int]:
    """How many tmux processes the client runs from now on."""
    calls = 0
    run = tmux._run

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return run(*args, **kwargs)

    tmux._run = counting  # type: ignore[method-assign]
    return lambda: calls
