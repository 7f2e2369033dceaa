"""Benchmark: `host.maxLive` and hibernation with the real Claude Code, offline (issue 25).

The pinned CLI of tests-integration/harnesses/ (`npm ci` there) runs in real tmux on a
private socket against loop_cli.fakemodel on loopback. N items (default 40) are opened
on a host with `host.maxLive: 8`; the poll cycle (poll, drain, hibernation sweep) runs
until every opening reached the model. It prints:

- the peak number of live harnesses and the peak RSS of all of them together (every
  pane's process tree, sampled each cycle), against 8 sessions' worth (8 x the median
  RSS of an idle session as it was hibernated) plus 20%;
- the latency from committing a comment to the model API receiving it, for a live
  idle session and for a hibernated one (whose wake, on a full host, first hibernates
  the oldest idle session), medians of a few samples each.

Idleness is read structurally from Claude Code's conversation file (its last message
is the assistant's): the adapter's own reading (issue 25 point 1) where it exists.

Run: `python packages/loop-cli/benchmarks/bench_capacity.py [N] [MAX_LIVE]`
(defaults 40 8). Skips, saying why, when the CLI is not installed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
BIN = ROOT / "tests-integration" / "harnesses" / "node_modules" / ".bin"
SAMPLES = 3


def _structural_activity(self: Any, view: Any, conversation_id: str | None = None) -> str:
    path = self.conversation_file(conversation_id) if conversation_id else None
    if path is None or not path.exists():
        return "unknown"
    messages = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("type") in ("user", "assistant"):
                messages.append(record)
    if not messages or messages[-1]["type"] != "assistant":
        return "busy"
    stop = (messages[-1].get("message") or {}).get("stop_reason")
    return "idle" if stop in ("end_turn", None) else "busy"


def main(n: int, max_live: int) -> int:
    from loop_cli.config import LoadedConfig, load_file
    from loop_cli.demo import write_real_config
    from loop_cli.fakemodel import FakeModelServer, user_texts
    from loop_cli.poller import drain_once, run_cycle
    from loop_cli.runtime import Runtime
    from loop_cli.tracker import LocalTracker
    from loop_dispatch.memory import session_rss

    binary = BIN / "claude"
    if not binary.exists():
        print(f"skipped: {binary} missing (npm ci in tests-integration/harnesses)")
        return 0
    model = FakeModelServer().start()
    work = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    socket = f"bench-cap-{uuid.uuid4().hex[:8]}"
    config = write_real_config(work, socket, "claude-code", str(binary), model.url)
    data = yaml.safe_load(config.read_text())
    data["host"] = {"maxLive": max_live}
    data["sessions"] = {"hibernateAfterSeconds": 3600}  # only capacity hibernates here
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    rt = Runtime(LoadedConfig(load_file(config), config, "--config"))
    adapter = rt.adapter
    adapter.__class__ = type(  # the structural reading (see the docstring)
        "StructuralClaude", (type(adapter),), {"activity": _structural_activity}
    )
    peak_live = peak_rss = 0

    def cycle() -> None:
        nonlocal peak_live, peak_rss
        run_cycle(rt)
        drain_once(rt)
        rt.hibernator.sweep()
        names = [r.tmux_name for r in rt.store.registry.list()]
        rss = session_rss(rt.tmux, names) or {}
        live = {k: v for k, v in rss.items() if v > 0}
        peak_live = max(peak_live, len(live))
        peak_rss = max(peak_rss, sum(live.values()))

    def seen(marker: str) -> float | None:
        for request in model.requests():
            if any(marker in t for t in user_texts(request.body)):
                return float(request.received)
        return None

    try:
        tracker = LocalTracker(rt.store)
        markers = [f"open-{uuid.uuid4().hex[:8]}" for _ in range(n)]
        refs = [
            tracker.open(f"item {i}", f"bench item {markers[i]}", project="bench") for i in range(n)
        ]
        begun = time.monotonic()
        deadline = begun + 120 + 15 * n
        while time.monotonic() < deadline and not all(seen(m) for m in markers):
            cycle()
            time.sleep(0.3)
        reached = sum(1 for m in markers if seen(m))
        print(f"claude-code x{n}, host.maxLive {max_live}: {reached}/{n} openings reached")
        print(f"  all openings in {time.monotonic() - begun:.1f}s")
        naps = [e["detail"]["rss_bytes"] for e in rt.event_log.read("session.hibernated")]
        naps = [b for b in naps if b]
        print(f"  hibernated {len(naps)}, peak live harnesses {peak_live}")
        if naps:
            idle = statistics.median(naps)
            budget = max_live * idle * 1.2
            verdict = "within" if peak_rss <= budget else "OVER"
            print(
                f"  peak RSS of all harnesses {peak_rss / 2**20:.0f} MB; {max_live} idle "
                f"sessions' worth {max_live * idle / 2**20:.0f} MB (+20%: "
                f"{budget / 2**20:.0f} MB): {verdict}"
            )
        for label, want in (("live", "active"), ("hibernated", "hibernated")):
            lat = []
            pool = [r for r in refs if rt.store.registry.get(r).status == want]
            for ref in pool[:SAMPLES]:
                marker = f"{label}-{uuid.uuid4().hex[:8]}"
                tracker.comment(ref, marker)
                sent = time.monotonic()
                until = time.monotonic() + 120
                while seen(marker) is None and time.monotonic() < until:
                    cycle()
                    time.sleep(0.1)
                at = seen(marker)
                if at is not None:
                    lat.append(at - sent)
                # let it settle idle before the next sample
                time.sleep(1.0)
            if lat:
                print(
                    f"  comment to model, {label} session: median {statistics.median(lat):.2f}s"
                    f" max {max(lat):.2f}s ({len(lat)} samples)"
                )
    finally:
        rt.close()
        if not os.environ.get("BENCH_KEEP"):
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
        else:
            print(f"  kept: tmux -L {socket}; {work}")
        model.stop()
    return 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:] if a.isdigit()]
    sys.exit(main(args[0] if args else 40, args[1] if len(args) > 1 else 8))
