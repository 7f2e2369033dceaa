"""`sessions list` shows when each session was last (re)started, and its working folder
(issue 22: UPDATED stayed at creation after three relaunches)."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone

import pytest


def _kill(socket: str, name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    subprocess.run(
        ["tmux", "-L", socket, "kill-session", "-t", f"={name}"], env=env, check=True, timeout=30
    )


@pytest.mark.tmux
def test_started_moves_with_every_respawn_and_cwd_is_listed(
    run_cli, console, loop_config, isolated, tmux_socket
) -> None:
    ref = run_cli("item", "open", "Relaunched").output.strip()
    assert run_cli("poll", "--once").exit_code == 0
    (first,) = json.loads(console("sessions", "list", "--format", "json").stdout)
    starts = [datetime.fromisoformat(first["startedAt"])]
    for n in range(2):  # the agent dies; the next comment respawns it
        _kill(tmux_socket, first["tmuxName"])
        assert run_cli("item", "comment", ref, f"again {n}").exit_code == 0
        assert run_cli("poll", "--once").exit_code == 0
        (row,) = json.loads(console("sessions", "list", "--format", "json").stdout)
        assert row["presence"] == "live"
        starts.append(datetime.fromisoformat(row["startedAt"]))
    assert starts == sorted(starts)
    assert len(set(starts)) == 3
    assert row["createdAt"] == first["createdAt"]
    assert row["cwd"] == str(isolated / "work")

    listed = console("sessions", "list", env={"TZ": "UTC"})
    assert listed.returncode == 0, listed.stderr
    header, line = listed.stdout.splitlines()[:2]
    assert header.split()[-2:] == ["STARTED", "CWD"]
    # The newest start, in the local zone with its offset; the folder at the end.
    shown = starts[-1].astimezone(timezone.utc).isoformat(sep=" ", timespec="seconds")
    assert shown in line
    assert line.rstrip().endswith(str(isolated / "work"))
