"""Benchmark (issue 25): an idle-aware rollout of 1 and 20 idle sessions.

Real tmux on a private socket, real panes under the env-file launcher, the file rotated
before every rollout so every session is stale. The harness is `sh` that writes `idle`
into its `harness.idleFile` and sleeps, so each session is idle by the generic adapter's
signal and the figures are the rollout's own cost: one activity read per round, the
item locks, the look under them, respawn, survival window, verification.
Target: rolling 20 idle sessions takes under 2x rolling 1.

Run: `nox -s bench -- bench_rollout` or `python packages/loop-cli/benchmarks/bench_rollout.py`.
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

SIZES = (1, 20)
REPEATS = 3


def build(root: Path, socket: str, n: int):
    from loop_cli.config import load_config
    from loop_cli.runtime import Runtime
    from loop_dispatch import WorkItemRef

    env_file = root / "app.env"
    env_file.write_text(f"API_TOKEN=start-{uuid.uuid4().hex}\n")
    (root / "work").mkdir()
    (root / "idle").mkdir()
    idle_file = str(root / "idle" / "{session_id}.state")
    harness = ["/bin/sh", "-c", 'echo idle > "$0"; exec sleep 3600', idle_file]
    config = root / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "stateDir": str(root / "state"),
                "routing": {"tmuxSocket": socket},
                "services": {"poller": False},
                "harness": {
                    "adapter": "generic",
                    "argv": harness,
                    "resumeArgv": harness,
                    "cwd": str(root / "work"),
                    "idleFile": idle_file,
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


def time_rollout(rt, env_file: Path) -> float:
    from loop_cli.rotation.launcher import require_env_file
    from loop_cli.rotation.restart import Rollout, restart_sessions, select

    time.sleep(2.0)  # every launcher has read the file and each harness written `idle`
    env_file.write_text(f"API_TOKEN=rotated-{uuid.uuid4().hex}\n")
    started = time.perf_counter()
    rows = restart_sessions(
        select(True, []), require_env_file(rt.config), rt.restart_deps(), how=Rollout()
    )
    elapsed = time.perf_counter() - started
    bad = [r for r in rows if r.outcome.value != "restarted" or r.activity != "idle"]
    assert not bad, bad[:3]
    return elapsed


def main() -> int:
    os.environ.pop("TMUX", None)
    os.environ.pop("TMUX_PANE", None)
    results: dict[int, float] = {}
    for n in SIZES:
        socket = f"loop-bench-roll-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
            try:
                rt, env_file = build(Path(tmp), socket, n)
                results[n] = statistics.median(time_rollout(rt, env_file) for _ in range(REPEATS))
                rt.close()
            finally:
                Tmux(socket_name=socket, config_file="/dev/null").kill_server()
        print(f"idle sessions={n:3d}  rollout (sessions restart --all) median {results[n]:7.3f}s")
    ratio = results[SIZES[-1]] / results[SIZES[0]]
    verdict = "meets" if ratio < 2 else "MISSES"
    print(f"target rollout({SIZES[-1]}) < 2x rollout(1): x{ratio:.2f} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
