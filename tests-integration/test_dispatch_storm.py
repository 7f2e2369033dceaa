"""Dispatch storms on real tmux and one real SQLite file: four processes hand the same
events to one work item at once. Exactly one session is spawned, and every event reaches
the harness exactly once (the rest are duplicates), whatever the interleaving."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from integration_support import harness_texts

from loop_dispatch import EventLog, WorkItemRef
from loop_tmux import Tmux
from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux

REF = WorkItemRef.parse("github:acme/storm#9")
EVENTS = 6
PROCESSES = 4
FAKE_HARNESS = Path(__file__).parent / "harness" / "fake_harness.py"

STORMER = textwrap.dedent(
    """
    import json, random, sys, time
    from pathlib import Path
    from loop_tmux import Tmux
    from loop_dispatch import (Store, EventLog, Dispatcher, ClaudeCodeAdapter, LaunchSpec,
                               WorkItemRef, Event, EventKind)
    from datetime import datetime, timezone
    state, socket, program, convo, work, go, tag, n = sys.argv[1:9]
    store = Store.open(state)
    ref = WorkItemRef.parse("github:acme/storm#9")
    def launch(record, argv):
        return LaunchSpec(list(argv), {"FAKE_HARNESS_DIR": convo})
    d = Dispatcher(store, Tmux(socket_name=socket, config_file="/dev/null"),
                   ClaudeCodeAdapter(binary=program, checks=False),
                   EventLog(Path(state) / "events.jsonl"),
                   "t", cwd_for=lambda r: Path(work), lock_dir=Path(state) / "locks",
                   launcher=launch, survival_delay=0)
    order = list(range(int(n)))
    random.Random(tag).shuffle(order)
    Path(go + "." + tag).touch()
    while not Path(go).exists():
        time.sleep(0.001)
    out = {}
    for i in order:
        event = Event(f"comment:storm:{i}", ref, EventKind.COMMENT, "alice", f"storm event {i}",
                      "", datetime.now(timezone.utc))
        out[event.delivery_id] = d.dispatch(event).kind.value
    print(json.dumps(out), flush=True)
    """
)


def test_four_processes_storming_one_item_spawn_once_and_deliver_each_event_once(
    tmux_socket, tmp_path, monkeypatch
):
    convo = tmp_path / "conversations"
    convo.mkdir()
    monkeypatch.setenv("FAKE_HARNESS_DIR", str(convo))
    state, work, go = tmp_path / "state", tmp_path / "work", tmp_path / "go"
    work.mkdir()
    tmux = Tmux(socket_name=tmux_socket, config_file="/dev/null")
    assert tmux.spawn("bystander", ["sleep", "600"], "/").ok
    tags = [f"p{n}" for n in range(PROCESSES)]
    common = [str(state), tmux_socket, str(FAKE_HARNESS), str(convo), str(work), str(go)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STORMER, *common, tag, str(EVENTS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag in tags
    ]
    assert wait_for(lambda: all(Path(f"{go}.{t}").exists() for t in tags), timeout=60)
    go.touch()
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)

    for i in range(EVENTS):
        kinds = Counter(r[f"comment:storm:{i}"] for r in results)
        assert kinds == Counter({"processed": 1, "duplicate": PROCESSES - 1}), (i, kinds)
    assert len(EventLog(state / "events.jsonl").read("session.spawned")) == 1
    expected = sorted(f"storm event {i}" for i in range(EVENTS))

    def received() -> list[str]:
        return sorted(
            line
            for text in harness_texts(convo)
            for line in text.splitlines()
            if line.startswith("storm event")
        )

    wait_for(lambda: len(received()) >= EVENTS, timeout=30)
    time.sleep(0.3)  # a doubled paste, were there one, would have landed by now
    assert received() == expected
    assert len([p for p in tmux.panes() if p.session == REF.tmux_name()]) == 1
