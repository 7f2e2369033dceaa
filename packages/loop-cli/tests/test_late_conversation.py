"""A Codex id its spawn missed is found later (issue 25): by the daemon's cycle, with a
back-off for sessions that never get one, and by `sessions restart` before it plans,
so the session is resumed rather than left running. On a loaded host Codex can open
its rollout file after the spawn's bounded wait; without an id the session read
"unknown" until its next delivery and no rollout could resume it."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_cli.config import load_config
from loop_cli.late_ids import FIRST_BACKOFF, LateConversations
from loop_cli.runtime import Runtime
from loop_dispatch import WorkItemRef
from loop_tmux.testing import wait_for

HOLDER = 'while [ ! -e "$0" ]; do sleep 0.05; done; exec 3<"$0"; exec sleep 60'


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


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _world(
    write_config: Callable[..., Path], tmux_socket: str, isolated: Path, monkeypatch: Any
) -> dict[str, Any]:
    """Two Codex sessions whose ids were not found at spawn; each pane's process opens
    its rollout file once the test writes it. A `codex` on PATH for the restart."""
    home, work, bin_dir = isolated / "codex-home", isolated / "work", isolated / "bin"
    work.mkdir()
    bin_dir.mkdir()
    codex = bin_dir / "codex"
    codex.write_text("#!/bin/sh\nsleep 60\n")  # its argv stays readable in /proc
    codex.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env_file = isolated / "agent.env"
    env_file.write_text("API_TOKEN=new\n")
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"adapter": "codex", "stateDir": str(home), "cwd": str(work)},
            "env": {"file": str(env_file)},
        }
    )
    rt = Runtime(load_config(None))
    refs = [WorkItemRef.parse(f"local:late#{n}") for n in (1, 2)]
    for ref, cid in zip(refs, ("first", "second"), strict=True):
        record = rt.store.registry.register(ref, harness="codex", conversation_id=None, cwd=work)
        argv = ["sh", "-c", HOLDER, str(_rollout_path(home, cid))]
        assert rt.tmux.spawn(record.tmux_name, argv, str(work)).ok
    return {"rt": rt, "refs": refs, "home": home, "work": work}


def _held(rt: Runtime, ref: WorkItemRef, cid: str) -> bool:
    """Does the item's pane hold rollout `cid` open yet (its process polls for it)?"""
    from loop_dispatch.procinfo import tree_open_files

    record = rt.store.registry.get(ref)
    files = tree_open_files(rt.tmux.pane_pids(record.tmux_name)) or []
    return any(p.name.endswith(f"-{cid}.jsonl") for p in files)


class _Looks:
    """`Runtime.with_conversation`, counting each session's looks with the clock's time."""

    def __init__(self, rt: Runtime, clock: _Clock) -> None:
        self.at: dict[str, list[float]] = {}
        real = rt.with_conversation

        def look(record: Any) -> Any:
            self.at.setdefault(str(record.work_item), []).append(clock.now)
            return real(record)

        rt.with_conversation = look  # type: ignore[method-assign]


def test_the_daemons_cycle_finds_a_missed_id_and_backs_off_from_one_never_written(
    write_config: Callable[..., Path], tmux_socket: str, isolated: Path, monkeypatch: Any
) -> None:
    world = _world(write_config, tmux_socket, isolated, monkeypatch)
    rt, refs, home, work = world["rt"], world["refs"], world["home"], world["work"]
    clock = _Clock()
    late = LateConversations(clock)
    looks = _Looks(rt, clock)
    try:
        activity = rt.activity_reader()
        records = [rt.store.registry.get(r) for r in refs]
        assert {k: v.activity for k, v in activity(records).items()} == {
            "local:late#1": "unknown",
            "local:late#2": "unknown",
        }
        assert late.sweep(rt) == 0  # neither pane holds a rollout file yet
        _write_rollout(home, "first", work)  # #2's Codex never writes one
        assert wait_for(lambda: _held(rt, refs[0], "first"), timeout=10)
        assert late.sweep(rt) == 0  # both missed once: neither looked at again yet
        clock.now += FIRST_BACKOFF
        assert late.sweep(rt) == 1
        assert [rt.store.registry.get(r).conversation_id for r in refs] == ["first", None]
        records = [rt.store.registry.get(r) for r in refs]
        assert activity(records)["local:late#1"].activity == "idle"

        while len(looks.at["local:late#2"]) < 11:  # #2, a sweep each second
            clock.now += 1
            late.sweep(rt)
        times = looks.at["local:late#2"]
        gaps = [round(b - a) for a, b in itertools.pairwise(times)]
        assert gaps == [5, 10, 20, 40, 80, 160, 300, 300, 300, 300], gaps
        assert looks.at["local:late#1"] == [1000.0, 1005.0]  # found: never looked at again

        assert rt.store.registry.mark_started(refs[1])  # a new start: looked at at once
        before = len(times)
        late.sweep(rt)
        assert len(looks.at["local:late#2"]) == before + 1
    finally:
        rt.close()


def test_on_a_fleet_the_cycle_looks_at_this_hosts_items_only_and_not_once_fenced(
    write_config: Callable[..., Path], tmux_socket: str, isolated: Path, monkeypatch: Any
) -> None:
    """A pane of an item moved to another host can outlive the move: this host's cycle
    never writes that item's record. And once this host's lease ran out (its own clock),
    it looks at nothing."""
    from loop_dispatch.hosts import Hosts

    world = _world(write_config, tmux_socket, isolated, monkeypatch)
    rt, refs, home, work = world["rt"], world["refs"], world["home"], world["work"]
    _write_rollout(home, "first", work)
    _write_rollout(home, "second", work)
    for ref, cid in zip(refs, ("first", "second"), strict=True):
        assert wait_for(lambda ref=ref, cid=cid: _held(rt, ref, cid), timeout=10)

    class _Fence:
        lapsed: str | None = "this host's lease ran out (by its own clock): not pasted"

        def refusal(self) -> str | None:
            return self.lapsed

    fence = _Fence()
    monkeypatch.setattr(Runtime, "fleet", property(lambda self: True))
    monkeypatch.setattr(Runtime, "fence", property(lambda self: fence))
    monkeypatch.setattr(Runtime, "host_name", property(lambda self: "here"))
    monkeypatch.setattr(
        Hosts,
        "placed_on",
        lambda self, host: ["local:late#1"] if host == "here" else ["local:late#2"],
    )
    try:
        late = LateConversations()
        assert late.sweep(rt) == 0  # fenced: nothing looked at
        assert [rt.store.registry.get(r).conversation_id for r in refs] == [None, None]
        fence.lapsed = None
        assert late.sweep(rt) == 1
        assert [rt.store.registry.get(r).conversation_id for r in refs] == ["first", None]
    finally:
        rt.close()


def test_a_restart_finds_the_missed_id_before_it_plans_and_resumes_it(
    write_config: Callable[..., Path],
    tmux_socket: str,
    isolated: Path,
    run_cli: Any,
    monkeypatch: Any,
) -> None:
    """A real run, not a dry one: the session whose id is found before planning is
    relaunched resuming that conversation (not skipped as "changed" by the relaunch's
    identity check); the one that has written none is left running."""
    world = _world(write_config, tmux_socket, isolated, monkeypatch)
    rt, refs, home, work = world["rt"], world["refs"], world["home"], world["work"]
    try:
        _write_rollout(home, "first", work)  # #2's Codex has written none yet
        assert wait_for(lambda: _held(rt, refs[0], "first"), timeout=10)
        dry = run_cli("sessions", "restart", "--all", "--force", "--dry-run", "-o", "json")
        rows = {r["ref"]: r for r in json.loads(dry.output)["rows"]}
        assert rows["local:late#1"]["outcome"] == "would-restart", rows
        assert rt.store.registry.set_conversation(refs[0], None)  # missed again

        done = run_cli("sessions", "restart", "--all", "--force", "-o", "json")
        rows = {r["ref"]: r for r in json.loads(done.output)["rows"]}
        assert rows["local:late#1"]["outcome"] == "restarted", rows
        assert rows["local:late#2"]["outcome"] == "skipped-not-resumable", rows
        assert rt.store.registry.get(refs[0]).conversation_id == "first"
        assert rt.store.registry.get(refs[1]).conversation_id is None
        record = rt.store.registry.get(refs[0])
        (pane,) = [p for p in rt.tmux.panes() if p.session == record.tmux_name]
        argv = Path(f"/proc/{pane.pid}/cmdline").read_bytes().split(b"\0")
        assert [a for a in argv if a in (b"resume", b"first")] == [b"resume", b"first"], argv
    finally:
        rt.close()
