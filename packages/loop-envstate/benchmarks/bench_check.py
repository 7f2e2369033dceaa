"""Benchmark: check up to 200 live processes against a 100-name env file.

Spawns 200 real `sleep` children, each with a 100-name environment (every tenth one
drifted on one name), then times the audit at 20, 50, 100 and 200 pids: the core
(`parse` + `check_pids`, in process) and the whole CLI (`loop-envstate check --json`,
a fresh interpreter each time). Prints medians of several runs and the growth from 20
to 200 pids. Children are always killed.

Run: python packages/loop-envstate/benchmarks/bench_check.py   (or: nox -s bench)
"""

from __future__ import annotations

import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loop_envstate import parse
from loop_envstate.audit import DRIFT, MATCH, check_pids

NAMES = 100
PROCESSES = 200
SIZES = (20, 50, 100, 200)
CORE_RUNS = 9
CLI_RUNS = 5


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "loop-envstate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_envstate"]


def _spawn(values: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    children = []
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for index in range(PROCESSES):
        env = dict(base, **values)
        if index % 10 == 0:
            env["NAME_007"] = "drifted-" + secrets.token_hex(8)
        children.append(subprocess.Popen(["sleep", "600"], env=env, stdin=subprocess.DEVNULL))
    return children


def _wait_exec(children: list[subprocess.Popen[bytes]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    for child in children:
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                    break
            except OSError:
                pass
            time.sleep(0.005)


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> int:
    if not Path("/proc/self/environ").exists():
        print("bench_check: needs /proc to spawn-and-read; skipped")
        return 0
    values = {f"NAME_{i:03d}": secrets.token_urlsafe(24) for i in range(NAMES)}
    children: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "bench.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        try:
            started = time.perf_counter()
            children = _spawn(values)
            _wait_exec(children)
            spawn_s = time.perf_counter() - started
            pids = [child.pid for child in children]

            results = check_pids(parse(env_file).values, pids)
            statuses = [r.status for r in results]
            assert statuses.count(DRIFT) == PROCESSES // 10, statuses.count(DRIFT)
            assert statuses.count(MATCH) == PROCESSES - PROCESSES // 10

            print(
                f"bench_check: {PROCESSES} sleep children with {NAMES}-name environments "
                f"(spawned in {spawn_s:.2f} s), file of {NAMES} names"
            )
            print(f"{'pids':>5} {'core median ms':>15} {'us per pid':>11} {'CLI median ms':>14}")
            core: dict[int, float] = {}
            cli: dict[int, float] = {}
            for size in SIZES:
                subset = pids[:size]
                samples = []
                for _ in range(CORE_RUNS):
                    t0 = time.perf_counter()
                    check_pids(parse(env_file).values, subset)
                    samples.append(time.perf_counter() - t0)
                core[size] = _median_ms(samples)
                samples = []
                for _ in range(CLI_RUNS):
                    t0 = time.perf_counter()
                    done = subprocess.run(
                        [*_cli(), "check", str(env_file), *map(str, subset), "--json"],
                        capture_output=True,
                        check=False,
                    )
                    samples.append(time.perf_counter() - t0)
                    assert done.returncode == 1, done.stderr  # the drifted tenth
                cli[size] = _median_ms(samples)
                print(
                    f"{size:>5} {core[size]:>15.2f} {core[size] * 1000 / size:>11.1f} "
                    f"{cli[size]:>14.1f}"
                )
            first, last = SIZES[0], SIZES[-1]
            print(
                f"growth {first} -> {last} pids (x{last // first}): "
                f"core x{core[last] / core[first]:.2f}, CLI x{cli[last] / cli[first]:.2f}"
            )
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGKILL)
            for child in children:
                child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
