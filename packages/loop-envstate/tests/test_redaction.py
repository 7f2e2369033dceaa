"""Every command, on success and failure, prints fingerprints and never a value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from envstate_support import CLI, Children, needs_proc, run_cli, wait_for_exec

from loop_envstate import fingerprint

FILE_VALUES = {
    "API_TOKEN": "ghp_FILEVALUE_q8Zr3LmT0xW2",
    "DB_URL": "postgres://admin:FILEVALUE_pw_7Hk2@db/prod",
    "UNICODE": "FILEVALUE_ünïcødé_✓_x9",
    "MULTI": "FILEVALUE_line1\nFILEVALUE_line2_k3",
}
PROCESS_VALUES = {"API_TOKEN": "ghp_PROCVALUE_old_Yt5Qe1"}
MALFORMED_SECRET = "FILEVALUE_in_a_broken_line_Zq4"
SET_VALUE = "SETVALUE_item_Vb8"


def _env_text() -> str:
    return (
        f"API_TOKEN={FILE_VALUES['API_TOKEN']}\n"
        f"export DB_URL='{FILE_VALUES['DB_URL']}'\n"
        f'UNICODE="{FILE_VALUES["UNICODE"]}"\n'
        'MULTI="FILEVALUE_line1\\nFILEVALUE_line2_k3"\n'
        f"this is broken {MALFORMED_SECRET}\n"
        f'UNTERMINATED="{MALFORMED_SECRET}\n'
    )


def _secrets() -> list[str]:
    pieces = [*FILE_VALUES.values(), *PROCESS_VALUES.values(), MALFORMED_SECRET, SET_VALUE]
    pieces += ["FILEVALUE_line1", "FILEVALUE_line2_k3"]
    return pieces


@needs_proc
def test_no_value_in_any_output_or_file(
    tmp_path: Path, children: Children, clean_env: dict[str, str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env_file = tmp_path / "secrets.env"
    env_file.write_text(_env_text(), encoding="utf-8")

    holder = children(["env", "-i", *(f"{k}={v}" for k, v in FILE_VALUES.items()), "sleep", "30"])
    stale = children(["env", "-i", f"API_TOKEN={PROCESS_VALUES['API_TOKEN']}", "sleep", "30"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    for child in (holder, stale):
        wait_for_exec(child.pid, b"sleep")
    pids = [str(holder.pid), str(stale.pid), str(gone.pid)]
    f = str(env_file)

    runs: list[tuple[list[str], int]] = [
        (["fingerprint", f], 0),
        (["fingerprint", f, "--json"], 0),
        (["check", f, *pids], 1),
        (["check", f, *pids, "--json"], 1),
        (["check", f, *pids, "--strict", "--json"], 1),
        (["check", f, str(holder.pid)], 0),
        (["exec", f, "--set", f"ITEM={SET_VALUE}", "--", "true"], 0),
        (["exec", f, "--", "no-such-program-redaction"], 127),
        # A value typed where it does not belong must not be echoed back.
        (["exec", f, FILE_VALUES["API_TOKEN"], "--", "true"], 2),
        (["exec", f, "--set", f"={SET_VALUE}", "--", "true"], 2),
        (["exec", f, "--set", FILE_VALUES["API_TOKEN"], "--", "true"], 2),
        (["check", f, "1", FILE_VALUES["API_TOKEN"]], 2),
        ([FILE_VALUES["API_TOKEN"], f], 2),
    ]
    outputs: list[str] = []
    for args, expected in runs:
        done = run_cli(*args, env=clean_env, cwd=work)
        assert done.returncode == expected, (args[0], done.returncode)
        outputs += [done.stdout, done.stderr]

    # The exec'd program's own argv: the launcher leaves no value there either.
    sleeper = children(
        [*CLI, "exec", f, "--set", f"ITEM={SET_VALUE}", "--", "sleep", "30"],
        env=clean_env,
        cwd=work,
    )
    wait_for_exec(sleeper.pid, b"sleep")
    outputs.append(Path(f"/proc/{sleeper.pid}/cmdline").read_bytes().decode("utf-8", "replace"))

    written = [p.read_text("utf-8", "replace") for p in work.rglob("*") if p.is_file()]
    everything = "\n".join(outputs + written)
    # Compare by index so a failure report does not print the value either.
    leaked = [i for i, secret in enumerate(_secrets()) if secret in everything]
    assert leaked == []
    # Not vacuous: the outputs do carry the fingerprints of those values.
    assert fingerprint(FILE_VALUES["API_TOKEN"]) in everything
    assert fingerprint(PROCESS_VALUES["API_TOKEN"]) in everything
    assert fingerprint(FILE_VALUES["MULTI"]) in everything
