"""The launcher: argv building, layering, and exec for real (same pid, values off argv)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from envstate_support import (
    CLI,
    Children,
    cmdline,
    needs_proc,
    run_cli,
    unreadable_file,
    wait_for_exec,
    write_env,
)

from loop_envstate import fingerprint, launcher_argv, process_environ
from loop_envstate.cli import plain_exec
from loop_envstate.cli_args import read_command_line
from loop_envstate.launcher import layered, parse_set


def _fake_python(directory: Path, with_script: bool) -> str:
    directory.mkdir()
    python = directory / "python"
    python.write_text("#!/bin/sh\n")
    if with_script:
        script = directory / "loop-envstate"
        script.write_text("#!/bin/sh\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(python)


def test_launcher_argv_prefers_the_script_beside_python(tmp_path: Path) -> None:
    python = _fake_python(tmp_path / "bin", with_script=True)
    argv = launcher_argv(
        "/etc/the.env", {"THE_LOOP_WORK_ITEM": "local:x#1"}, ["claude", "-p"], python
    )
    assert argv == [
        str(tmp_path / "bin" / "loop-envstate"),
        "exec",
        "/etc/the.env",
        "--set",
        "THE_LOOP_WORK_ITEM=local:x#1",
        "--",
        "claude",
        "-p",
    ]


def test_launcher_argv_uses_path_then_python_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _fake_python(tmp_path / "venv", with_script=False)
    on_path = tmp_path / "path"
    _fake_python(on_path, with_script=True)
    monkeypatch.setenv("PATH", str(on_path))
    assert launcher_argv(Path("f.env"), {}, ["prog"], python)[:3] == [
        str(on_path / "loop-envstate"),
        "exec",
        "f.env",
    ]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert launcher_argv("f.env", {}, ["prog", "--x"], python) == [
        python,
        "-m",
        "loop_envstate",
        "exec",
        "f.env",
        "--",
        "prog",
        "--x",
    ]


@pytest.mark.parametrize("name", ["", "A=B", "A B", "A\0"])
def test_launcher_argv_refuses_unusable_names(name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        launcher_argv("f.env", {name: "v"}, ["prog"])


def test_launcher_argv_needs_a_command() -> None:
    with pytest.raises(ValueError, match="command"):
        launcher_argv("f.env", {}, [])


def test_layering_order() -> None:
    env = layered(
        {"A": "inherited", "B": "inherited", "C": "inherited"},
        {"B": "file", "C": "file", "D": "file"},
        {"C": "set", "E": "set"},
    )
    assert env == {"A": "inherited", "B": "file", "C": "set", "D": "file", "E": "set"}


def test_parse_set() -> None:
    assert parse_set("A=b=c") == ("A", "b=c")
    assert parse_set("A=") == ("A", "")
    for bad in ("novalue", "=secret-looking", "A B=x"):
        with pytest.raises(ValueError) as caught:
            parse_set(bad)
        assert bad not in str(caught.value)


@needs_proc
def test_exec_keeps_the_pid_layers_values_and_keeps_them_off_argv(
    tmp_path: Path, children: Children, clean_env: dict[str, str]
) -> None:
    env_file = write_env(
        tmp_path / ".env",
        "FROM_FILE=file-value-7f1c\nOVERRIDDEN=file-loses-9a2b\nINHERITED=file-wins-3c4d\n",
    )
    inherited = dict(clean_env, INHERITED="inherited-loses-5e6f", ONLY_INHERITED="kept-1a2b")
    argv = [*CLI, "exec", str(env_file), "--set", "OVERRIDDEN=set-wins-8d9e", "--", "sleep", "30"]
    child = children(argv, env=inherited)
    wait_for_exec(child.pid, b"sleep")  # the same pid now runs sleep: exec, not fork

    env = process_environ(child.pid)
    assert env is not None
    assert env["FROM_FILE"] == "file-value-7f1c"
    assert env["INHERITED"] == "file-wins-3c4d"
    assert env["OVERRIDDEN"] == "set-wins-8d9e"
    assert env["ONLY_INHERITED"] == "kept-1a2b"
    argv_now = b"\0".join(cmdline(child.pid))
    assert argv_now == b"sleep\x0030"
    for value in ("file-value-7f1c", "file-wins-3c4d", "set-wins-8d9e", "file-loses-9a2b"):
        assert value.encode() not in argv_now


@needs_proc
@pytest.mark.parametrize("with_file", [True, False])
def test_exec_with_keep_builds_the_environment_from_nothing(
    tmp_path: Path, children: Children, clean_env: dict[str, str], with_file: bool
) -> None:
    """Issue 21: with --keep, only the kept inherited names (PREFIX* for a prefix), the
    file and --set reach CMD; whatever else the caller (a tmux server) holds does not."""
    env_file = write_env(tmp_path / ".env", "FROM_FILE=file-value-2b3c\nKEPT=file-wins-4d5e\n")
    inherited = dict(
        clean_env,
        GITHUB_TOKEN="ghp_inheritedTokenNeverKept0123",
        MY_SECRET="never-kept-6f7a",
        KEPT="inherited-1a2b",
        LC_TIME="C",
        LCX="not-a-prefix-match",
    )
    argv = [*CLI, "exec", *([str(env_file)] if with_file else [])]
    argv += ["--keep", "PATH", "--keep", "KEPT", "--keep=LC_*", "--set", "OWN=set-8e9f"]
    child = children([*argv, "--", "sleep", "30"], env=inherited)
    wait_for_exec(child.pid, b"sleep")

    env = process_environ(child.pid)
    assert env is not None
    expected = {"PATH": clean_env["PATH"], "LC_TIME": "C", "OWN": "set-8e9f"}
    if with_file:
        expected |= {"FROM_FILE": "file-value-2b3c", "KEPT": "file-wins-4d5e"}
    else:
        expected |= {"KEPT": "inherited-1a2b"}
    assert env == expected


def test_launcher_argv_with_keep_and_no_file() -> None:
    argv = launcher_argv(None, {"A": "1"}, ["cmd"], keep=["PATH", "LC_*"])
    cut = argv.index("--")
    assert argv[argv.index("exec") + 1 : cut] == [
        "--keep",
        "PATH",
        "--keep",
        "LC_*",
        "--set",
        "A=1",
    ]
    with pytest.raises(ValueError, match="env file, or names to keep"):
        launcher_argv(None, {}, ["cmd"])
    with pytest.raises(ValueError, match="name to keep"):
        launcher_argv(None, {}, ["cmd"], keep=["A*B"])


def test_exec_bad_keep_is_2_and_nothing_runs(tmp_path: Path, clean_env: dict[str, str]) -> None:
    marker = tmp_path / "ran"
    done = run_cli("exec", "--keep", "A=B", "--", "touch", str(marker), env=clean_env)
    assert done.returncode == 2
    assert "--keep" in done.stderr
    assert not marker.exists()


@needs_proc
def test_exec_leaves_no_signal_ignored_that_python_ignored(
    tmp_path: Path, children: Children, clean_env: dict[str, str]
) -> None:
    env_file = write_env(tmp_path / ".env", "A=1\n")
    child = children([*CLI, "exec", str(env_file), "--", "sleep", "30"], env=clean_env)
    wait_for_exec(child.pid, b"sleep")
    status = Path(f"/proc/{child.pid}/status").read_text()
    ignored = int(
        next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16
    )
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), f"{sig.name} left ignored for the program"


@needs_proc
def test_the_built_launcher_command_runs(
    tmp_path: Path, children: Children, clean_env: dict[str, str]
) -> None:
    env_file = write_env(tmp_path / ".env", "TOKEN=built-9f8e\n")
    report = tmp_path / "report.txt"
    program = [
        sys.executable,
        "-c",
        "import os,sys,hashlib;"
        "open(sys.argv[1],'w').write(hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest()[:12]"
        "+' '+os.environ['ITEM'])",
        str(report),
    ]
    argv = launcher_argv(env_file, {"ITEM": "local:demo#1"}, program)
    done = subprocess.run(argv, env=clean_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert report.read_text() == f"{fingerprint('built-9f8e')} local:demo#1"


def test_exec_missing_file_does_not_start_the_command(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    marker = tmp_path / "started"
    done = run_cli("exec", str(tmp_path / "gone.env"), "--", "touch", str(marker), env=clean_env)
    assert done.returncode == 2
    assert not marker.exists()
    assert done.stderr.count("\n") == 1
    assert "gone.env" in done.stderr
    assert "does not exist" in done.stderr


def test_exec_unreadable_file_does_not_start_the_command(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    locked = unreadable_file(tmp_path)
    marker = tmp_path / "started"
    done = run_cli("exec", str(locked), "--", "touch", str(marker), env=clean_env)
    assert done.returncode == 2
    assert not marker.exists()
    assert done.stderr == f"loop-envstate: env file {locked}: permission denied\n"


def test_exec_malformed_lines_are_reported_and_the_command_runs(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    env_file = write_env(tmp_path / ".env", "GOOD=1\nthis line is broken\nALSO=2\n'X=Y'=3\n")
    marker = tmp_path / "started"
    done = run_cli("exec", str(env_file), "--", "touch", str(marker), env=clean_env)
    assert done.returncode == 0
    assert marker.exists()
    assert "malformed lines ignored: 2, 4" in done.stderr
    assert "broken" not in done.stderr


def test_exec_command_not_found_is_127(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env_file = write_env(tmp_path / ".env", "A=1\n")
    done = run_cli("exec", str(env_file), "--", "no-such-program-4711", "arg", env=clean_env)
    assert done.returncode == 127
    assert done.stderr.strip() == "loop-envstate exec: command not found: no-such-program-4711"


@pytest.mark.parametrize(
    ("program", "code", "message"),
    [
        ("no\nsuch-4711", 127, "command not found: no\\nsuch-4711"),
        ("", 126, "cannot run '': invalid argument"),
    ],
    ids=["newline", "empty"],
)
def test_exec_odd_program_names_give_one_line(
    tmp_path: Path, clean_env: dict[str, str], program: str, code: int, message: str
) -> None:
    env_file = write_env(tmp_path / ".env", "A=1\n")
    done = run_cli("exec", str(env_file), "--", program, env=clean_env)
    assert (done.returncode, done.stderr) == (code, f"loop-envstate exec: {message}\n")


def test_exec_command_not_runnable_is_126(tmp_path: Path, clean_env: dict[str, str]) -> None:
    env_file = write_env(tmp_path / ".env", "A=1\n")
    not_executable = tmp_path / "script.sh"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(0o644)
    done = run_cli("exec", str(env_file), "--", str(not_executable), env=clean_env)
    assert done.returncode == 126
    assert "cannot run" in done.stderr
    assert "Traceback" not in done.stderr


def test_exec_finds_the_command_on_the_path_the_file_sets(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    tool = tools / "only-here"
    tool.write_text("#!/bin/sh\nexit 7\n")
    tool.chmod(0o755)
    env_file = write_env(tmp_path / ".env", f"PATH={tools}{os.pathsep}{clean_env['PATH']}\n")
    done = run_cli("exec", str(env_file), "--", "only-here", env=clean_env)
    assert done.returncode == 7


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "{file}", "true"],  # no --
        ["exec", "{file}", "--"],  # nothing after --
        ["exec", "--", "true"],  # no FILE
        ["exec", "{file}", "--set", "novalue", "--", "true"],
        ["exec", "{file}", "--set", "=x", "--", "true"],
        ["exec", "{file}", "stray", "--", "true"],
    ],
    ids=["no-separator", "no-command", "no-file", "set-without-equals", "set-empty-name", "stray"],
)
def test_exec_bad_usage_is_2_and_nothing_runs(
    tmp_path: Path, clean_env: dict[str, str], args: list[str]
) -> None:
    env_file = write_env(tmp_path / ".env", "A=1\n")
    done = run_cli(*[a.replace("{file}", str(env_file)) for a in args], env=clean_env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


# -- the plain exec line is read without argparse; both ways agree -------------------

PLAIN_LINES = [
    (["exec", "f.env", "--", "cmd"], ("f.env", [], ["cmd"])),
    (
        ["exec", "f.env", "--", "cmd", "--set", "X=1", "--"],
        ("f.env", [], ["cmd", "--set", "X=1", "--"]),
    ),
    (["exec", "--set", "A=1", "f.env", "--", "c"], ("f.env", ["A=1"], ["c"])),
    (
        ["exec", "f.env", "--set=A=1", "--set", "B=x=y", "--", "c"],
        ("f.env", ["A=1", "B=x=y"], ["c"]),
    ),
    (["exec", "f.env", "--set", "", "--", "c"], ("f.env", [""], ["c"])),
    (["exec", "f.env", "--"], ("f.env", [], [])),
]


@pytest.mark.parametrize(("args", "expected"), PLAIN_LINES)
def test_plain_exec_line_reads_as_argparse_reads_it(
    args: list[str], expected: tuple[str, list[str], list[str]]
) -> None:
    assert plain_exec(args) == expected
    ns, command = read_command_line(args)
    assert (ns.file, ns.sets, command) == expected


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "f.env", "--set", "-x", "--", "c"],  # argparse: --set needs a value
        ["exec", "f.env", "--set", "--", "c"],
        ["exec", "-h", "--", "c"],
        ["exec", "f.env", "stray", "--", "c"],
        ["exec", "--", "c"],
        ["exec", "--sett=A=1", "f.env", "--", "c"],
        ["exec", "-", "--", "c"],  # argparse reads "-" as FILE; let it decide
        ["exec", "f.env", "c"],
        ["check", "f.env", "--", "1"],
    ],
)
def test_other_lines_are_left_to_argparse(args: list[str]) -> None:
    assert plain_exec(args) is None


@needs_proc
def test_the_launcher_loads_neither_argparse_nor_dotenv_main(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The plain launcher line skips what only the audit commands need (start-up cost)."""
    env_file = write_env(tmp_path / ".env", "A=1\n")
    argv = [sys.executable, "-X", "importtime", "-m", "loop_envstate", "exec", str(env_file)]
    done = subprocess.run(
        [*argv, "--set", "B=2", "--", "true"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "loop_envstate.envfile" in imported  # the import log is really there
    unwanted = {"argparse", "loop_envstate.cli_args", "loop_envstate.audit", "pathlib"}
    unwanted |= {"dotenv", "dotenv.main", "logging", "tempfile"}
    assert unwanted & imported == set()
