"""What the poll daemon's look for missed Codex ids (late_ids.py) costs a cycle.

N Codex sessions registered without an id, each a live pane on a private tmux server
(`-L loop-bench-late-...`, killed at the end) whose process holds no rollout file: the
worst case, a fleet of Codex stuck at a dialog. Figures per N, medians of RUNS: the
first cycle (every session due; a cycle looks at LOOKS_PER_CYCLE at most), a cycle
right after it (those looked at are in back-off), and, once every pane holds its
file, a cycle finding ids and how many cycles find them all.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from loop_tmux import Tmux

SIZES = (25, 100, 200)
RUNS = 5
HOLDER = 'while [ ! -e "$0" ]; do sleep 0.2; done; exec 3<"$0"; exec sleep 600'


def _rollout(home: Path, cid: str, cwd: Path) -> Path:
    return home / "sessions" / "2026" / "12" / "04" / f"rollout-2026-12-04T00-00-00-{cid}.jsonl"


def _write(home: Path, cid: str, cwd: Path) -> None:
    path = _rollout(home, cid, cwd)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"type": "session_meta", "payload": {"id": cid, "timestamp": "", "cwd": str(cwd)}}
    path.write_text(json.dumps(meta) + "\n")


def _world(root: Path, socket: str, n: int):  # type: ignore[no-untyped-def]
    from loop_cli.config import LoadedConfig, load_file
    from loop_cli.runtime import Runtime
    from loop_dispatch import WorkItemRef

    home, work = root / "codex-home", root / "work"
    work.mkdir(parents=True)
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "stateDir": str(root / "state"),
                "routing": {"tmuxSocket": socket},
                "harness": {"adapter": "codex", "stateDir": str(home), "cwd": str(work)},
            }
        )
    )
    rt = Runtime(LoadedConfig(load_file(config), config, "--config"))
    for k in range(1, n + 1):
        ref = WorkItemRef.parse(f"local:bench#{k}")
        record = rt.store.registry.register(ref, harness="codex", conversation_id=None, cwd=work)
        argv = ["sh", "-c", HOLDER, str(_rollout(home, f"c{k}", work))]
        assert rt.tmux.spawn(record.tmux_name, argv, str(work)).ok
    return rt, home, work


def _cycle(late, rt) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    found = late.sweep(rt)
    return (time.perf_counter() - start) * 1000, found


def measure(n: int) -> dict[str, float]:
    from loop_cli.late_ids import LateConversations

    first, idle, found, rounds = [], [], [], []
    for _ in range(RUNS):
        socket = f"loop-bench-late-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as tmp:
            rt, home, work = _world(Path(tmp), socket, n)
            try:
                late = LateConversations()
                ms, got = _cycle(late, rt)
                assert got == 0
                first.append(ms)
                ms, got = _cycle(late, rt)
                idle.append(ms)
                for k in range(1, n + 1):
                    _write(home, f"c{k}", work)
                time.sleep(1.0)  # each pane's process opens its file
                fresh, total, cycles = LateConversations(), 0, 0
                while total < n:
                    ms, got = _cycle(fresh, rt)
                    assert got, f"a cycle found none of the {n - total} left"
                    if not cycles:
                        found.append(ms)
                    total, cycles = total + got, cycles + 1
                rounds.append(cycles)
            finally:
                rt.close()
                Tmux(socket_name=socket, config_file="/dev/null").kill_server()
    return {
        "first": statistics.median(first),
        "idle": statistics.median(idle),
        "found": statistics.median(found),
        "cycles": statistics.median(rounds),
    }


def main() -> int:
    from loop_cli.late_ids import LOOKS_PER_CYCLE

    print(f"late Codex ids, one daemon cycle (medians of {RUNS}; <= {LOOKS_PER_CYCLE} looks):")
    head = ("sessions", "first ms", "per look", "next ms", "finding ms", "cycles to all")
    print("  ".join(f"{h:>13}" for h in head))
    for n in SIZES:
        m = measure(n)
        looks = min(n, LOOKS_PER_CYCLE)
        row = (n, m["first"], m["first"] / looks, m["idle"], m["found"], m["cycles"])
        print("  ".join(f"{v:>13.1f}" if isinstance(v, float) else f"{v:>13}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
