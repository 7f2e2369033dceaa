"""Benchmark of `the-loop events --limit 20` on a 1 MB and a 100 MB event log (issue 22).

Run by `nox -s bench` (or directly with a python that has loop-cli installed). The logs
are generated in a temporary directory: four poll.cycle records to one delivery, as in
the field. Prints the median wall time of the installed command on each, the in-process
`EventLog.read(limit=20)` median, and the ratios; the issue's bound is 100 MB within 2x
of 1 MB.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loop_dispatch.eventlog import EventLog

RUNS = 9
SIZES = {"1 MB": 1_000_000, "100 MB": 100_000_000}


def the_loop() -> list[str]:
    script = Path(sys.executable).with_name("the-loop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_cli.main"]


def write_log(path: Path, size: int) -> None:
    """About `size` bytes of JSON lines, the last one a delivery."""
    lines = []
    for n in range(500):
        kind = "poll.cycle" if n % 5 else "dispatch.delivered"
        record = {
            "ts": f"2026-12-01T10:{n // 60 % 60:02d}:{n % 60:02d}.000000+00:00",
            "type": kind,
            "level": "info",
            "source": "bench",
            "workItem": None if kind == "poll.cycle" else "local:loop#1",
            "deliveryId": None if kind == "poll.cycle" else f"d{n}",
            "detail": {"n": n, "pad": "x" * 180},
        }
        lines.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
    block = b"".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for _ in range(max(1, size // len(block))):
            fh.write(block)


def command_medians(configs: dict[str, Path]) -> dict[str, float]:
    """Median wall time per config, the runs interleaved (load hits every size alike)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    times: dict[str, list[float]] = {label: [] for label in configs}
    for _ in range(RUNS):
        for label, config in configs.items():
            start = time.perf_counter()
            subprocess.run(
                [*the_loop(), "--config", str(config), "events", "--limit", "20"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t) for label, t in times.items()}


def read_median(path: Path) -> float:
    log = EventLog(path)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        log.read(limit=20, exclude_types="poll.cycle")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="loop-bench-events-") as tmp:
        configs: dict[str, Path] = {}
        for label, size in SIZES.items():
            state = Path(tmp) / label.replace(" ", "")
            write_log(state / "events.jsonl", size)
            configs[label] = state / "config.yaml"
            configs[label].write_text(f"stateDir: {state}\n", encoding="utf-8")
        os.sync()  # the 100 MB just written is not flushed during the timed runs
        command = command_medians(configs)
        inproc = {label: read_median(c.parent / "events.jsonl") for label, c in configs.items()}
        for label in SIZES:
            print(
                f"events --limit 20 on {label:>6}: the-loop median {command[label] * 1000:7.1f}"
                f" ms, EventLog.read median {inproc[label] * 1000:6.2f} ms"
            )
        ratio = command["100 MB"] / command["1 MB"]
        read_ratio = inproc["100 MB"] / inproc["1 MB"]
        print(f"100 MB / 1 MB: the-loop {ratio:.2f}x (bound 2x), EventLog.read {read_ratio:.2f}x")


if __name__ == "__main__":
    main()
