"""Benchmark: real Claude Code (or Codex) sessions under the-loop, offline.

The pinned CLI of tests-integration/harnesses/ (`npm ci` there) runs in real tmux on a
private socket against loop_cli.fakemodel on loopback. It prints:

- spawn to ready: from the poll cycle that spawns a session to the adapter's first
  "ready" reading of its pane (median, max), for the whole fleet spawned at once;
- resident memory per idle session (the pane's process tree, median);
- `sessions restart --all --force` wall time for the fleet;
- delivery latency under that load: one comment per item right after the restart,
  from committing it to the model API receiving it (its arrival time; median, p95, max).

Run: `python packages/loop-cli/benchmarks/bench_real_harness.py [claude-code|codex] [N]`
(default claude-code 20). Skips, saying why, when the CLI is not installed.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[3]
BIN = ROOT / "tests-integration" / "harnesses" / "node_modules" / ".bin"


def _tree_rss(pid: int) -> int:
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(kind: str, n: int) -> int:
    from loop_cli.config import LoadedConfig, load_file
    from loop_cli.demo import write_real_config
    from loop_cli.fakemodel import FakeModelServer, user_texts
    from loop_cli.poller import drain_once, run_cycle
    from loop_cli.runtime import Runtime
    from loop_cli.tracker import LocalTracker

    binary = BIN / ("claude" if kind == "claude-code" else "codex")
    if not binary.exists():
        print(f"skipped: {binary} missing (npm ci in tests-integration/harnesses)")
        return 0
    model = FakeModelServer().start()
    work = Path(tempfile.mkdtemp(prefix="bench-real-"))
    socket = f"bench-real-{uuid.uuid4().hex[:8]}"
    config = write_real_config(work, socket, kind, str(binary), model.url)
    rt = Runtime(LoadedConfig(load_file(config), config, "--config"))
    try:
        tracker = LocalTracker(rt.store)
        refs = [tracker.open(f"item {i}", f"bench item {i}", project="bench") for i in range(n)]
        begun = time.monotonic()
        run_cycle(rt)
        drain_once(rt)
        ready: dict[str, float] = {}
        deadline = time.monotonic() + 60 + 10 * n
        while len(ready) < n and time.monotonic() < deadline:
            for ref in refs:
                name = ref.tmux_name()
                if name in ready:
                    continue
                view = rt.tmux.pane_view(name, capture=True)
                if view is not None and rt.adapter.readiness(view).ready:
                    ready[name] = time.monotonic() - begun
            time.sleep(0.1)
        waits = list(ready.values())
        print(f"{kind} x{n}: ready {len(waits)}/{n}")
        if waits:
            print(f"  spawn to ready: median {statistics.median(waits):.2f}s max {max(waits):.2f}s")
        time.sleep(3)
        rss = [_tree_rss(p) / 2**20 for ref in refs for p in rt.tmux.pane_pids(ref.tmux_name())]
        if rss:
            print(f"  resident memory per session: median {statistics.median(rss):.0f} MB")
        t0 = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "loop_cli.main",
                "--config",
                str(config),
                "sessions",
                "restart",
                "--all",
                "--force",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        print(
            f"  sessions restart --all --force: {time.monotonic() - t0:.1f}s "
            f"(exit {done.returncode})"
        )
        markers = {str(ref): f"latency-{uuid.uuid4().hex[:8]}" for ref in refs}
        for ref in refs:
            tracker.comment(ref, markers[str(ref)])
        sent = time.monotonic()
        seen: dict[str, float] = {}
        deadline = sent + 60 + 5 * n
        while len(seen) < n and time.monotonic() < deadline:
            run_cycle(rt)
            drain_once(rt)
            for request in model.requests():
                text = "\n".join(user_texts(request.body))
                for ref, marker in markers.items():
                    if ref not in seen and marker in text:
                        seen[ref] = request.received - sent
            time.sleep(0.2)
        lat = list(seen.values())
        print(f"  delivered under load: {len(lat)}/{n}")
        if lat:
            print(
                f"  comment to model: median {statistics.median(lat):.2f}s "
                f"p95 {_pct(lat, 0.95):.2f}s max {max(lat):.2f}s"
            )
    finally:
        rt.close()
        if not os.environ.get("BENCH_KEEP"):  # keep the private server to look at
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
        else:
            print(f"  kept: tmux -L {socket}; {work}")
        model.stop()
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    kind = args[0] if args and not args[0].isdigit() else "claude-code"
    n = int(next((a for a in args if a.isdigit()), "20"))
    sys.exit(main(kind, n))
