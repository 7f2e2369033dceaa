"""`env doctor` and `sessions restart` as commands: refusals, exit codes, rendering."""

from __future__ import annotations

import json

from click.testing import CliRunner

from loop_cli.commands.env import render_text as render_doctor
from loop_cli.commands.restart import as_json, render_text
from loop_cli.main import cli
from loop_cli.rotation.doctor import DoctorReport, DoctorRow
from loop_cli.rotation.drift import NameDrift
from loop_cli.rotation.restart import Outcome, Rollout, Row


def invoke(tmp_path, config: str, *args: str):
    path = tmp_path / "config.yaml"
    path.write_text(config + f"\nstateDir: {tmp_path / 'state'}\n")
    return CliRunner().invoke(cli, ["--config", str(path), *args])


def test_restart_without_selection_names_both_ways(tmp_path):
    result = invoke(tmp_path, "", "sessions", "restart")
    assert result.exit_code == 2
    assert "--all" in result.output
    assert "ref" in result.output


def test_restart_and_doctor_without_env_file_name_the_key(tmp_path):
    result = invoke(tmp_path, "", "sessions", "restart", "--all")
    assert result.exit_code == 2, result.output
    assert "env.file" in result.output
    assert "Traceback" not in result.output
    # The doctor still checks the daemon's credentials; it says the file is not set.
    doctor = invoke(tmp_path, "", "env", "doctor")
    assert doctor.exit_code == 0, doctor.output
    assert "env file: none configured (key env.file)" in doctor.output
    assert "daemon credentials:" in doctor.output


def test_restart_with_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "rotated.env"
    result = invoke(tmp_path, f"env:\n  file: {missing}", "sessions", "restart", "--all")
    assert result.exit_code == 2
    assert str(missing) in result.output


def test_restart_rejects_a_bad_ref(tmp_path):
    result = invoke(tmp_path, "", "sessions", "restart", "jira:ABC-1")
    assert result.exit_code == 2
    assert "jira:ABC-1" in result.output


def test_restart_text_and_json_rendering(tmp_path):
    from loop_envstate import parse_text

    env = parse_text("TOKEN=new\nbroken\n", tmp_path / "app.env")
    rows = [
        Row("local:p#1", "loop-local_p_1", Outcome.RESTARTED, "resumed"),
        Row(
            "local:p#2",
            "loop-local_p_2",
            Outcome.VERIFIED_STALE,
            "still differs: TOKEN",
            (NameDrift("TOKEN", "aaaaaaaaaaaa", "bbbbbbbbbbbb"),),
        ),
        Row("local:p#3", None, Outcome.SKIPPED_UNREGISTERED, "no active session registered"),
    ]
    text = render_text(rows, env, dry_run=False)
    assert "TOKEN (file aaaaaaaaaaaa, process bbbbbbbbbbbb)" in text
    assert "summary: 1 restarted, 1 verified-stale, 1 skipped-unregistered" in text
    data = as_json(rows, env, False, False, 1, Rollout(wait_idle=30, max_parallel=4))
    assert data["malformedLines"] == [2]
    assert (data["waitIdle"], data["busy"], data["maxParallel"]) == (30, "skip", 4)
    assert [r["outcome"] for r in data["rows"]] == [
        "restarted",
        "verified-stale",
        "skipped-unregistered",
    ]
    json.dumps(data)


def test_doctor_marks_old_values():
    report = DoctorReport(
        "/x/app.env",
        (
            DoctorRow(
                "TOKEN",
                "aaaaaaaaaaaa",
                "unset",
                "bbbbbbbbbbbb",
                {"aaaaaaaaaaaa": 2, "bbbbbbbbbbbb": 1},
            ),
        ),
        (),
        None,
        True,
        3,
        0,
    )
    text = render_doctor(report)
    assert "bbbbbbbbbbbb (OLD)" in text
    assert "2 x aaaaaaaaaaaa (file), 1 x bbbbbbbbbbbb (OLD)" in text


def test_doctor_without_a_tmux_server_says_so_not_unset():
    row = DoctorRow("TOKEN", "aaaaaaaaaaaa", "unset", "unset", {})
    report = DoctorReport("/x/app.env", (row,), (), None, False, 0, 0)
    text = render_doctor(report)
    assert "TOKEN  aaaaaaaaaaaa  unset         no server    -" in text
    assert "tmux global environment: no tmux server running" in text


def test_doctor_names_malformed_lines_by_number_not_as_a_count():
    """`malformed lines ignored: 3` reads as "three lines"; it is line 3."""
    row = DoctorRow("TOKEN", "aaaaaaaaaaaa", "unset", "unset", {})
    text = render_doctor(DoctorReport("/x/app.env", (row,), (3, 7), None, False, 0, 0))
    assert "malformed lines ignored: line 3, line 7 (the valid names are used)" in text
