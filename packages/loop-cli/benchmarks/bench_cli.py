"""Benchmarks of the `the-loop` command: start-up time, and `status` at fleet scale.

Run by `nox -s bench` (or directly with a python that has loop-cli installed). Prints
medians, and how `status` grows from 10 to 500 registered sessions. Every tmux server
used here is private (`-L loop-bench-cli-...`) and killed at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from loop_tmux import Tmux

RUNS = 9
SIZES = (10, 100, 500)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(extra)
    return env


def the_loop() -> list[str]:
    script = Path(sys.executable).with_name("the-loop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_cli.main"]


def median_wall(argv: list[str], env: dict[str, str], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def importtime_total(module: str) -> float:
    """Cumulative microseconds of `import module` as reported by -X importtime."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    ).stderr
    for line in out.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
        if m and m.group(2) == module:
            return int(m.group(1)) / 1000
    return float("nan")


def bench_startup() -> None:
    env = _env()
    base = median_wall([sys.executable, "-c", "pass"], env)
    print(f"python -c pass (baseline)         median {base * 1000:7.1f} ms")
    for args in (["--version"], ["--help"]):
        t = median_wall([*the_loop(), *args], env)
        print(f"the-loop {' '.join(args):24} median {t * 1000:7.1f} ms")
    for module in ("loop_cli.main", "loop_cli.config", "loop_cli.status"):
        print(f"-X importtime {module:20} total  {importtime_total(module):7.1f} ms")


def _spawn_fleet(socket: str, names: list[str], batch: int = 50) -> None:
    """Start the sessions in a few tmux invocations (commands chained with `;`)."""
    for start in range(0, len(names), batch):
        argv = ["tmux", "-L", socket]
        for i, name in enumerate(names[start : start + batch]):
            if i:
                argv.append(";")
            argv += ["new-session", "-d", "-s", name, "sleep 3600"]
        done = subprocess.run(
            argv, env=_env(), capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux could not start the fleet: {done.stderr.strip()[:300]}")


def bench_status() -> None:
    from loop_dispatch import WorkItemRef
    from loop_dispatch.store import Store

    print(f"\nthe-loop status --format json ({RUNS} runs each, private tmux socket)")
    results = {}
    for n in SIZES:
        root = Path(tempfile.mkdtemp(prefix="loop-bench-cli-"))
        socket = f"loop-bench-cli-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            config = root / "config.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "stateDir": str(root / "state"),
                        "routing": {"tmuxSocket": socket},
                        "services": {"poller": False},
                    }
                )
            )
            store = Store.open(root / "state")
            refs = [WorkItemRef("local", "bench", i + 1) for i in range(n)]
            for ref in refs:
                store.registry.register(
                    ref, harness="generic", conversation_id=str(uuid.uuid4()), cwd=str(root)
                )
            store.close()
            _spawn_fleet(socket, [ref.tmux_name() for ref in refs])
            env = _env(THE_LOOP_CONFIG=str(config))
            check = subprocess.run(
                [*the_loop(), "status", "--format", "json"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            assert f'"live": {n}' in check.stdout, check.stdout[-500:]
            results[n] = median_wall([*the_loop(), "status", "--format", "json"], env)
            print(f"  {n:4} sessions: median {results[n] * 1000:7.1f} ms")
        finally:
            Tmux(socket_name=socket, config_file="/dev/null").kill_server()
            shutil.rmtree(root, ignore_errors=True)
    lo, hi = SIZES[0], SIZES[-1]
    print(
        f"  growth {lo} -> {hi} sessions: x{results[hi] / results[lo]:.2f} "
        f"for x{hi // lo} sessions (one tmux call regardless of N)"
    )


def main() -> None:
    bench_startup()
    if shutil.which("tmux"):
        bench_status()
    else:
        print("tmux not installed: status benchmark skipped")


if __name__ == "__main__":
    main()
