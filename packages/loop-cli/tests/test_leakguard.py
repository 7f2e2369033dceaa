"""The session-wide process guard (leakguard.py), run on small suites of its own in a
real pytest subprocess: a daemon a test leaves running fails the run and is ended; a
process the run did not start is never flagged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil

GUARD_DIR = Path(__file__).parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(GUARD_DIR)!r})
import leakguard
leakguard.register(globals())
"""


def _suite(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_it.py").write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "LOOP_TEST_RUN"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _sleepers(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if tag in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_a_daemon_left_running_fails_the_run_and_is_ended(tmp_path: Path) -> None:
    tag = f"{os.getpid()}{uuid.uuid4().int % 10**9}"
    done = _suite(
        tmp_path,
        f"""
        import subprocess

        def test_leaves_a_child_and_an_orphan(tmp_path):
            # A child of pytest, and one reparented to init (double fork) in our tmp dir.
            subprocess.Popen(["sleep", "300.{tag}1"], start_new_session=True)
            subprocess.run(
                ["sh", "-c", "sleep 300.{tag}2 >/dev/null 2>&1 &"], cwd=tmp_path, check=True
            )
        """,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "2 process(es) started by this test run outlived it" in done.stdout
    assert f"sleep 300.{tag}1" in done.stdout
    assert f"sleep 300.{tag}2" in done.stdout
    assert _sleepers(f"300.{tag}") == []  # the guard ended them


def test_a_clean_run_passes_and_a_process_it_did_not_start_is_never_flagged(
    tmp_path: Path,
) -> None:
    tag = f"{os.getpid()}{uuid.uuid4().int % 10**9}"
    # Started before the inner run, with a look-alike marker: not the inner run's.
    outsider = subprocess.Popen(
        ["sleep", f"300.{tag}0"],
        env={**os.environ, "LOOP_TEST_RUN": "someone-else"},
        start_new_session=True,
    )
    try:
        done = _suite(
            tmp_path,
            f"""
            import subprocess

            def test_stops_what_it_starts():
                proc = subprocess.Popen(["sleep", "300.{tag}3"])
                proc.terminate()
                proc.wait()
            """,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "outlived it" not in done.stdout
        assert outsider.poll() is None  # untouched
    finally:
        outsider.send_signal(signal.SIGKILL)
        outsider.wait()
