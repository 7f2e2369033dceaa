"""The adapter reads the harness's files where the harness writes them.

`env.file` sets `CLAUDE_CONFIG_DIR` for the agents and the config names no
`harness.stateDir`: the harness (the fake, which writes Claude Code's user-turn records
under `$CLAUDE_CONFIG_DIR` as Claude Code does) keeps its conversations in the env
file's folder, not in the daemon's home. Receipts must be confirmed from there, and a
dead harness must be resumed, not restarted fresh as `nothing_saved`. Real processes,
a real tmux server on a private socket, the real launcher.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml
from inbox_rig import Rig, pane_pids

from loop_tmux.testing import wait_for

pytestmark = pytest.mark.tmux


def test_an_env_file_harness_folder_is_where_receipts_and_resumes_are_read(
    tmp_path: Path, tmux_socket: str
) -> None:
    agent_dir = tmp_path / "agent-claude"
    env_file = tmp_path / "agent.env"
    env_file.write_text(f"CLAUDE_CONFIG_DIR={agent_dir}\n")
    (tmp_path / "rig").mkdir()
    rig = Rig(tmp_path / "rig", tmux_socket, env_file=env_file)
    config = yaml.safe_load(rig.config_path.read_text())
    del config["harness"]["stateDir"]  # derived from the agents' environment
    rig.config_path.write_text(yaml.safe_dump(config))
    try:
        ref = rig.cli("item", "open", "Receipts please").stdout.strip()
        rig.cli("poll", "--once")
        assert wait_for(lambda: list(agent_dir.glob("projects/*/*.jsonl")))
        rig.cli("item", "comment", ref, "first comment")
        rig.cli("poll", "--once")
        assert wait_for(lambda: rig.events("dispatch.confirmed")), rig.events()
        assert rig.events("dispatch.unconfirmed") == []

        # The harness dies; the next comment respawns it, resuming its conversation.
        (pid,) = pane_pids(tmux_socket).values()
        os.kill(pid, signal.SIGKILL)
        rig.cli("item", "comment", ref, "after the crash")
        rig.cli("poll", "--once")
        assert wait_for(
            lambda: rig.events("session.respawned") or rig.events("session.resume_failed")
        )
        assert rig.events("session.resume_failed") == []
        (respawned,) = rig.events("session.respawned")
        assert respawned["detail"]["resumed"] is True
        (row,) = json.loads(rig.cli("sessions", "list", "--format", "json").stdout)
        ours = [s for s in rig.starts() if s["session_id"] == row["conversationId"]]
        assert [s["mode"] for s in ours] == ["fresh", "resume"]
        check = rig.cli("harness", "check", check=False)
        assert f"state dir: {agent_dir} (from env.file CLAUDE_CONFIG_DIR)" in check.stdout, (
            check.stdout + check.stderr
        )
    finally:
        rig.close()


def test_harness_check_reports_an_env_file_that_overrides_harness_state_dir(
    tmp_path: Path, tmux_socket: str
) -> None:
    env_file = tmp_path / "agent.env"
    env_file.write_text(f"CLAUDE_CONFIG_DIR={tmp_path / 'elsewhere'}\n")
    (tmp_path / "rig").mkdir()
    rig = Rig(tmp_path / "rig", tmux_socket, env_file=env_file)  # names harness.stateDir
    done = rig.cli("harness", "check", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "[MISSING] env.file sets CLAUDE_CONFIG_DIR, which the launcher applies over "
        "harness.stateDir" in done.stdout
    )
    assert str(tmp_path / "elsewhere") not in done.stdout  # a value of the env file
