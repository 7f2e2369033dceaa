"""Webhook throughput: signed issue_comment deliveries to a receiver on loopback.

The receiver runs in its own process (`--serve`), under uvicorn, committing each
delivery to the inbox of a real state store (GUID and event in one SQLite transaction)
before its 202, with no drain, so the numbers show what the sender sees: the cost of
accepting durably. Bounded: a fixed request count per run and a hard time limit.
Prints requests/s, p50 and p99 latency for 1 and 4 senders.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from loop_cli.webhook.verify import sign

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakegithub import payloads

SECRET = b"bench-secret"
REQUESTS = 1500
TIME_LIMIT = 60.0


def serve() -> None:
    import tempfile

    from loop_cli.webhook.app import create_app
    from loop_cli.webhook.seen import InboxAccept
    from loop_cli.webhook.server import serve as run
    from loop_dispatch.store import Store

    with tempfile.TemporaryDirectory() as tmp, Store.open(tmp) as store:
        app = create_app(
            SECRET, InboxAccept(store), authorized_actors=["alice"], trigger_label="the-loop"
        )
        run(app, "127.0.0.1", 0, on_started=lambda port: print(f"PORT {port}", flush=True))


def payload(n: int) -> bytes:
    body = payloads.issue_comment(
        "bench/app", number=1 + n % 50, comment_id=10_000 + n, body="x" * 400
    )
    return json.dumps(body).encode()


def sender(url: str, numbers: list[int], latencies: list[float], deadline: float) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        for n in numbers:
            if time.monotonic() > deadline:
                return
            body = payload(n)
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": f"bench-{n}",
                "X-Hub-Signature-256": sign(SECRET, body),
            }
            t0 = time.perf_counter()
            r = client.post("/", content=body, headers=headers)
            latencies.append(time.perf_counter() - t0)
            if r.status_code != 202:
                raise SystemExit(f"unexpected {r.status_code}: {r.text}")


def run(url: str, senders: int, offset: int) -> None:
    latencies: list[float] = []
    numbers = list(range(offset, offset + REQUESTS))
    shares = [numbers[i::senders] for i in range(senders)]
    deadline = time.monotonic() + TIME_LIMIT
    threads = [
        threading.Thread(target=sender, args=(url, share, latencies, deadline)) for share in shares
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    p50 = statistics.median(lat) * 1000
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    print(
        f"{senders} sender(s): {len(lat)} requests in {wall:.2f}s = {len(lat) / wall:.0f} req/s;"
        f" p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )


def main() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"PORT (\d+)", line)
        if not m:
            raise SystemExit(f"receiver did not start: {line!r}")
        url = f"http://127.0.0.1:{m.group(1)}"
        print(
            f"signed issue_comment deliveries ({len(payload(0))} bytes), each committed to "
            "the inbox before its 202, loopback"
        )
        run(url, 1, 0)
        run(url, 4, REQUESTS)
    finally:
        t0 = time.perf_counter()
        proc.terminate()  # SIGTERM: the receiver shuts down gracefully
        try:
            code = proc.wait(timeout=90)
            print(f"SIGTERM to exit: {time.perf_counter() - t0:.2f}s, exit {code}")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print("receiver did not stop within 90 s; killed")


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve()
    else:
        main()
