"""Issue 25: a rollout relaunches each session at a turn boundary.

The modelled tmux, registry and adapter are test_rotation_restart's; the activity each
session shows is scripted per look, and time is a clock the rollout's own sleeps move.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from test_rotation_restart import NEW, OLD, FakeTmux, env_file, make, outcomes, record

from loop_cli.errors import UsageError
from loop_cli.rotation.restart import (
    SKIPPED_BUSY_EXIT,
    Look,
    Outcome,
    Rollout,
    exit_code,
    restart_sessions,
    select,
)

__all__ = ["env_file"]  # the env file fixture, shared with test_rotation_restart


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


class Script:
    """What each session shows at each look: a list of activities per ref, the last
    one repeating; every look is logged with the locks held at that moment."""

    def __init__(self, plan: dict[str, list[str | Look]], locks: set[str]) -> None:
        self.plan = plan
        self.locks = locks
        self.looks: list[tuple[str, str, bool]] = []

    def __call__(self, records):
        out = {}
        for rec in records:
            ref = str(rec.work_item)
            steps = self.plan.get(ref, ["idle"])
            step = steps.pop(0) if len(steps) > 1 else steps[0]
            look = step if isinstance(step, Look) else Look(step, "screen")
            self.looks.append((ref, look.activity, ref in self.locks))
            out[ref] = look
        return out


def rig(tmp_path, n, plan, **kw):
    records = [record(i, tmp_path) for i in range(1, n + 1)]
    tmux = FakeTmux(next_env=dict(NEW))
    for rec in records:
        tmux.start(rec.tmux_name, dict(OLD))
    held: set[str] = set()
    log: list[tuple[str, str]] = []

    @contextmanager
    def lock(ref):
        held.add(str(ref))
        log.append(("lock", str(ref)))
        try:
            yield
        finally:
            held.discard(str(ref))
            log.append(("unlock", str(ref)))

    script = Script(plan, held)
    clock = Clock()
    respawn = tmux.respawn

    def respawn_logged(name, argv, cwd, env=None):
        ref = next(str(r.work_item) for r in records if r.tmux_name == name)
        log.append(("respawn", ref))
        assert ref in held, "relaunched without its item's lock"
        return respawn(name, argv, cwd, env)

    tmux.respawn = respawn_logged
    deps, events = make(tmp_path, records, tmux, lock=lock, activity=script, clock=clock, **kw)
    deps.sleep = clock.sleep
    return records, tmux, deps, events, script, log, clock


def test_a_busy_session_is_relaunched_once_its_turn_ends_under_its_lock(tmp_path, env_file):
    plan = {"local:proj#1": ["busy", "busy", "busy", "idle"], "local:proj#2": ["idle"]}
    _, _, deps, events, script, log, clock = rig(tmp_path, 2, plan)

    rows = restart_sessions(select(True, []), env_file, deps, how=Rollout(wait_idle=60))

    assert outcomes(rows) == {"local:proj#1": "restarted", "local:proj#2": "restarted"}
    # the idle one went first, without waiting for the busy one
    assert [e for e in log if e[0] == "respawn"] == [
        ("respawn", "local:proj#2"),
        ("respawn", "local:proj#1"),
    ]
    # the verdict that let #1 go was read while its lock was held, and the lock was
    # not let go between that verdict and the relaunch
    last_look = max(i for i, look in enumerate(script.looks) if look[0] == "local:proj#1")
    assert script.looks[last_look] == ("local:proj#1", "idle", True)
    one = [e for e in log if e[1] == "local:proj#1"]
    assert one[-3:] == [
        ("lock", "local:proj#1"),
        ("respawn", "local:proj#1"),
        ("unlock", "local:proj#1"),
    ]
    assert clock.now - 1000.0 < 60
    assert {r.activity for r in rows} == {"idle"}
    assert [e["detail"]["auto"] for e in events.records] == [False, False]
    assert exit_code(rows) == 0


def test_a_turn_started_between_the_verdict_and_the_lock_is_not_cut(tmp_path, env_file):
    """A delivery pastes after the look that saw idle and before the rollout's lock:
    the look under the lock sees busy, and the session waits for that turn too."""
    plan = {"local:proj#1": ["idle", "busy", "busy", "idle", "idle"]}
    _, tmux, deps, _, script, log, _ = rig(tmp_path, 1, plan)

    rows = restart_sessions(select(True, []), env_file, deps, how=Rollout(wait_idle=60))

    assert outcomes(rows) == {"local:proj#1": "restarted"}
    assert len(tmux.respawned) == 1
    assert ("local:proj#1", "busy", True) in script.looks  # seen busy under the lock
    assert [e for e in log if e[0] == "respawn"] == [("respawn", "local:proj#1")]


def test_still_busy_at_the_deadline_is_left_running_and_reported(tmp_path, env_file):
    plan = {"local:proj#1": ["busy"], "local:proj#2": ["blocked"], "local:proj#3": ["idle"]}
    _, tmux, deps, events, _, _, clock = rig(tmp_path, 3, plan)

    rows = restart_sessions(select(True, []), env_file, deps, how=Rollout(wait_idle=30))

    assert outcomes(rows) == {
        "local:proj#1": "skipped-busy",
        "local:proj#2": "skipped-busy",
        "local:proj#3": "restarted",
    }
    assert [r[0] for r in tmux.respawned] == ["loop-local_proj_3"]
    assert 30 <= clock.now - 1000.0 < 32
    assert "still busy after waiting 30s" in rows[0].detail
    assert rows[1].activity == "blocked"
    assert exit_code(rows) == SKIPPED_BUSY_EXIT == 3
    levels = {e["work_item"]: e["level"] for e in events.records}
    assert levels == {"local:proj#1": "warning", "local:proj#2": "warning", "local:proj#3": "info"}


def test_busy_restart_relaunches_at_the_deadline(tmp_path, env_file):
    _, _, deps, _, _, _, _ = rig(tmp_path, 1, {"local:proj#1": ["busy"]})

    how = Rollout(wait_idle=5, busy="restart")
    rows = restart_sessions(select(True, []), env_file, deps, how=how)

    assert outcomes(rows) == {"local:proj#1": "restarted"}
    assert "relaunched while busy (--busy=restart)" in rows[0].detail
    assert exit_code(rows) == 0


def test_wait_idle_zero_never_waits(tmp_path, env_file):
    """What is idle during the run goes; nothing is waited for."""
    plan = {"local:proj#1": ["busy", "busy", "idle"], "local:proj#2": ["idle"]}
    _, _, deps, _, _, _, clock = rig(tmp_path, 2, plan)

    rows = restart_sessions(select(True, []), env_file, deps, how=Rollout(wait_idle=0))

    assert outcomes(rows) == {"local:proj#1": "skipped-busy", "local:proj#2": "restarted"}
    assert clock.now == 1000.0


def test_unknown_counts_idle_once_its_screen_is_quiet(tmp_path, env_file):
    moving = [Look("unknown", f"frame {i}") for i in range(8)] + [Look("unknown", "still")]
    plan = {"local:proj#1": moving, "local:proj#2": [Look("unknown", None)]}
    _, tmux, deps, _, _, _, _ = rig(tmp_path, 2, plan, quiet_seconds=3.0)

    rows = restart_sessions(select(True, []), env_file, deps, how=Rollout(wait_idle=20))

    # #1 relaunched after its screen stopped changing for 3s; #2 (tmux gave no screen)
    # is never taken for idle
    assert outcomes(rows) == {"local:proj#1": "restarted", "local:proj#2": "skipped-busy"}
    assert [r[0] for r in tmux.respawned] == ["loop-local_proj_1"]


def test_dry_run_shows_each_verdict_and_touches_nothing(tmp_path, env_file):
    plan = {"local:proj#1": ["busy"], "local:proj#2": ["idle"]}
    _, tmux, deps, events, _, log, _ = rig(tmp_path, 2, plan)

    rows = restart_sessions(select(True, []), env_file, deps, dry_run=True)

    assert [r.outcome for r in rows] == [Outcome.WOULD_RESTART] * 2
    assert [r.activity for r in rows] == ["busy", "idle"]
    assert "busy now: would wait up to 600s" in rows[0].detail
    assert "idle now: would relaunch at once" in rows[1].detail
    assert rows[0].to_dict()["activity"] == "busy"
    assert tmux.respawned == []
    assert log == []
    assert events.records == []


def test_auto_roll_records_relaunches_as_auto_and_leaves_busy_ones_unrecorded(tmp_path, env_file):
    plan = {"local:proj#1": ["busy"], "local:proj#2": ["idle"]}
    _, _, deps, events, _, _, _ = rig(tmp_path, 2, plan)

    how = Rollout(wait_idle=0, auto=True)
    rows = restart_sessions(select(True, []), env_file, deps, how=how)

    assert outcomes(rows) == {"local:proj#1": "skipped-busy", "local:proj#2": "restarted"}
    assert [(e["work_item"], e["detail"]["auto"], e["source"]) for e in events.records] == [
        ("local:proj#2", True, "env.autoRoll")
    ]


def test_max_parallel_bounds_respawns_in_flight(tmp_path, env_file):
    _, tmux, deps, _, _, _, _ = rig(tmp_path, 6, {})
    inner = tmux.respawn
    flying = [0, 0]
    guard = threading.Lock()

    def slow(name, argv, cwd, env=None):
        with guard:
            flying[0] += 1
            flying[1] = max(flying)
        time.sleep(0.05)
        with guard:
            flying[0] -= 1
        return inner(name, argv, cwd, env)

    tmux.respawn = slow
    rows = restart_sessions(select(True, []), env_file, deps, how=Rollout(max_parallel=2))

    assert {r.outcome for r in rows} == {Outcome.RESTARTED}
    assert flying[1] == 2
    assert len(tmux.survivor_calls) == 1  # still one survival window for the round


@pytest.mark.parametrize("kw", [{"busy": "kill"}, {"max_parallel": 0}, {"wait_idle": -1}])
def test_bad_rollout_options_are_usage_errors(kw):
    with pytest.raises(UsageError):
        Rollout(**kw)
