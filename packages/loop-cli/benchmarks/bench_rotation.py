"""Benchmark: `sessions restart --all` and `status` at 1, 10 and 50 sessions.

Real tmux on a private socket, real panes under the env-file launcher, the file rotated
before every restart so every session is stale. The harness is `sh -c 'exec sleep'`
so the figures are the-loop's own cost (launcher, tmux, survival window, verification)
rather than a harness's start-up. Target: restarting 50 takes under 2x restarting 1.

Run: `nox -s bench -- bench_rotation` or `python packages/loop-cli/benchmarks/bench_rotation.py`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from loop_tmux import Tmux

SIZES = (1, 10, 50)
REPEATS = 3
HARNESS = ["/bin/sh", "-c", "exec sleep 3600", "harness", "{session_id}"]


def build(root: Path, socket: str, n: int):
    from loop_cli.config import load_config
    from loop_cli.runtime import Runtime
    from loop_dispatch import WorkItemRef

    env_file = root / "app.env"
    env_file.write_text(f"API_TOKEN=start-{uuid.uuid4().hex}\n")
    (root / "work").mkdir()
    config = root / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "stateDir": str(root / "state"),
                "routing": {"tmuxSocket": socket},
                "services": {"poller": False},
                "harness": {
                    "adapter": "generic",
                    "argv": HARNESS,
                    "resumeArgv": HARNESS,
                    "cwd": str(root / "work"),
                },
                "env": {"file": str(env_file)},
            }
        )
    )
    rt = Runtime(load_config(str(config)))
    for i in range(1, n + 1):
        ref = WorkItemRef.parse(f"local:bench#{i}")
        record = rt.store.registry.register(
            ref, harness="generic", conversation_id=str(uuid.uuid4()), cwd=root / "work"
        )
        spec = rt.launcher(record, rt.adapter.fresh_argv("", record.conversation_id))
        result = rt.tmux.spawn(record.tmux_name, spec.argv, record.cwd, spec.env)
        assert result.ok, result
    return rt, env_file


def time_restart(rt, env_file: Path) -> float:
    from loop_cli.rotation.launcher import require_env_file
    from loop_cli.rotation.restart import restart_sessions, select

    env_file.write_text(f"API_TOKEN=rotated-{uuid.uuid4().hex}\n")
    started = time.perf_counter()
    rows = restart_sessions(select(True, []), require_env_file(rt.config), rt.restart_deps())
    elapsed = time.perf_counter() - started
    bad = [r for r in rows if r.outcome.value != "restarted"]
    assert not bad, bad[:3]
    return elapsed


def time_status(rt) -> float:
    from loop_cli.status import collect_status

    started = time.perf_counter()
    data = collect_status(rt)
    elapsed = time.perf_counter() - started
    assert "sessionEnvironment" in data
    return elapsed


def main() -> int:
    os.environ.pop("TMUX", None)
    os.environ.pop("TMUX_PANE", None)
    results: dict[int, tuple[float, float]] = {}
    for n in SIZES:
        socket = f"loop-bench-rot-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory(prefix="bench-rotation-") as tmp:
            try:
                rt, env_file = build(Path(tmp), socket, n)
                restart = statistics.median(time_restart(rt, env_file) for _ in range(REPEATS))
                status = statistics.median(time_status(rt) for _ in range(REPEATS * 3))
                rt.close()
            finally:
                Tmux(socket_name=socket, config_file="/dev/null").kill_server()
        results[n] = (restart, status)
        print(f"sessions={n:3d}  restart --all median {restart:7.3f}s  status {status:7.3f}s")
    base_restart, base_status = results[SIZES[0]]
    print("growth vs 1 session:")
    for n in SIZES[1:]:
        restart, status = results[n]
        print(
            f"  {n:3d} sessions: restart x{restart / base_restart:.2f}, "
            f"status x{status / base_status:.2f}"
        )
    ratio = results[SIZES[-1]][0] / base_restart
    verdict = "meets" if ratio < 2 else "MISSES"
    print(f"target restart({SIZES[-1]}) < 2x restart(1): x{ratio:.2f} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
