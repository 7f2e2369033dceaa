"""The receiver under 1,100 half-open connections (issue 10).

A real `the-loop gh-webhook start` process, started with the systemd default soft
descriptor limit (1024), holds 1,100 connections that sent half a request's headers
(what exhausted the descriptors before the guard). Meanwhile signed deliveries are sent
one at a time; prints their p50/p99 latency, how many were answered, and how much the
receiver's log grew. Bounded: fixed counts and a hard time limit.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import yaml

from loop_cli.webhook.verify import sign

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakegithub import payloads

SECRET = "bench-guard-secret"
HALF_OPEN = 1100
DELIVERIES = 200
TIME_LIMIT = 120.0


def _limit_child() -> None:
    """The receiver starts like a systemd service: soft 1024 descriptors."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HALF_OPEN + 256:
        print(f"skipped: the hard descriptor limit ({hard}) is below {HALF_OPEN + 256}")
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HALF_OPEN + 512), hard))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = {
            "stateDir": str(root / "state"),
            "tracker": "github",
            "github": {"repositories": ["octo/app"], "tokenEnv": "NO_TOKEN_HERE"},
            "authorizedActors": ["alice"],
            "eventLog": {"path": str(root / "events.jsonl")},
            "webhook": {"secretEnv": "HOOK_SECRET"},
        }
        (root / "config.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        env.update(THE_LOOP_CONFIG=str(root / "config.yaml"), HOOK_SECRET=SECRET, HOME=tmp)
        log = root / "receiver.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "loop_cli.main", "gh-webhook", "start", "--port", "0"],
                env=env,
                stderr=err,
                stdout=subprocess.DEVNULL,
                preexec_fn=_limit_child,
            )
            try:
                run(proc, log, root)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)


def run(proc: subprocess.Popen[bytes], log: Path, root: Path) -> None:
    port = 0
    deadline = time.monotonic() + 30
    while not port and time.monotonic() < deadline:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text())
        port = int(m.group(1)) if m else 0
        time.sleep(0.05)
    if not port:
        raise SystemExit("receiver did not start: " + log.read_text())
    before = log.stat().st_size
    held = []
    for _ in range(HALF_OPEN):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
        held.append(sock)
    latencies: list[float] = []
    answered = 0
    stop_at = time.monotonic() + TIME_LIMIT
    with httpx.Client(timeout=10) as client:
        for n in range(DELIVERIES):
            if time.monotonic() > stop_at:
                break
            body = json.dumps(
                payloads.issue_comment("octo/app", number=3, comment_id=n + 1, body="hi")
            ).encode()
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": uuid.uuid4().hex,
                "X-Hub-Signature-256": sign(SECRET.encode(), body),
            }
            start = time.perf_counter()
            try:
                status = client.post(f"http://127.0.0.1:{port}/", content=body, headers=headers)
                answered += status.status_code == 202
            except httpx.HTTPError:
                pass
            latencies.append(time.perf_counter() - start)
    time.sleep(12)  # past the header deadline: the held connections are cut
    for sock in held:
        sock.close()
    growth = log.stat().st_size - before
    rejected = [
        json.loads(line)
        for line in (root / "events.jsonl").read_text().splitlines()
        if '"webhook.rejected"' in line
    ]
    q = statistics.quantiles(latencies, n=100)
    print(
        f"{HALF_OPEN} half-open connections: {answered}/{len(latencies)} signed deliveries "
        f"answered 202, p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {q[98] * 1000:.1f} ms; receiver log grew {growth} bytes; "
        f"{len(rejected)} webhook.rejected events"
    )


if __name__ == "__main__":
    main()
