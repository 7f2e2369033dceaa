"""Issue 21, preflight and safe defaults: refuse up front (no tmux, a tmux too old,
missing folders), `config check` warns naming each key (--strict: exit 2) and shows the
effective values, a private tmux server by default, TMUX_TMPDIR honoured by the daemon
side, and a token pasted where a variable NAME belongs refused without echo."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml
from other_user import nobody_prefix

from loop_cli.config import Config, LoadedConfig
from loop_cli.runtime import Runtime

PAT = "github_pat_11ABCDEFG0a1b2c3d4e5f6_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa98"


def _the_loop() -> str:
    found = shutil.which("the-loop") or str(Path(sys.executable).parent / "the-loop")
    assert os.path.isfile(found), "the-loop console script not installed"
    return found


def _no_tmux_path(tmp_path: Path) -> str:
    """A PATH without tmux on it (only an empty folder)."""
    folder = tmp_path / "bin-without-tmux"
    folder.mkdir(exist_ok=True)
    return str(folder)


def _old_tmux_path(tmp_path: Path) -> str:
    """A PATH whose `tmux` is a 2.5 release (answers -V only; modelled on tmux 2.5's
    own `tmux -V` line): the-loop needs 2.6."""
    folder = tmp_path / "bin-old-tmux"
    folder.mkdir(exist_ok=True)
    script = folder / "tmux"
    script.write_text('#!/bin/sh\n[ "$1" = "-V" ] && { echo "tmux 2.5"; exit 0; }\nexit 1\n')
    script.chmod(0o755)
    return str(folder)


# -- 4: no tmux (or too old), no start -------------------------------------------------


@pytest.mark.parametrize("which", ["missing", "old"])
def test_poll_once_and_sessions_start_refuse_without_a_usable_tmux(
    run_cli, loop_config, isolated, monkeypatch, which
) -> None:
    ref = run_cli("item", "open", "Needs tmux").output.strip()
    path = _no_tmux_path(isolated) if which == "missing" else _old_tmux_path(isolated)
    usual = os.environ["PATH"]
    monkeypatch.setenv("PATH", path)
    for args in (["poll", "--once"], ["sessions", "start", ref]):
        result = run_cli(*args)
        assert result.exit_code == 2, (args, result.output)
        (line,) = result.output.strip().splitlines()
        assert "tmux" in line
        assert ("not found on PATH" if which == "missing" else "2.5 is too old") in line
    monkeypatch.setenv("PATH", usual)
    # Nothing was used up: the event is still due and is delivered once tmux is back.
    assert "1 processed" in run_cli("poll", "--once").output


def test_sessions_restart_refuses_without_tmux(run_cli, write_config, isolated, monkeypatch):
    env_file = isolated / "app.env"
    env_file.write_text("A=1\n")
    write_config({"env": {"file": str(env_file)}, "harness": {"cwd": str(isolated)}})
    monkeypatch.setenv("PATH", _no_tmux_path(isolated))
    result = run_cli("sessions", "restart", "--all")
    assert result.exit_code == 2, result.output
    assert "tmux" in result.output
    assert "not found on PATH" in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["poll", "start"],
        ["gh-webhook", "start", "--route", "--insecure-no-signature", "--port", "0"],
    ],
)
def test_daemons_refuse_to_start_without_tmux(loop_config, isolated, command) -> None:
    """Real daemon processes: today `poll start` cycles "0 source errors" forever."""
    env = {**os.environ, "PATH": _no_tmux_path(isolated), "THE_LOOP_CONFIG": str(loop_config)}
    proc = subprocess.Popen(
        [_the_loop(), *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        pytest.fail(f"{command} kept running without tmux")
    assert proc.returncode == 2, (out, err)
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, err
    assert "tmux" in lines[0]
    assert b"Traceback" not in err


# -- 5: setup mistakes caught by config check ------------------------------------------


def _setup_mistakes(isolated: Path) -> dict[str, object]:
    blocker = isolated / "a-file"
    blocker.write_text("")
    return {
        "stateDir": str(blocker / "state"),  # under a file: cannot be made
        "tracker": "github",
        "github": {"repositories": ["acme/app", "acme/lib"]},
        "harness": {
            "cwd": "/does/not/exist",
            "cwdByProject": {"acme/lib": str(isolated / "no-lib-folder")},
        },
        "env": {"file": str(isolated / "missing.env")},
        "workspace": {"mode": "worktree", "repositories": {"acme/app": str(isolated)}},
    }


def test_config_check_warns_naming_each_key_and_strict_exits_2(run_cli, write_config, isolated):
    write_config(_setup_mistakes(isolated))
    result = run_cli("config", "check")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    text = "\n".join(warnings)
    assert "stateDir: " in text
    assert "a-file is not a directory" in text
    assert "harness.cwd: /does/not/exist does not exist" in text
    assert "harness.cwdByProject.acme/lib: " in text
    assert "no-lib-folder does not exist" in text
    assert "env.file: " in text
    assert "missing.env" in text
    assert "workspace.repositories: no clone for acme/lib" in text
    assert len(warnings) == 5, text
    strict = run_cli("config", "check", "--strict")
    assert strict.exit_code == 2
    data = json.loads(run_cli("config", "check", "--format", "json").stdout)
    assert len(data["warnings"]) == 5


def test_a_clean_config_has_no_warning_even_strict(run_cli, loop_config) -> None:
    result = run_cli("config", "check", "--strict")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output


def test_two_configs_on_one_tmux_socket_are_a_warning(run_cli, write_config, isolated):
    """The first config's daemon notes its server; the second config's check sees it."""
    socket = f"loop-test-shared-{uuid.uuid4().hex[:8]}"
    (isolated / "work").mkdir()
    first = write_config({"routing": {"tmuxSocket": socket}, "harness": {"cwd": str(isolated)}})
    assert run_cli("poll", "--once").exit_code == 0
    second = isolated / "second.yaml"
    second.write_text(
        yaml.safe_dump(
            {"stateDir": str(isolated / "other-state"), "routing": {"tmuxSocket": socket}}
        )
    )
    result = run_cli("--config", str(second), "config", "check", "--strict")
    assert result.exit_code == 2, result.output
    assert f"routing.tmuxSocket: the tmux server {socket} is also used by {first}" in (
        result.output
    )
    # The same config is never a conflict with itself.
    assert run_cli("config", "check", "--strict").exit_code == 0


def test_daemons_refuse_the_mistakes_that_fail_every_spawn(run_cli, write_config, isolated):
    write_config({"harness": {"cwd": "/does/not/exist"}})
    run_cli("item", "open", "Somewhere")
    result = run_cli("poll", "--once")
    assert result.exit_code == 2, result.output
    assert "harness.cwd: /does/not/exist does not exist" in result.output
    blocker = isolated / "a-file"
    blocker.write_text("")
    write_config({"stateDir": str(blocker / "state"), "harness": {"cwd": str(isolated)}})
    for args in (["poll", "--once"], ["poll", "start", "--cycles", "1"]):
        result = run_cli(*args)
        assert result.exit_code == 2, result.output
        assert "stateDir: " in result.output
        assert "a-file is not a directory" in result.output


def test_config_check_shows_effective_values(run_cli, write_config, isolated, monkeypatch):
    monkeypatch.chdir(isolated)
    write_config({"stateDir": "rel-state", "env": {"file": "rel.env"}})
    data = json.loads(run_cli("config", "check", "--format", "json").stdout)["effective"]
    assert data["delivery"]["maxAttempts"] == 3
    assert data["host"]["name"]
    assert data["workspace"]["root"] == str(isolated / "rel-state" / "worktrees")
    assert data["stateDir"] == str(isolated / "rel-state")
    assert data["env"]["file"] == str(isolated / "rel.env")
    assert data["routing"]["tmuxSocket"]


# -- 6: a private tmux server by default -----------------------------------------------


def test_embedded_defaults_use_a_private_tmux_server(run_cli, isolated) -> None:
    rt = Runtime(LoadedConfig(Config(), None, "defaults"))
    assert rt.tmux.socket_name == "the-loop"  # a `tmux -L` server of the-loop's own
    data = json.loads(run_cli("config", "check", "--format", "json").stdout)
    assert data["effective"]["routing"]["tmuxSocket"] == "the-loop"


# -- 8: TMUX_TMPDIR honoured by the daemon side ----------------------------------------


@pytest.mark.tmux
def test_tmux_tmpdir_is_where_the_daemon_and_the_operator_meet(
    run_cli, write_config, isolated, monkeypatch, wait
) -> None:
    socket_dir = isolated / "sockets"
    socket_dir.mkdir(mode=0o700)
    monkeypatch.setenv("TMUX_TMPDIR", str(socket_dir))
    name = f"loop-test-tmpdir-{uuid.uuid4().hex[:8]}"
    write_config({"routing": {"tmuxSocket": name}, "harness": {"cwd": str(isolated)}})
    ref = run_cli("item", "open", "Where is my server").output.strip()
    try:
        assert "1 processed" in run_cli("poll", "--once").output
        expected = socket_dir / f"tmux-{os.getuid()}" / name
        assert wait(expected.exists), f"no socket at {expected}"
        # The operator's own `tmux -L NAME` with the same TMUX_TMPDIR finds the session.
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        listed = subprocess.run(
            ["tmux", "-L", name, "list-sessions", "-F", "#{session_name}"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        assert "loop-local_" in listed.stdout
        assert run_cli("sessions", "list").exit_code == 0
        assert ref
    finally:
        for base in (str(socket_dir), "/tmp"):
            clean = {**os.environ, "TMUX_TMPDIR": base}
            clean.pop("TMUX", None)
            subprocess.run(
                ["tmux", "-L", name, "kill-server"], env=clean, capture_output=True, check=False
            )
            leftover = Path(base) / f"tmux-{os.getuid()}" / name  # our unique name only
            if leftover.is_socket():
                leftover.unlink()


# -- 9: a token pasted where a NAME belongs --------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        ("github", "tokenEnv"),
        ("webhook", "secretEnv"),
        ("store", "passwordEnv"),
        ("harness", "passEnv"),
    ],
)
def test_a_token_as_a_variable_name_is_refused_and_never_printed(
    run_cli, write_config, key
) -> None:
    section, name = key
    value: object = [PAT] if name == "passEnv" else PAT
    write_config({section: {name: value}})
    for args in (["config", "check"], ["poll", "--once"]):
        result = run_cli(*args)
        assert result.exit_code == 2, result.output
        assert f"{section}.{name}" in result.output
        assert "looks like a token (not shown)" in result.output
        assert PAT not in result.output
        assert PAT[:20] not in result.output


@pytest.mark.parametrize(
    "value",
    [
        "ghp_abcdefABCDEF0123456789",
        "gho_abc123",
        "ghs_abc123",
        "ghu_abc123",
        "xoxb_123_456",
        "Zx9Kq2Lm7Np4Rs1Tv8Wy3Ab6",
        "a3f9c2e81b7d4f60a9e2c5b8d1f7e403",  # openssl rand -hex 16
        "MyWebhookSecret2024",
        "AKIAIOSFODNN7EXAMPLE",
        "glpat-abcdefghij0123456789",
    ],
)
def test_token_shapes_are_refused(run_cli, write_config, value) -> None:
    write_config({"github": {"tokenEnv": value}})
    result = run_cli("config", "check")
    assert result.exit_code == 2
    assert value not in result.output


@pytest.mark.parametrize(
    "value", ["GITHUB_TOKEN", "MY_APP_2_TOKEN", "AWS_SECRET_ACCESS_KEY_2024_Backup"]
)
def test_variable_names_still_pass(run_cli, write_config, value) -> None:
    write_config({"github": {"tokenEnv": value}})
    result = run_cli("config", "check")
    assert result.exit_code == 0, result.output
    assert f"tokenEnv: {value} (not set)" in result.output


def test_messages_naming_a_variable_cannot_print_a_token() -> None:
    from loop_cli.envnames import NOT_SHOWN, shown

    assert shown("GITHUB_TOKEN") == "GITHUB_TOKEN"
    assert shown(PAT) == NOT_SHOWN
    assert shown("xoxb-1-2") == NOT_SHOWN
    assert shown("sk-live-0000") == NOT_SHOWN


# -- 10: state is private ----------------------------------------------------------------


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_state_is_created_private_whatever_the_umask(isolated, write_config) -> None:
    """A real `the-loop` process under umask 022: the state dir 0700, the store (with its
    -wal and -shm), the event log and the locks 0600."""
    config = write_config({"harness": {"cwd": str(isolated)}})
    env = {**os.environ, "THE_LOOP_CONFIG": str(config)}
    done = subprocess.run(
        [_the_loop(), "item", "open", "Private"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert done.returncode == 0, done.stderr
    state = isolated / "state"
    assert _mode(state) == 0o700
    assert _mode(state / "state.db") == 0o600  # -wal/-shm: see loop-dispatch's test_private
    for path in state.rglob("*"):
        want = 0o700 if path.is_dir() else 0o600
        assert _mode(path) == want, (path, oct(_mode(path)))


def test_a_looser_state_is_tightened_with_one_warning(isolated, write_config) -> None:
    config = write_config({"harness": {"cwd": str(isolated)}})
    env = {**os.environ, "THE_LOOP_CONFIG": str(config)}
    first = subprocess.run(
        [_the_loop(), "item", "open", "Private"], env=env, capture_output=True, check=False
    )
    assert first.returncode == 0
    state = isolated / "state"
    state.chmod(0o755)
    (state / "state.db").chmod(0o644)
    again = subprocess.run(
        [_the_loop(), "item", "open", "Again"], env=env, capture_output=True, text=True, check=False
    )
    assert again.returncode == 0, again.stderr
    assert _mode(state) == 0o700
    assert _mode(state / "state.db") == 0o600
    lines = again.stderr.strip().splitlines()
    assert f"{state} had mode 0755 (open to others); tightened to 0700" in lines
    assert f"{state / 'state.db'} had mode 0644 (open to others); tightened to 0600" in lines
    assert len(lines) == 2, lines


def test_another_user_gets_one_line_not_a_traceback(write_config, isolated) -> None:
    """The state is private: a user who is not its owner cannot read it, and is told so."""
    nobody = nobody_prefix()
    shared = Path(tempfile.mkdtemp(prefix="loop-private-"))
    try:
        shared.chmod(0o755)
        config = shared / "config.yaml"
        config.write_text(yaml.safe_dump({"stateDir": str(shared / "state")}))
        config.chmod(0o644)
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "THE_LOOP_CONFIG")}
        env.update(HOME=str(shared), XDG_CACHE_HOME=str(shared / "cache"))
        owner = subprocess.run(
            [_the_loop(), "--config", str(config), "item", "open", "mine"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert owner.returncode == 0, owner.stderr
        other = subprocess.run(
            [*nobody, sys.executable, "-m", "loop_cli.main", "--config", str(config), "status"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            cwd=shared,
        )
        assert other.returncode == 1, other.stdout + other.stderr
        (line,) = other.stderr.strip().splitlines()
        assert line.startswith("Error: state dir ")
        assert "permission denied" in line
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_jira_project_without_a_clone_is_named(run_cli, write_config, isolated):
    write_config(
        {
            "stateDir": str(isolated / "state"),
            "trackers": ["jira"],
            "jira": {
                "site": "acme.atlassian.net",
                "emailEnv": "JIRA_EMAIL",
                "projects": ["ABC", "OPS", "WEB"],
            },
            "workspace": {
                "mode": "worktree",
                "repositories": {"ABC": str(isolated), "acme.atlassian.net/OPS": str(isolated)},
            },
        }
    )
    result = run_cli("config", "check")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, warnings
    assert "no clone for Jira project WEB" in warnings[0]
