"""The relaunch primitive on a real tmux (private socket): lock and re-read, respawn in
place, one survival window, token and conversation recorded."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from loop_dispatch.adapters import CodexAdapter, GenericAdapter
from loop_dispatch.launch import LaunchSpec
from loop_dispatch.lock import item_lock
from loop_dispatch.model import WorkItemRef
from loop_dispatch.relaunch import Relaunch, Relauncher, resume_refusal
from loop_dispatch.store import Store
from loop_tmux import Tmux

SLEEP = ["sleep", "600"]


def _register(store: Store, n: int, cwd: Path, conversation: str | None = "c-1"):
    ref = WorkItemRef.parse(f"local:relaunch#{n}")
    return store.registry.register(ref, harness="generic", conversation_id=conversation, cwd=cwd)


@pytest.mark.tmux
def test_respawn_in_place_shares_one_survival_window(
    store: Store, real_tmux: Tmux, tmp_path: Path
) -> None:
    records = [_register(store, n, tmp_path) for n in (1, 2, 3)]
    for record in records[:2]:
        assert real_tmux.spawn(record.tmux_name, SLEEP, str(tmp_path)).ok
    relauncher = Relauncher(registry=store.registry, tmux=real_tmux, survival_delay=0.5)
    results = relauncher.respawn(
        [
            Relaunch(record=records[0], spec=LaunchSpec(["sleep", "601"])),
            Relaunch(record=records[1], spec=LaunchSpec(["sh", "-c", "exit 3"])),
            Relaunch(record=records[2], spec=LaunchSpec(SLEEP)),  # no such session
        ]
    )
    first, second, third = (results[str(r.work_item)] for r in records)
    assert (first.started, first.survived) == (True, True)
    assert (second.started, second.survived) == (True, False)
    assert (third.started, third.session_missing) == (False, True)
    assert third.survived is None
    assert "disappeared" in (third.error or "")
    panes = {p.session: p for p in real_tmux.panes()}
    assert panes[records[0].tmux_name].command == "sleep"


def test_locked_drops_busy_and_changed_items(store: Store, tmp_path: Path) -> None:
    lock_dir = tmp_path / "locks"
    relauncher = Relauncher.with_item_locks(
        lock_dir=lock_dir,
        lock_timeout=0.2,
        registry=store.registry,
        tmux=None,  # type: ignore[arg-type]
    )
    kept, busy, changed = (_register(store, n, tmp_path) for n in (1, 2, 3))
    store.registry.set_conversation(changed.work_item, "c-2")  # changed since selection
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with item_lock(lock_dir, busy.work_item):
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10)
        with relauncher.locked([kept, busy, changed]) as held:
            assert held.records == [kept]
            assert list(held.busy) == [str(busy.work_item)]
            assert held.changed == [str(changed.work_item)]
    finally:
        release.set()
        holder.join(10)


def test_resume_argv_only_when_the_adapter_can_and_a_conversation_is_recorded(
    store: Store, tmp_path: Path
) -> None:
    relauncher = Relauncher(registry=store.registry, tmux=None)  # type: ignore[arg-type]
    resumable = GenericAdapter(["h", "{session_id}", "{prompt}"], ["h", "-r", "{session_id}"])
    with_conversation = _register(store, 1, tmp_path)
    without = _register(store, 2, tmp_path, conversation=None)
    assert relauncher.resume_argv(resumable, with_conversation, "go") == ["h", "-r", "c-1"]
    assert relauncher.resume_argv(resumable, without, "go") is None
    assert resume_refusal(resumable, without) == "no_recorded_conversation"
    fresh_only = GenericAdapter(["h", "{session_id}", "{prompt}"], None)
    assert resume_refusal(fresh_only, with_conversation) == "adapter_cannot_resume"
    assert resume_refusal(CodexAdapter(), with_conversation) is None


@pytest.mark.tmux
def test_spawn_records_its_token_before_tmux_and_the_conversation_after(
    store: Store, real_tmux: Tmux, tmp_path: Path
) -> None:
    record = _register(store, 1, tmp_path)
    relauncher = Relauncher(registry=store.registry, tmux=real_tmux, survival_delay=0.3)
    result = relauncher.spawn(record, SLEEP, conversation="c-new")
    assert result.ok
    token = real_tmux.session_token(record.tmux_name)
    rows = store.query("SELECT conversation_id FROM spawn_tokens WHERE token = ?", (token,))
    assert [r["conversation_id"] for r in rows] == ["c-new"]
    assert relauncher.survived(record.tmux_name) is True
    relauncher.record_conversation(record.work_item, "c-new")
    current = store.registry.get(record.work_item)
    assert current is not None
    assert current.conversation_id == "c-new"


def test_a_session_hibernated_since_selection_is_changed_never_relaunched(
    store: Store, tmp_path: Path
) -> None:
    """`sessions restart` selected it live; the hibernation sweep ended it before the
    restart took its lock. Relaunching it would start a harness under a `hibernated`
    record, uncounted against `host.maxLive` and never swept: it is left alone (its
    next event wakes it with the current environment)."""
    relauncher = Relauncher.with_item_locks(
        lock_dir=tmp_path / "locks",
        lock_timeout=0.2,
        registry=store.registry,
        tmux=None,  # type: ignore[arg-type]
    )
    selected = _register(store, 1, tmp_path)
    assert store.registry.hibernate(selected.work_item)
    with relauncher.locked([selected]) as held:
        assert held.records == []
        assert held.changed == [str(selected.work_item)]
