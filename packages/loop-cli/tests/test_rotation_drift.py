"""Drift: the state table, counts, the status line and the status block's refusals."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_cli.config import parse_text as parse_config
from loop_cli.fleet import Fleet
from loop_cli.rotation.drift import (
    DriftState,
    classify,
    drift_line,
    environment_drift,
    status_block,
)
from loop_dispatch import WorkItemRef
from loop_dispatch.registry import SessionRecord
from loop_envstate import fingerprint, parse_text
from loop_tmux import Pane

FILE = {"TOKEN": "new", "REGION": "eu"}


def record(n: int) -> SessionRecord:
    ref = WorkItemRef.parse(f"local:proj#{n}")
    now = datetime.now(timezone.utc)
    return SessionRecord(ref, ref.slug(), ref.tmux_name(), "g", "c", Path("/"), "active", now, now)


@pytest.mark.parametrize(
    ("envs", "state", "names"),
    [
        ([], DriftState.NOT_RUNNING, []),
        ([dict(FILE)], DriftState.CURRENT, []),
        ([{**FILE, "EXTRA": "x"}], DriftState.CURRENT, []),  # names only the process has
        ([{"TOKEN": "old", "REGION": "eu"}], DriftState.STALE, ["TOKEN"]),
        ([{"REGION": "eu"}], DriftState.STALE, ["TOKEN"]),  # a declared name missing
        ([None], DriftState.UNREADABLE, []),
        ([None, dict(FILE)], DriftState.UNREADABLE, []),
        ([None, {"TOKEN": "old", "REGION": "x"}], DriftState.STALE, ["REGION", "TOKEN"]),
    ],
)
def test_classify_table(envs, state, names):
    got, stale = classify(FILE, envs)
    assert got is state
    assert [n.name for n in stale] == names


def test_missing_name_has_no_process_fingerprint():
    _, stale = classify(FILE, [{"REGION": "eu"}])
    assert (stale[0].file, stale[0].process) == (fingerprint("new"), None)
    assert "unset" in stale[0].describe()


def test_fleet_counts_and_line():
    records = [record(n) for n in range(1, 7)]
    panes = [
        Pane(session=records[0].tmux_name, pane_id="%1", pid=101, dead=False, command="x"),
        Pane(session=records[1].tmux_name, pane_id="%2", pid=102, dead=False, command="x"),
        Pane(session=records[2].tmux_name, pane_id="%3", pid=103, dead=False, command="x"),
        Pane(session=records[3].tmux_name, pane_id="%4", pid=104, dead=False, command="x"),
        Pane(
            session=records[4].tmux_name, pane_id="%5", pid=105, dead=True, command="x"
        ),  # dead pane: not running
        Pane(session="someone-else", pane_id="%9", pid=109, dead=False, command="x"),
    ]
    held = {101: {"TOKEN": "old", "REGION": "eu"}, 102: {"TOKEN": "old"}, 103: dict(FILE)}
    env = parse_text("TOKEN=new\nREGION=eu\n", "/x/app.env")

    report = environment_drift(records, env, panes, reader=held.get)

    assert report.counts == {"current": 1, "stale": 2, "unreadable": 1, "not-running": 2}
    assert report.running == 4
    assert drift_line(report) == (
        "sessions: 2 of 4 running with a stale environment - run: the-loop sessions restart --all"
    )
    data = report.to_dict()
    assert data["sessions"][0]["stale"][0] == {
        "name": "TOKEN",
        "file": fingerprint("new"),
        "process": fingerprint("old"),
    }


def test_unreadable_only_never_produces_a_line():
    env = parse_text("TOKEN=new\n", "/x/app.env")
    panes = [Pane(session=record(1).tmux_name, pane_id="%1", pid=5, dead=False, command="x")]
    report = environment_drift([record(1)], env, panes, reader=lambda pid: None)
    assert report.counts["unreadable"] == 1
    assert drift_line(report) is None


def test_status_block_without_env_file_is_absent(tmp_path):
    assert status_block(parse_config("{}", tmp_path / "c.yaml"), [], Fleet({})) is None


def test_status_block_errors_never_make_a_line(tmp_path):
    cfg = parse_config("env:\n  file: gone.env\n", tmp_path / "c.yaml")
    block = status_block(cfg, [record(1)], Fleet({}))
    assert "does not exist" in block["error"]
    assert "line" not in block
    silent = status_block(cfg, [record(1)], Fleet({}, error="tmux did not answer within 3s"))
    assert "tmux did not answer" in silent["error"]
    assert "line" not in silent


def test_status_block_reports_stale_sessions_from_the_fleet_read(tmp_path):
    """The block reads this test's own process: its environment lacks TOKEN -> stale."""
    import os

    (tmp_path / "app.env").write_text("LOOP_ROTATION_TEST_TOKEN=not-in-this-process\n")
    cfg = parse_config("env:\n  file: app.env\n", tmp_path / "c.yaml")
    rec = record(1)
    fleet = Fleet(
        {
            rec.tmux_name: [
                Pane(session=rec.tmux_name, pane_id="%1", pid=os.getpid(), dead=False, command="py")
            ]
        }
    )

    block = status_block(cfg, [rec], fleet)

    assert block["counts"]["stale"] == 1
    assert block["line"].startswith("sessions: 1 of 1 running with a stale environment")
    assert "not-in-this-process" not in repr(block)
