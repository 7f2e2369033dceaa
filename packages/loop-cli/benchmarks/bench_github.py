"""Requests per poll cycle: 2 repositories x 200 watched items, against the fake GitHub.

Goal: an idle cycle costs one request per repository, answered 304 (free against the
rate limit), plus three conditional CI probes (check runs, check suites, commit
statuses; 304s) per open pull request linked to an item, and no GraphQL request.
Prints requests per cycle (total, 304s, counted against the limit) for the first
cycle, idle cycles inside and after the settle window, and busy cycles, plus the
median wall time of each kind. Bounded: a fixed number of cycles, loopback only.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakegithub import FakeGitHub

from loop_cli.github.source import GitHubSource

REPOS = ["bench/alpha", "bench/beta"]
ITEMS = 200
LABEL = "the-loop"
TOKEN = "bench-token"
PULLS = 10


def cycle(fake: FakeGitHub, source: GitHubSource, cursor: str | None):
    fake.reset_log()
    spent_before = fake.rate_remaining
    t0 = time.perf_counter()
    batch = source.poll(cursor)
    elapsed = time.perf_counter() - t0
    statuses = fake.statuses()
    counted = spent_before - fake.rate_remaining
    return batch, len(fake.requests), statuses.get(304, 0), counted, elapsed


def row(name: str, samples: list[tuple[int, int, int, float]], events: int) -> None:
    reqs = statistics.median(s[0] for s in samples)
    n304 = statistics.median(s[1] for s in samples)
    counted = statistics.median(s[2] for s in samples)
    wall = statistics.median(s[3] for s in samples) * 1000
    print(f"{name:<28} {reqs:>9.0f} {n304:>6.0f} {counted:>8.0f} {events:>7} {wall:>9.1f}")


def main() -> None:
    with FakeGitHub(token=TOKEN, login="bench-bot") as fake:
        for repo in REPOS:
            for n in range(ITEMS):
                fake.open_issue(repo, title=f"item {n}", labels=(LABEL,))
                fake.comment(repo, n + 1, "existing")
        source = GitHubSource(
            REPOS,
            TOKEN,
            fake.api_url,
            LABEL,
            ["alice"],
            None,
            clock=lambda: fake.now,
            active_items=lambda: {},
        )
        print(f"{len(REPOS)} repos x {ITEMS} watched items; fake GitHub on loopback")
        print(
            f"{'cycle':<28} {'requests':>9} {'304s':>6} {'counted':>8} {'events':>7} "
            f"{'ms (med)':>9}"
        )
        batch, reqs, n304, counted, wall = cycle(fake, source, None)
        cursor = batch.cursor
        row("first (baseline)", [(reqs, n304, counted, wall)], len(batch.events))

        settling = []
        for _ in range(3):
            fake.tick(20)
            batch, *sample = cycle(fake, source, cursor)
            cursor = batch.cursor
            settling.append(tuple(sample))
        row("idle, settle window", settling, 0)

        fake.tick(300)
        batch, *_ = cycle(fake, source, cursor)
        cursor = batch.cursor
        idle = []
        for _ in range(20):
            fake.tick(60)
            batch, *sample = cycle(fake, source, cursor)
            assert not batch.events, "an idle cycle produced events"
            cursor = batch.cursor
            idle.append(tuple(sample))
        row("idle (steady)", idle, 0)
        per_repo = statistics.median(s[0] for s in idle) / len(REPOS)
        print(f"idle requests per repository per cycle: {per_repo:.1f} (goal 1, answered 304)")

        for burst in (10, 150):
            samples, events = [], 0
            for k in range(5):
                for i in range(burst):
                    repo = REPOS[i % len(REPOS)]
                    fake.comment(repo, 1 + (i * 7 + k) % ITEMS, f"busy {k}-{i}", user="alice")
                batch, *sample = cycle(fake, source, cursor)
                cursor = batch.cursor
                events += len(batch.events)
                samples.append(tuple(sample))
                fake.tick(60)
            row(f"busy, {burst} comments/cycle", samples, events // 5)

        # Pull requests: each open PR linked to an item adds three conditional CI probes
        # per cycle (check runs, check suites, commit statuses: 304s when its CI did not
        # change, free); PR activity (and one GraphQL read of the changed PRs' sidebar
        # links per repository) only in the cycles the activity probe reports a change.
        prs = {repo: [] for repo in REPOS}
        for repo in REPOS:
            for n in range(PULLS):
                prs[repo].append(fake.open_pull(repo, body=f"Fixes #{n + 1}", user="alice"))
        for _ in range(2):
            fake.tick(300)
            batch, *_ = cycle(fake, source, cursor)
            cursor = batch.cursor
        idle = []
        for _ in range(10):
            fake.tick(60)
            batch, *sample = cycle(fake, source, cursor)
            cursor = batch.cursor
            idle.append(tuple(sample))
        row(f"idle, {PULLS} open linked PRs/repo", idle, 0)
        samples, events = [], 0
        for k in range(5):
            for repo in REPOS:
                for pr in prs[repo][:5]:
                    fake.review_comment(repo, pr.number, f"line note {k}", user="alice")
            batch, *sample = cycle(fake, source, cursor)
            cursor = batch.cursor
            events += len(batch.events)
            samples.append(tuple(sample))
            fake.tick(60)
        row("busy, 10 review comments/cycle", samples, events // 5)


if __name__ == "__main__":
    main()
