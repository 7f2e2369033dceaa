"""Every exit code of the audit commands, the JSON shapes, and one-line errors."""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from envstate_support import Children, needs_proc, run_cli, wait_for_exec, write_env

from loop_envstate import fingerprint
from loop_envstate.cli import main


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return write_env(tmp_path / "app.env", "TOKEN=tok-1\nURL=http://x\nnot a binding\n")


@pytest.fixture
def matching(children: Children, env_file: Path) -> int:
    child = children(["env", "-i", "TOKEN=tok-1", "URL=http://x", "EXTRA=1", "sleep", "30"])
    wait_for_exec(child.pid, b"sleep")
    return child.pid


@pytest.fixture
def drifting(children: Children) -> int:
    child = children(["env", "-i", "TOKEN=tok-0", "sleep", "30"])
    wait_for_exec(child.pid, b"sleep")
    return child.pid


@pytest.fixture
def exited() -> int:
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def test_fingerprint_text(env_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fingerprint", str(env_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"TOKEN  {fingerprint('tok-1')}",
        f"URL    {fingerprint('http://x')}",
        "malformed lines: 3",
    ]


def test_fingerprint_json_shape(env_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fingerprint", str(env_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {
        "file": str(env_file),
        "fingerprintLength": 12,
        "fingerprints": {"TOKEN": fingerprint("tok-1"), "URL": fingerprint("http://x")},
        "malformed": [3],
    }


def test_fingerprint_of_an_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = write_env(tmp_path / "empty.env", "")
    assert main(["fingerprint", str(empty)]) == 0
    assert "declares no names" in capsys.readouterr().out


@needs_proc
def test_check_all_match_is_0(
    env_file: Path, matching: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(env_file), str(matching)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f"{matching}  match",
        "summary: 1 match, 0 drift, 0 unverified",
    ]
    assert "malformed lines ignored: 3" in captured.err
    assert main(["check", str(env_file), "--", str(matching)]) == 0  # `--` before pids


@needs_proc
def test_check_drift_is_1_and_names_both_fingerprints(
    env_file: Path, matching: int, drifting: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(env_file), str(matching), str(drifting)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{matching}  match",
        f"{drifting}  drift  TOKEN  file={fingerprint('tok-1')}  process={fingerprint('tok-0')}",
        f"{drifting}  drift  URL  file={fingerprint('http://x')}  process=unset",
        "summary: 1 match, 1 drift, 0 unverified",
    ]


@needs_proc
def test_check_unverified_alone_is_0_unless_strict(
    env_file: Path, matching: int, exited: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(env_file), str(matching), str(exited)]) == 0
    assert f"{exited}  unverified" in capsys.readouterr().out
    assert main(["check", str(env_file), str(matching), str(exited), "--strict"]) == 1


@needs_proc
def test_check_json_shape(
    env_file: Path, matching: int, drifting: int, exited: int, capsys: pytest.CaptureFixture[str]
) -> None:
    pids = [str(matching), str(drifting), str(exited)]
    assert main(["check", str(env_file), *pids, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data == {
        "file": str(env_file),
        "fingerprintLength": 12,
        "malformed": [3],
        "strict": False,
        "results": [
            {"pid": matching, "status": "match", "drift": []},
            {
                "pid": drifting,
                "status": "drift",
                "drift": [
                    {
                        "name": "TOKEN",
                        "file": fingerprint("tok-1"),
                        "process": fingerprint("tok-0"),
                    },
                    {"name": "URL", "file": fingerprint("http://x"), "process": None},
                ],
            },
            {"pid": exited, "status": "unverified", "drift": []},
        ],
        "summary": {"match": 1, "drift": 1, "unverified": 1},
        "exitCode": 1,
    }


def test_check_json_strict_exit_code_field(
    env_file: Path, exited: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(env_file), str(exited), "--json", "--strict"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert (data["strict"], data["exitCode"], data["summary"]["unverified"]) == (True, 1, 1)


def _bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    good = write_env(tmp_path / "good.env", "A=1\n")
    binary = tmp_path / "binary.env"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00garbage")
    huge = tmp_path / "huge.env"
    with huge.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    undecodable = tmp_path / "latin1.env"
    undecodable.write_bytes(b"A=caf\xe9\n")
    return {
        "no-command": [],
        "unknown-command": ["frobnicate"],
        "fingerprint-missing": ["fingerprint", str(tmp_path / "missing.env")],
        "fingerprint-directory": ["fingerprint", str(tmp_path)],
        "fingerprint-binary": ["fingerprint", str(binary)],
        "fingerprint-50mb": ["fingerprint", str(huge)],
        "fingerprint-undecodable": ["fingerprint", str(undecodable)],
        "fingerprint-no-file": ["fingerprint"],
        "fingerprint-empty-path": ["fingerprint", ""],
        "check-missing": ["check", str(tmp_path / "missing.env"), str(os.getpid())],
        "check-directory": ["check", str(tmp_path), str(os.getpid())],
        "check-binary": ["check", str(binary), str(os.getpid())],
        "check-50mb": ["check", str(huge), "1"],
        "check-no-pid": ["check", str(good)],
        "check-pid-not-a-number": ["check", str(good), "12abc"],
        "check-negative-pid": ["check", str(good), "-5"],
        "check-zero-pid": ["check", str(good), "0"],
        "check-unknown-option": ["check", str(good), "1", "--frob"],
        "exec-directory": ["exec", str(tmp_path), "--", "true"],
        "exec-binary": ["exec", str(binary), "--", "true"],
        "exec-50mb": ["exec", str(huge), "--", "true"],
    }


@pytest.mark.parametrize(
    "case",
    [
        "no-command",
        "unknown-command",
        "fingerprint-missing",
        "fingerprint-directory",
        "fingerprint-binary",
        "fingerprint-50mb",
        "fingerprint-undecodable",
        "fingerprint-no-file",
        "fingerprint-empty-path",
        "check-missing",
        "check-directory",
        "check-binary",
        "check-50mb",
        "check-no-pid",
        "check-pid-not-a-number",
        "check-negative-pid",
        "check-zero-pid",
        "check-unknown-option",
        "exec-directory",
        "exec-binary",
        "exec-50mb",
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(tmp_path: Path, case: str) -> None:
    args = _bad_inputs(tmp_path)[case]
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.endswith("\n")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("loop-envstate")


def test_help_and_version_exit_0() -> None:
    for args in (["--help"], ["check", "--help"], ["exec", "--help"], ["--version"]):
        done = run_cli(*args)
        assert done.returncode == 0, args
        assert "loop-envstate" in done.stdout
    # The installed metadata's version is the one hatch read from __version__.
    assert run_cli("--version").stdout.strip() == f"loop-envstate {version('loop-envstate')}"


def test_console_script_is_installed_and_runs(tmp_path: Path) -> None:
    import subprocess

    script = Path(sys.executable).parent / "loop-envstate"
    if not script.exists():
        pytest.skip("console script not installed beside this interpreter")
    env_file = write_env(tmp_path / "a.env", "A=1\n")
    done = subprocess.run(
        [str(script), "fingerprint", str(env_file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"A  {fingerprint('1')}"


@pytest.mark.parametrize("flag", [["-o", "json"], ["--output", "json"], ["--output=json"]])
def test_output_json_is_the_json_flag(
    env_file: Path, flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fingerprint", str(env_file), "--json"]) == 0
    expected = capsys.readouterr().out
    assert main(["fingerprint", *flag, str(env_file)]) == 0
    assert capsys.readouterr().out == expected
    json.loads(expected)


def test_output_refuses_an_unknown_format(
    env_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fingerprint", str(env_file), "-o", "yaml"]) == 2
    assert "-o/--output must be text or json" in capsys.readouterr().err
