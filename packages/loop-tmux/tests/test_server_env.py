"""A server started with `server_env` holds only that environment, and so do its panes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from loop_tmux_testlib import environ_of, tmux_out

from loop_tmux import Tmux, allowlisted
from loop_tmux.environment import is_allowed
from loop_tmux.testing import wait_until

SECRET = "s3cr3t-value-never-in-a-pane"


def test_allowlisted_keeps_only_the_allowlist_and_the_operator_names() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "GITHUB_TOKEN": SECRET,
        "THE_LOOP_WEBHOOK_SECRET": SECRET,
        "EDITOR": "vi",
    }
    assert allowlisted(environ) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C"}
    assert allowlisted(environ, ["EDITOR", "bad name"]) == {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "EDITOR": "vi",
    }
    assert not is_allowed("GITHUB_TOKEN")


def test_scrubbed_server_keeps_daemon_credentials_out_of_tmux_and_panes(
    socket_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", SECRET)
    tmux = Tmux(socket_name=socket_name, config_file="/dev/null", server_env=allowlisted())
    assert tmux.spawn("loop-clean", ["sleep", "60"], str(tmp_path), {"THE_LOOP_X": "1"}).ok
    glob = tmux.global_environment()
    assert glob is not None
    assert "PATH" in glob
    assert SECRET not in glob.values()
    pid = tmux.pane_pids("loop-clean")[0]
    pane = wait_until(lambda: environ_of(pid) or None, what="pane environ")
    assert SECRET not in pane.values()
    assert "GITHUB_TOKEN" not in pane
    assert "THE_LOOP_WEBHOOK_SECRET" not in pane
    assert pane["THE_LOOP_X"] == "1"
    # An attaching client cannot push its variables into later panes.
    assert tmux_out(tmux, "show-options", "-g", "update-environment").split() == [
        "update-environment"
    ]


def test_unscrubbed_server_inherits_the_callers_environment(
    socket_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leak the allowlist closes: without server_env, tmux copies everything."""
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    tmux = Tmux(socket_name=socket_name, config_file="/dev/null")
    assert tmux.spawn("loop-dirty", ["sleep", "60"], str(tmp_path)).ok
    glob = tmux.global_environment()
    assert glob is not None
    assert glob.get("GITHUB_TOKEN") == SECRET
    assert os.environ["GITHUB_TOKEN"] == SECRET


def test_a_scrubbed_server_listens_where_tmux_tmpdir_says(
    socket_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: the allowlist holds no TMUX_TMPDIR, yet the server a scrubbed client
    starts must listen in $TMUX_TMPDIR, where `tmux -L NAME` (and `sessions attach`) look."""
    sockets = tmp_path / "sockets"
    sockets.mkdir(mode=0o700)
    monkeypatch.setenv("TMUX_TMPDIR", str(sockets))
    tmux = Tmux(socket_name=socket_name, config_file="/dev/null", server_env=allowlisted())
    try:
        assert tmux.spawn("loop-where", ["sleep", "60"], str(tmp_path)).ok
        assert (sockets / f"tmux-{os.getuid()}" / socket_name).exists()
        operator = Tmux(socket_name=socket_name, config_file="/dev/null")  # our environ
        assert operator.probe("loop-where").value == "live"
    finally:
        tmux.kill_server()
        with monkeypatch.context() as default_dir:  # the old code's place: /tmp
            default_dir.delenv("TMUX_TMPDIR")
            Tmux(socket_name=socket_name, config_file="/dev/null").kill_server()
