"""env doctor: fingerprints by place, session counts by distinct value, tmux's global env."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_cli.rotation.doctor import (
    UNSET,
    GlobalEnvironment,
    env_doctor,
    global_environment,
)
from loop_dispatch import WorkItemRef
from loop_dispatch.registry import SessionRecord
from loop_envstate import fingerprint, parse_text
from loop_tmux import Pane, Tmux


def record(n: int) -> SessionRecord:
    ref = WorkItemRef.parse(f"local:proj#{n}")
    now = datetime.now(timezone.utc)
    return SessionRecord(ref, ref.slug(), ref.tmux_name(), "g", "c", Path("/"), "active", now, now)


def test_table_by_place_and_distinct_values():
    env = parse_text("TOKEN=new\nREGION=eu\n", "/x/app.env")
    records = [record(n) for n in range(1, 6)]
    panes = [
        Pane(session=r.tmux_name, pane_id=f"%{i}", pid=100 + i, dead=False, command="x")
        for i, r in enumerate(records)
    ]
    held = {
        100: {"TOKEN": "new", "REGION": "eu"},
        101: {"TOKEN": "old", "REGION": "eu"},
        102: {"TOKEN": "old", "REGION": "eu"},
        103: {"REGION": "eu"},
        104: None,
    }
    report = env_doctor(
        env,
        records,
        panes,
        GlobalEnvironment({"TOKEN": "old"}),
        environ={"TOKEN": "new", "REGION": "us"},
        reader=held.get,
    )
    token, region = sorted(report.rows, key=lambda r: r.name, reverse=True)
    assert token.name == "TOKEN"
    assert (token.file, token.process, token.tmux_global) == (
        fingerprint("new"),
        fingerprint("new"),
        fingerprint("old"),
    )
    assert token.sessions == {fingerprint("old"): 2, UNSET: 1, fingerprint("new"): 1}
    assert (region.process, region.tmux_global) == (fingerprint("us"), UNSET)
    assert (report.sessions_read, report.sessions_unreadable) == (4, 1)
    text = repr(report.to_dict())
    for value in ("new", "old", "us"):
        assert f"'{value}'" not in text


def test_tmux_silence_is_unknown_not_unset():
    env = parse_text("TOKEN=new\n", "/x/app.env")
    report = env_doctor(env, [], [], GlobalEnvironment(None, "tmux did not answer"), environ={})
    assert report.rows[0].tmux_global is None
    assert report.tmux_error == "tmux did not answer"


@pytest.mark.tmux
@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux binary")
def test_global_environment_of_a_private_server(tmux_socket):
    socket = tmux_socket
    tmux = Tmux(socket_name=socket)
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    assert global_environment(tmux).server_running is False
    subprocess.run(
        ["tmux", "-L", socket, "new-session", "-d", "-s", "doctor", "sleep 30"],
        check=True,
        env=env,
    )
    try:
        subprocess.run(
            ["tmux", "-L", socket, "set-environment", "-g", "ROTATED_TOKEN", "frozen-old"],
            check=True,
            env=env,
        )
        found = global_environment(tmux)
        assert found.values is not None
        assert found.values["ROTATED_TOKEN"] == "frozen-old"
    finally:
        tmux.kill_server()


def test_global_environment_without_a_tmux_binary_is_unknown(tmp_path):
    found = global_environment(Tmux(binary=str(tmp_path / "no-tmux"), socket_name="x"))
    assert found.values is None
    assert "cannot run" in (found.error or "")
