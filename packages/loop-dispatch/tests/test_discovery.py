"""Codex picks its own conversation id; two spawns finding theirs at once never take one.

Before the discovery lock, each spawn read the ids other items hold, then looked for its
own: two Codex started in one cwd by one drain both found the first rollout file, and
one item's pastes were then checked against the other's file (`dispatch.unconfirmed`)
and its activity read from it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from loop_dispatch.adapters import ClaudeCodeAdapter
from loop_dispatch.model import WorkItemRef


class _SlowFinder(ClaudeCodeAdapter):
    """Finds the first of two ids not held by another item, slowly (the time a real
    look through the rollout files takes, widened so the two looks overlap)."""

    assigns_conversation_id = False

    def __init__(self) -> None:
        super().__init__(checks=False)
        self.seen: list[set[str]] = []

    def discover_conversation(self, cwd, started_at, exclude, pids=()):
        self.seen.append(set(exclude))
        time.sleep(0.3)
        return next((c for c in ("first", "second") if c not in exclude), None)


def test_two_spawns_discovering_at_once_each_get_their_own_id(
    store, make_dispatcher, fake_tmux, tmp_path: Path
) -> None:
    adapter = _SlowFinder()
    d = make_dispatcher(fake_tmux.tmux, adapter)
    refs = [WorkItemRef.parse(f"github:acme/widgets#{n}") for n in (1, 2)]
    records = [
        store.registry.register(r, harness="codex", conversation_id=None, cwd=tmp_path)
        for r in refs
    ]
    found: dict[str, str | None] = {}

    def discover(record) -> None:
        found[str(record.work_item)] = d.executor.discover(record, time.time(), wait=False)

    threads = [threading.Thread(target=discover, args=(r,)) for r in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(found.values()) == ["first", "second"], found
    held = {str(r): store.registry.get(r).conversation_id for r in refs}
    assert held == found
    assert {"first"} in adapter.seen  # the second look saw the first claim
