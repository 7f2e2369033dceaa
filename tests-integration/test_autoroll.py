"""Issue 25, `env.autoRoll: idle`: the daemon's look rolls each stale session at its idle
moment and leaves a busy one for a later look (real tmux, the fake harness, the
env-file launcher)."""

from __future__ import annotations

import json
import time

import pytest
from test_rotation_e2e import Deployment, deployment, fp

__all__ = ["deployment"]  # the deployment fixture, shared with test_rotation_e2e

pytestmark = pytest.mark.tmux

TURN = 15.0  # seconds each harness works on its prompt (its screen redraws meanwhile)


def _auto_events(dep: Deployment) -> list[dict]:
    return [r for r in dep.event_records() if r["type"] == "session.env_restart"]


def test_auto_roll_relaunches_at_the_idle_moment_and_leaves_a_busy_one(
    deployment: Deployment,
) -> None:
    from loop_cli.autoroll import roll_stale
    from loop_cli.config import load_config
    from loop_cli.runtime import Runtime

    dep = deployment
    config = json.loads(dep.config.read_text())
    config["env"]["autoRoll"] = "idle"
    config["harness"]["passEnv"].append("FAKE_HARNESS_TURN_SECONDS")
    dep.config.write_text(json.dumps(config))
    dep.env["FAKE_HARNESS_TURN_SECONDS"] = str(TURN)
    (ref,) = dep.open_and_start(1)
    started = time.monotonic()  # the harness is up: its turn ends by started + TURN
    conversation = dep.sessions()[ref]["conversationId"]
    dep.write_env(dep.new)  # rotated while the agent works on its prompt
    rt = Runtime(load_config(str(dep.config)))
    try:
        rows = roll_stale(rt)
        assert time.monotonic() - started < TURN, "the turn ended before the look: no test"
        assert [(r.ref, r.outcome.value) for r in rows] == [(ref, "skipped-busy")]
        assert _auto_events(dep) == []  # a busy session is looked at again, not recorded
        assert len(dep.starts(conversation)) == 1  # nothing relaunched mid-turn

        time.sleep(max(0.0, TURN + 0.5 - (time.monotonic() - started)))
        for _ in range(3):  # as the daemon does: a look, and another while still busy
            rows = roll_stale(rt)
            if rows[0].outcome.value != "skipped-busy":
                break
        assert [(r.ref, r.outcome.value) for r in rows] == [(ref, "restarted")]
        (event,) = _auto_events(dep)
        assert event["source"] == "env.autoRoll"
        assert event["detail"]["auto"] is True
        assert event["detail"]["outcome"] == "restarted"
        starts = dep.wait_starts(conversation, 2)
        assert starts[-1]["mode"] == "resume"
        assert starts[-1]["env_fp"]["API_TOKEN"] == fp(dep.new)
        status = dep.run("status").stdout
        assert "stale environment" not in status
        # the generic harness has no signal here (no harness.idleFile): unknown, shown
        assert dep.sessions()[ref]["activity"] == "unknown"
        data = json.loads(dep.run("status", "-o", "json").stdout)
        assert data["activity"] == [
            {"workItem": ref, "tmuxName": dep.sessions()[ref]["tmuxName"], "activity": "unknown"}
        ]
        assert data["sessions"]["activity"]["unknown"] == 1
    finally:
        rt.close()
