"""Control words with the real Claude Code (issue 24): `pause` holds a comment (the model
never sees it), `resume` delivers it once, `restart` relaunches in place and the
conversation goes on. The pinned CLI against loop_cli.fakemodel on loopback, real tmux.
Run it under `flock /work/notes/real-harness.lock` where harnesses share a machine."""

from __future__ import annotations

import time

import pytest
from integration_support import poll_and_drain
from test_real_harnesses import _marker, _ref, model, rig_for  # noqa: F401 (fixtures)

from loop_dispatch import EventKind

pytestmark = pytest.mark.tmux


def test_pause_resume_restart_with_the_real_claude_code(rig_for) -> None:  # noqa: F811
    rig = rig_for("claude-code")
    ref, opening, held, after = _ref(24), _marker("opening"), _marker("held"), _marker("after")
    assert rig.until_processed(rig.source.add(ref, opening, EventKind.OPENED)) == "processed"
    assert rig.wait_turns(opening)
    conversation = rig.store.registry.get(ref).conversation_id
    pause = rig.source.add(ref, "the-loop pause", EventKind.CONTROL)
    assert rig.until_processed(pause) == "processed"
    comment = rig.source.add(ref, f"Please note {held}")
    poll_and_drain(rig.store, rig.source, rig.dispatcher, rig.events)
    (row,) = rig.store.inbox.entries(("paused",), work_item=str(ref))
    assert row.delivery_id == comment.delivery_id
    time.sleep(2)
    assert not rig.turns_with(held), "a held comment reached the model"
    assert rig.until_processed(rig.source.add(ref, "the-loop resume", EventKind.CONTROL)) == (
        "processed"
    )
    assert rig.until_processed(comment) == "processed"
    assert rig.wait_turns(held), "the released comment never reached the model"
    restart = rig.source.add(ref, "the-loop restart", EventKind.CONTROL)
    assert rig.until_processed(restart) == "processed"
    (respawned,) = rig.log("session.respawned")
    assert respawned["detail"]["resumed"] is True
    assert rig.store.registry.get(ref).conversation_id == conversation
    assert rig.until_processed(rig.source.add(ref, f"And then {after}")) == "processed"
    assert rig.wait_turns(after), "no comment reached the model after the restart"
    time.sleep(2)  # a second copy, if any, would arrive now
    turns = rig.conversation_with(after)
    assert any(opening in t for t in turns), "the restarted conversation lost its history"
    assert sum(held in t for t in turns) == 1, turns
    assert not any("the-loop pause" in t or "the-loop resume" in t for t in turns)
    verbs = [r["detail"]["verb"] for r in rig.log("control.command")]
    assert verbs == ["pause", "resume", "restart"]
