"""A Codex id its spawn missed is found later, by the daemon's cycle and by a rollout's
activity reader (issue 25): on a loaded host Codex can open its rollout file after the
spawn's bounded wait, and a session without an id read "unknown" until its next
delivery, so a rollout waited for it in vain and `status` never saw it idle."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from loop_cli.config import load_config
from loop_cli.poller import find_conversations
from loop_cli.runtime import Runtime
from loop_dispatch import WorkItemRef
from loop_tmux.testing import wait_for


def _rollout_path(home: Path, cid: str) -> Path:
    return home / "sessions" / "2026" / "12" / "04" / f"rollout-2026-12-04T00-00-00-{cid}.jsonl"


def _write_rollout(home: Path, cid: str, cwd: Path) -> None:
    """A rollout whose one turn has ended (Codex 0.171.0's records)."""
    path = _rollout_path(home, cid)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    said = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    lines = [
        {"type": "session_meta", "payload": {"id": cid, "timestamp": stamp, "cwd": str(cwd)}},
        {"type": "response_item", "payload": said},
        {"type": "event_msg", "payload": {"type": "task_complete"}},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_cycle_and_a_rollouts_reader_find_the_id_a_codex_spawn_missed(
    write_config: Callable[..., Path], tmux_socket: str, isolated: Path
) -> None:
    home, work = isolated / "codex-home", isolated / "work"
    work.mkdir()
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"adapter": "codex", "stateDir": str(home), "cwd": str(work)},
        }
    )
    rt = Runtime(load_config(None))
    try:
        refs = [WorkItemRef.parse(f"local:late#{n}") for n in (1, 2)]
        records = [
            rt.store.registry.register(r, harness="codex", conversation_id=None, cwd=work)
            for r in refs
        ]
        holder = 'while [ ! -e "$0" ]; do sleep 0.05; done; exec 3<"$0"; exec sleep 60'
        for record, cid in zip(records, ("first", "second"), strict=True):
            argv = ["sh", "-c", holder, str(_rollout_path(home, cid))]
            assert rt.tmux.spawn(record.tmux_name, argv, str(work)).ok
        read = rt.activity_reader()
        before = read(records)
        assert {ref: look.activity for ref, look in before.items()} == {
            "local:late#1": "unknown",
            "local:late#2": "unknown",
        }
        assert find_conversations(rt) == 0  # neither holds a rollout file yet

        _write_rollout(home, "first", work)  # the daemon's cycle finds #1's
        assert wait_for(lambda: find_conversations(rt), timeout=10) == 1
        assert rt.store.registry.get(refs[0]).conversation_id == "first"
        assert rt.store.registry.get(refs[1]).conversation_id is None

        _write_rollout(home, "second", work)  # a rollout's reader finds #2's itself
        looks = wait_for(
            lambda: (found := read(records))["local:late#2"].activity != "unknown" and found,
            timeout=10,
        )
        assert looks
        assert {ref: look.activity for ref, look in looks.items()} == {
            "local:late#1": "idle",
            "local:late#2": "idle",
        }
        assert rt.store.registry.get(refs[1]).conversation_id == "second"
    finally:
        rt.close()
