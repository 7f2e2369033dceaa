"""Issue 10 through the CLI: agents never hold the daemon's credentials, hostile input
is refused in one line, hostile text never reaches the operator's terminal raw."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from loop_dispatch import WorkItemRef
from loop_dispatch.store import Store
from loop_envstate import fingerprint, process_environ

TOKEN = "ghp_daemonTOKENneverInAPane0123"
SECRET = "whsec-daemon-never-in-a-pane"

# The columns every schema version has (later versions add more).
_SESSION_COLUMNS = (
    "work_item, slug, tmux_name, harness, conversation_id, cwd, status, created_at, updated_at"
)


def _tmux(socket: str, *args: str, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    done = subprocess.run(
        ["tmux", "-L", socket, "-f", "/dev/null", *args],
        capture_output=True,
        text=True,
        env=env if env is not None else base,
        check=False,
    )
    return done.stdout


@pytest.mark.tmux
def test_agents_never_hold_the_daemons_credentials(
    run_cli, loop_config, isolated, tmux_socket, monkeypatch, wait
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", SECRET)
    ref = run_cli("item", "open", "Make it green").output.strip()
    assert run_cli("poll", "--once").exit_code == 0
    store = Store.open(isolated / "state")
    record = store.registry.get(WorkItemRef.parse(ref))
    store.close()
    assert record is not None
    pids = wait(lambda: _tmux(tmux_socket, "list-panes", "-a", "-F", "#{pane_pid}").split())
    env = wait(lambda: process_environ(int(pids[0])))
    assert TOKEN not in env.values()
    assert SECRET not in env.values()
    assert env["THE_LOOP_WORK_ITEM"] == ref
    glob = _tmux(tmux_socket, "show-environment", "-g")
    assert TOKEN not in glob
    assert SECRET not in glob
    doctor = run_cli("env", "doctor")
    assert doctor.exit_code == 0, doctor.output
    assert "daemon credentials: none visible to agents" in doctor.output
    status = json.loads(run_cli("status", "--format", "json").output)
    assert status["credentialExposure"]["count"] == 0


@pytest.mark.tmux
def test_a_server_holding_a_credential_is_reported_by_fingerprint(
    run_cli, loop_config, tmux_socket, monkeypatch
) -> None:
    """A server started the old way (the daemon's whole environment): `env doctor` and
    `status` name it, by fingerprint, never by value."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    dirty = {**os.environ, "GITHUB_TOKEN": TOKEN, "LEAKED_COPY": SECRET}
    dirty.pop("TMUX", None)
    _tmux(tmux_socket, "new-session", "-d", "-s", "loop-old", "sleep 60", env=dirty)
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", SECRET)
    doctor = run_cli("env", "doctor")
    assert doctor.exit_code == 0, doctor.output
    assert f"credential GITHUB_TOKEN ({fingerprint(TOKEN)})" in doctor.output
    assert "as LEAKED_COPY" in doctor.output
    assert "tmux global environment" in doctor.output
    assert "session loop-old" in doctor.output
    status = run_cli("status")
    assert "daemon credential exposure" in status.output
    for output in (doctor.output, status.output, run_cli("status", "--format", "json").output):
        assert TOKEN not in output
        assert SECRET not in output


PANE_SET_BY_TMUX = {"TMUX", "TMUX_PANE", "TERM_PROGRAM", "TERM_PROGRAM_VERSION"}


@pytest.mark.tmux
@pytest.mark.parametrize("with_file", [True, False])
def test_an_agent_on_a_server_the_loop_did_not_start_holds_only_the_allowed_names(
    run_cli, write_config, isolated, tmux_socket, monkeypatch, wait, with_file
) -> None:
    """Issue 21: a server started by hand, with secrets in its own process environment
    and in its global environment: the agent the-loop spawns there holds exactly the
    allowlist, harness.passEnv, the env file and THE_LOOP_*; `env doctor` names every
    other name a pane holds (names only)."""
    from loop_tmux.environment import ALLOWED_NAMES

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    dirty = {**os.environ, "MY_SECRET": "my-secret-4b5c", "EDITOR": "ed-from-server"}
    dirty.pop("TMUX", None)
    _tmux(tmux_socket, "new-session", "-d", "-s", "hand-made", "sleep 300", env=dirty)
    _tmux(tmux_socket, "set-environment", "-g", "MY_GLOBAL_SECRET", "global-secret-6d7e")
    server_pid = int(_tmux(tmux_socket, "display-message", "-p", "#{pid}").strip())
    assert process_environ(server_pid)["MY_SECRET"] == "my-secret-4b5c"
    (isolated / "work").mkdir()
    data: dict[str, object] = {
        "routing": {"tmuxSocket": tmux_socket},
        "harness": {"cwd": str(isolated / "work"), "passEnv": ["EDITOR"]},
    }
    if with_file:
        env_file = isolated / "app.env"
        env_file.write_text("FROM_FILE=file-value-8f9a\n")
        data["env"] = {"file": str(env_file)}
    write_config(data)
    ref = run_cli("item", "open", "Clean room").output.strip()
    assert "1 processed" in run_cli("poll", "--once").output
    store = Store.open(isolated / "state")
    record = store.registry.get(WorkItemRef.parse(ref))
    store.close()
    assert record is not None
    pid = wait(
        lambda: _tmux(
            tmux_socket, "list-panes", "-t", f"={record.tmux_name}", "-F", "#{pane_pid}"
        ).strip()
    )
    env = wait(lambda: process_environ(int(pid)))
    for name in ("GITHUB_TOKEN", "MY_SECRET", "MY_GLOBAL_SECRET"):
        assert name not in env, name
    assert TOKEN not in env.values()
    assert env["THE_LOOP_WORK_ITEM"] == ref
    assert env["PATH"]
    assert env["HOME"]
    assert env["TERM"]
    assert env["EDITOR"] == "ed-from-server"
    if with_file:
        assert env["FROM_FILE"] == "file-value-8f9a"
    allowed = ALLOWED_NAMES | PANE_SET_BY_TMUX | {"EDITOR", "FROM_FILE"}
    stray = [n for n in env if n not in allowed and not n.startswith(("LC_", "THE_LOOP_"))]
    assert stray == []

    doctor = run_cli("env", "doctor")
    assert doctor.exit_code == 0, doctor.output
    strays_text = doctor.output.split("names outside the allowed set")[1]
    hand = next(line for line in strays_text.splitlines() if "session hand-made" in line)
    assert "MY_SECRET" in hand
    assert "GITHUB_TOKEN" in hand
    assert f"session {record.tmux_name}" not in strays_text
    for value in ("my-secret-4b5c", TOKEN, "global-secret-6d7e"):
        assert value not in doctor.output
    data_json = json.loads(run_cli("env", "doctor", "--format", "json").output)
    strays = {i["where"].split()[1]: i["names"] for i in data_json["strayNames"]["items"]}
    assert "MY_SECRET" in strays["hand-made"]
    assert record.tmux_name not in strays


def test_pass_env_may_not_name_a_credential(run_cli, write_config) -> None:
    write_config({"harness": {"passEnv": ["EDITOR", "GITHUB_TOKEN"]}})
    result = run_cli("config", "check")
    assert result.exit_code == 2
    assert "harness.passEnv: GITHUB_TOKEN is a credential" in result.output
    assert "Traceback" not in result.output


def test_non_utf8_arguments_are_one_error_line(isolated) -> None:
    """Real bytes on a real argv (CliRunner cannot carry them)."""
    for args in (["item", "open", b"\xff\xfe title"], ["item", "comment", "local:loop#1", b"\xc3"]):
        done = subprocess.run(
            [sys.executable, "-m", "loop_cli.main", *args],
            capture_output=True,
            env=os.environ,
            check=False,
            timeout=60,
        )
        err = done.stderr.decode()
        assert done.returncode == 2, err
        assert err.count("\n") == 1
        assert err.startswith("Error: argument ")
        assert "not valid UTF-8" in err
        assert "Traceback" not in err


def test_a_section_given_twice_is_refused_with_both_lines(run_cli, isolated) -> None:
    path = isolated / "dup.yaml"
    path.write_text("harness:\n  survivalSeconds: 2\nwebhook:\n  port: 9000\nharness: {}\n")
    result = run_cli("--config", str(path), "config", "check")
    assert result.exit_code == 2
    assert "key 'harness' given twice (lines 1 and 5)" in result.output
    assert f"{path}:5" in result.output


OSC_TITLE = "retitled\x1b]0;pwned\x07 \x9b2J done\u202e"


def test_control_sequences_never_reach_the_terminal_raw(run_cli, write_config) -> None:
    write_config()
    ref = run_cli("item", "open", OSC_TITLE, "--author", "eve\x1b[2J").output.strip()
    run_cli("item", "comment", ref, "body \x1b]52;c;aGk=\x07 end", "--author", "mal\x07")
    for args in (("item", "list"), ("item", "show", ref), ("events",), ("sessions", "list")):
        out = run_cli(*args).output
        assert "\x1b" not in out, args
        assert "\x07" not in out, args
        assert "\x9b" not in out, args
        assert "\u202e" not in out, args
    listed = run_cli("item", "list").output
    assert "retitled\\x1b]0;pwned\\x07" in listed
    # JSON output keeps the exact text.
    exact = json.loads(run_cli("item", "list", "--format", "json").output)
    assert exact[0]["title"] == OSC_TITLE
    shown = json.loads(run_cli("item", "show", ref, "--format", "json").output)
    assert shown["activity"][1]["body"] == "body \x1b]52;c;aGk=\x07 end"


def test_item_show_prints_an_item_with_its_comments_whole(run_cli, write_config) -> None:
    write_config()
    ref = run_cli("item", "open", "Long one", "--body", "the body").output.strip()
    long = "x" * 50_000 + " END"
    run_cli("item", "comment", ref, long)
    out = run_cli("item", "show", ref)
    assert out.exit_code == 0, out.output
    assert "title: Long one" in out.output
    assert long in out.output
    data = json.loads(run_cli("item", "show", ref, "--format", "json").output)
    assert [a["kind"] for a in data["activity"]] == ["opened", "comment"]
    missing = run_cli("item", "show", "local:loop#99")
    assert missing.exit_code == 2
    assert "no local item local:loop#99" in missing.output


def test_a_poisoned_row_is_quarantined_everywhere_and_reset_clears_it(
    run_cli, write_config, isolated
) -> None:
    write_config()
    run_cli("item", "open", "fine")
    bad = "github:acme/widgets#" + "9" * 20
    store = Store.open(isolated / "state")
    now = "2026-01-01T00:00:00+00:00"
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO sessions(" + _SESSION_COLUMNS + ") VALUES (?,?,?,?,?,?,?,?,?)",
            (bad, "gh_x", "loop-gh_x", "generic", None, "/", "active", now, now),
        )
    store.close()
    status = run_cli("status")
    assert "Traceback" not in status.output
    assert f"quarantined sessions row '{bad}'" in status.output
    assert "the-loop sessions reset" in status.output
    listed = run_cli("sessions", "list")
    assert listed.exit_code == 0, listed.output
    assert f"quarantined sessions row '{bad}'" in listed.output
    assert run_cli("poll", "--once").exit_code in (0, 1)  # the poller runs on
    reset = run_cli("sessions", "reset", bad)
    assert reset.exit_code == 0, reset.output
    assert "forgotten" in reset.output
    assert "quarantined" not in run_cli("status").output
