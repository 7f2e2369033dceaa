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
from loop_tmux.testing import wait_for


class _SlowFinder(ClaudeCodeAdapter):
    """Finds the first of two ids not held by another item, slowly (the time a real
    look through the rollout files takes, widened so the two looks overlap)."""

    assigns_conversation_id = False

    def __init__(self) -> None:
        super().__init__(checks=False)
        self.seen: list[set[str]] = []

    def discover_conversation(self, cwd, started_at, exclude, pids=(), *, guess=True):
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


def _rollout_path(home: Path, cid: str) -> Path:
    return home / "sessions" / "2026" / "12" / "04" / f"rollout-2026-12-04T00-00-00-{cid}.jsonl"


def _rollout(home: Path, cid: str, cwd: Path, *, ended: bool) -> Path:
    """A Codex rollout file: its session_meta, one user turn and, `ended`, its end."""
    import json

    path = _rollout_path(home, cid)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    said = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    lines = [
        {"type": "session_meta", "payload": {"id": cid, "timestamp": stamp, "cwd": str(cwd)}},
        {"type": "response_item", "payload": said},
    ]
    if ended:
        lines.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_codex_that_opens_its_rollout_after_the_spawns_wait_is_found_late(
    store, make_dispatcher, real_tmux, tmp_path: Path, monkeypatch
) -> None:
    """A loaded host: the spawn's bounded wait ended before Codex opened its rollout
    file, so no id was recorded and the session's activity reads "unknown". A later look
    (`with_conversation`: the daemon's cycle, a restart's plan) finds it in the file the
    live pane holds; never a sibling's by cwd and start time, not while another holds
    the item's lock, and not for a start that is no longer the registry's."""
    from loop_dispatch.adapters import CodexAdapter, codex
    from loop_dispatch.lock import item_lock

    home, work = tmp_path / "codex", tmp_path / "work"
    work.mkdir(exist_ok=True)
    adapter = CodexAdapter(state_dir=home)
    d = make_dispatcher(real_tmux, adapter)
    ref = WorkItemRef.parse("github:acme/widgets#7")
    record = store.registry.register(ref, harness="codex", conversation_id=None, cwd=work)
    _rollout(home, "another", work, ended=True)  # a sibling pane's, same cwd and moment
    holder = 'while [ ! -e "$0" ]; do sleep 0.05; done; exec 3<"$0"; exec sleep 60'
    argv = ["sh", "-c", holder, str(_rollout_path(home, "mine"))]
    assert real_tmux.spawn(record.tmux_name, argv, str(work)).ok

    assert d.with_conversation(record).conversation_id is None  # holds none yet: no guess
    assert store.registry.get(ref).conversation_id is None
    view = real_tmux.pane_views([record.tmux_name], capture=True)[record.tmux_name]
    assert adapter.activity(view, None) == "unknown"

    _rollout(home, "mine", work, ended=True)

    def held() -> bool:
        files = codex.tree_open_files(real_tmux.pane_pids(record.tmux_name)) or []
        return any(p.name.endswith("-mine.jsonl") for p in files)

    assert wait_for(held, timeout=10), "the pane never opened its rollout file"
    with monkeypatch.context() as m:  # the pane's processes cannot be read: no guess
        m.setattr(codex, "tree_open_files", lambda pids: None)
        assert d.with_conversation(record).conversation_id is None
    with item_lock(d.lock_dir, ref, timeout=1):  # an attempt holds the item
        assert d.with_conversation(record).conversation_id is None
    assert store.registry.get(ref).conversation_id is None

    found = d.with_conversation(record).conversation_id
    assert found == "mine"
    assert store.registry.get(ref).conversation_id == "mine"
    assert d.with_conversation(record).conversation_id == "mine"  # read before: the registry's
    assert adapter.activity(view, found) == "idle"  # its own file: the turn has ended

    # The harness started again since `record` was read: that start keeps its own.
    store.registry.set_conversation(ref, None)
    time.sleep(0.01)
    assert store.registry.mark_started(ref)
    assert d.with_conversation(record).conversation_id is None
    assert store.registry.get(ref).conversation_id is None


def test_a_restart_word_finds_the_missed_id_and_may_resume(
    store, make_dispatcher, real_tmux, tmp_path: Path, make_event
) -> None:
    """`the-loop restart` on the ticket meets a running Codex whose spawn missed its id:
    the attempt holds the item's lock (no other look can run), so it looks itself, in
    the file the pane holds, and the session is resumable instead of refused."""
    from loop_dispatch.adapters import CodexAdapter
    from loop_dispatch.model import EventKind

    home, work = tmp_path / "codex", tmp_path / "work"
    work.mkdir(exist_ok=True)
    d = make_dispatcher(real_tmux, CodexAdapter(state_dir=home))
    ref = WorkItemRef.parse("github:acme/widgets#8")
    record = store.registry.register(ref, harness="codex", conversation_id=None, cwd=work)
    _rollout(home, "mine", work, ended=True)
    held = 'exec 3<"$0"; exec sleep 60'
    argv = ["sh", "-c", held, str(_rollout_path(home, "mine"))]
    assert real_tmux.spawn(record.tmux_name, argv, str(work)).ok
    word = make_event(ref, kind=EventKind.CONTROL, body="the-loop restart")

    def resumable() -> bool:
        facts, attempt = d.executor.facts(word)
        return facts.resumable and attempt.record.conversation_id == "mine"

    assert wait_for(resumable, timeout=10)
    assert store.registry.get(ref).conversation_id == "mine"
