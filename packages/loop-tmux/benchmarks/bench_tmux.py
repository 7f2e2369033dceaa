"""Benchmark loop_tmux on a private tmux server: probe, panes() growth, delivery.

Run: python packages/loop-tmux/benchmarks/bench_tmux.py  (or `nox -s bench`).
Prints medians. panes() is run through a counting wrapper to show it costs one tmux
process whatever the number of sessions. The private server is killed at the end.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from loop_tmux import Tmux

ROUNDS = 30
RECORDER = (
    "import os, sys, tty\n"
    "tty.setraw(0)\n"
    "os.write(1, b'\\x1b[?2004hREADY\\r\\n')\n"
    "while os.read(0, 1 << 16):\n"
    "    pass\n"
)


def median_ms(action: Callable[[], object], rounds: int = ROUNDS) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def make_sessions(socket: str, first: int, count: int) -> None:
    """Create sessions in chained tmux invocations of 100 (setup, not measured)."""
    for start in range(first, first + count, 100):
        args = ["tmux", "-L", socket, "-f", "/dev/null"]
        for i in range(start, min(start + 100, first + count)):
            if i != start:
                args.append(";")
            args += ["new-session", "-d", "-s", f"loop-bench-{i}", "sleep", "3600"]
        subprocess.run(args, check=True, capture_output=True, timeout=120)


def wait_ready(socket: str, name: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        screen = subprocess.run(
            ["tmux", "-L", socket, "capture-pane", "-p", "-t", f"={name}:"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if "READY" in screen:
            return
        time.sleep(0.05)
    raise SystemExit(f"{name} never became ready")


def main() -> int:
    if shutil.which("tmux") is None:
        print("bench_tmux: skipped, tmux is not installed")
        return 0
    os.environ.pop("TMUX", None)
    os.environ.pop("TMUX_PANE", None)
    socket = f"loop-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    tmux = Tmux(socket_name=socket, config_file="/dev/null")
    work = Path(tempfile.mkdtemp(prefix="loop-tmux-bench-"))
    counter = work / "count"
    wrapper = work / "tmux"
    wrapper.write_text(f'#!/bin/sh\necho x >> {counter}\nexec tmux "$@"\n')
    wrapper.chmod(0o755)
    counted = Tmux(binary=str(wrapper), socket_name=socket, config_file="/dev/null")
    try:
        print(f"tmux {'.'.join(map(str, tmux.version() or ()))}, {ROUNDS} rounds each, medians")
        print(f"probe, no server (ABSENT):      {median_ms(lambda: tmux.probe('loop-x')):7.2f} ms")
        made = 0
        growth = []
        for size in (10, 100, 500):
            make_sessions(socket, made, size - made)
            made = size
            if size == 10:
                live = median_ms(lambda: tmux.probe("loop-bench-0"))
                absent = median_ms(lambda: tmux.probe("loop-bench-x"))
                print(f"probe, LIVE session:           {live:7.2f} ms")
                print(f"probe, ABSENT beside a server: {absent:7.2f} ms")
            counter.write_text("")
            panes = counted.panes()
            processes = len(counter.read_text().splitlines())
            assert len(panes) == size, (len(panes), size)
            ms = median_ms(tmux.panes, rounds=15)
            growth.append(ms)
            print(f"panes() at {size:3d} sessions:      {ms:7.2f} ms  ({processes} tmux process)")
        print(
            f"panes() growth 10 -> 500 sessions: x{growth[-1] / growth[0]:.1f} "
            f"for x50 sessions (per-call process cost dominates at small N)"
        )
        assert tmux.spawn("loop-sink", [sys.executable, "-c", RECORDER], str(work)).ok
        wait_ready(socket, "loop-sink")
        for size, label in ((1024, "1 KB"), (100 * 1024, "100 KB")):
            text = ("x" * 63 + "\n") * (size // 64)
            results = []

            def send(text: str = text, results: list[bool] = results) -> None:
                results.append(tmux.deliver("loop-sink", text).ok)

            ms = median_ms(send)
            assert all(results), "a delivery failed"
            target = " (target < 20 ms)" if size == 1024 else ""
            print(f"deliver {label:>6}:                {ms:7.2f} ms{target}")
    finally:
        tmux.kill_server()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
