"""Reactions never delay a paste: comment-to-paste latency with reactions off and on.

The bench_inbox path (signed webhook -> inbox -> drain -> tmux paste, real tmux on a
private socket) run twice at a paced 20 comments/s on 10 items: once without
reactions, once with the Reactor chained into the drain's settle callback, posting
`eyes` to the fake GitHub on loopback where every POST is held for 100 ms (a slow
GitHub). Prints both medians and p95s, and how long the reactions took to drain after
the last paste. Bounded: 100 events per run.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench_inbox import REPO, run
from fakegithub import FakeComment, FakeGitHub

from loop_cli.github.client import GitHubClient
from loop_cli.github.reactions import Reactor

TOKEN = "bench-token"
EVENTS = 100
POST_DELAY = 0.1


def main() -> int:
    if shutil.which("tmux") is None:
        print("tmux not found: skipping the reactions benchmark")
        return 0
    held = f"{POST_DELAY * 1000:.0f} ms"
    print(f"comment-to-paste, 10 items, {EVENTS} comments at 20/s; GitHub POST held {held}")
    rows = {}
    for label in ("off", "on", "off again", "on again"):
        if not label.startswith("on"):
            rows[label] = run(10, EVENTS, 0.05)
            continue
        with FakeGitHub(token=TOKEN) as fake:
            repo = fake.repo(REPO)
            for n in range(EVENTS):  # the comments bench_inbox sends, so reactions land
                repo.comments.append(
                    FakeComment(100_000 + n, 1 + n % 10, "alice", "x", fake.now, fake.now)
                )
            fake.delay_next(POST_DELAY, count=10 * EVENTS)
            client = GitHubClient(TOKEN, fake.api_url, retries=0)
            reactor = Reactor(client.post_json, backoff=0.0, max_queue=10 * EVENTS)
            rows[label] = run(10, EVENTS, 0.05, also=reactor.on_settled)
            start = time.perf_counter()
            reactor.flush(60)
            rows[label]["reactions_tail_s"] = time.perf_counter() - start
            rows[label]["posts"] = len(repo.reactions)
            reactor.close()
            client.close()
    for label, r in rows.items():
        extra = ""
        if "posts" in r:
            extra = (
                f"; {r['posts']} reactions posted, the last {r['reactions_tail_s']:.1f} s "
                "after the last paste"
            )
        print(
            f"reactions {label:>9}: {r['delivered']}/{EVENTS} pasted, comment-to-paste median "
            f"{r['latency_ms']:.1f} ms, p95 {r['latency_p95_ms']:.1f} ms{extra}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
