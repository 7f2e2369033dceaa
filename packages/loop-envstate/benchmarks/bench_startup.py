"""Benchmark: start-up cost of the launcher and of `import loop_envstate`.

`loop-envstate exec` is the command of every pane the-loop starts, so its start-up is
paid on every spawn. Prints median wall times (fresh interpreter each run) against a
bare `python -c pass`, and the `-X importtime` cumulative figure for the package.

Run: python packages/loop-envstate/benchmarks/bench_startup.py   (or: nox -s bench)
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 15


def _wall_ms(argv: list[str]) -> float:
    samples = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def _importtime_ms(argv: list[str], module: str) -> float:
    """Median cumulative -X importtime of one module (microseconds in, ms out)."""
    samples = []
    for _ in range(RUNS):
        err = subprocess.run(
            [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True
        ).stderr
        for line in err.splitlines():
            match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s?(\S+)$", line.strip())
            if match and match.group(2) == module:
                samples.append(int(match.group(1)))
    return statistics.median(samples) / 1000


def _total_import_ms(argv: list[str]) -> float:
    """Median sum of the top-level cumulative import times of a whole command."""
    samples = []
    for _ in range(RUNS):
        err = subprocess.run(
            [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True
        ).stderr
        total = 0
        for line in err.splitlines():
            match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line)
            if match:  # exactly one space before the name: a top-level import
                total += int(match.group(1))
        samples.append(total)
    return statistics.median(samples) / 1000


def _script() -> list[str]:
    """The console script the-loop's panes run (beside this interpreter), else -m."""
    script = Path(sys.executable).parent / "loop-envstate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_envstate"]


def _burst_ms(argv: list[str], count: int) -> float:
    """Median wall time for ``count`` copies of argv started at once, until all exit.

    What a `the-loop sessions restart --all` of ``count`` sessions costs in launchers.
    """
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL) for _ in range(count)]
        if any(proc.wait() != 0 for proc in procs):
            raise SystemExit(f"a launcher failed: {argv}")
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def main() -> int:
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "a.env"
        env_file.write_text("".join(f"NAME_{i}=value-{i}\n" for i in range(100)))
        f = str(env_file)
        rows = [
            ("python -c pass", [py, "-c", "pass"]),
            ("python -c 'import loop_envstate'", [py, "-c", "import loop_envstate"]),
            ("loop-envstate --help", [py, "-m", "loop_envstate", "--help"]),
            (
                "loop-envstate fingerprint (100 names)",
                [py, "-m", "loop_envstate", "fingerprint", f],
            ),
            (
                "loop-envstate exec FILE -- true",
                [py, "-m", "loop_envstate", "exec", f, "--", "true"],
            ),
            (
                "console script: exec FILE --set -- true",
                [*_script(), "exec", f, "--set", "THE_LOOP_WORK_ITEM=local:x#1", "--", "true"],
            ),
            ("true (the exec'd program alone)", ["true"]),
        ]
        print(f"bench_startup: median wall time of {RUNS} runs")
        for label, argv in rows:
            print(f"  {label:<40} {_wall_ms(argv):7.1f} ms")
        burst = [*_script(), "exec", f, "--", "true"]
        print(f"  {'50 launchers at once, until all exit':<40} {_burst_ms(burst, 50):7.1f} ms")
        help_argv = ["-m", "loop_envstate.cli", "--help"]
        exec_argv = ["-m", "loop_envstate", "exec", f, "--", "true"]
        package = _importtime_ms(["-c", "import loop_envstate"], "loop_envstate")
        print("-X importtime (median, cumulative ms):")
        print(f"  {'import loop_envstate':<40} {package:7.1f} ms")
        for label, argv in (
            ("all imports: -m loop_envstate.cli --help", help_argv),
            ("all imports: exec FILE -- true", exec_argv),
        ):
            print(f"  {label:<40} {_total_import_ms(argv):7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
