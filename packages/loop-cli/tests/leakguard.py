"""A session-wide guard: a process the test run started must not outlive it.

Shared by loop-cli's tests and the integration tests (each conftest registers
`pytest_sessionstart` / `pytest_sessionfinish` from here). A daemon a test forgot to
stop keeps running after a green run, reparented to init, still holding its port,
its tmux server and its store; this makes that run fail, names each process, and ends
it.

A process counts as the run's only when it was created after the run started and at
least one of these holds, so a process the run did not start is never flagged:

- it descends from the pytest process;
- its environment carries this run's unique marker (`LOOP_TEST_RUN`, set at the start
  and inherited by everything a test starts with an inherited environment);
- its working directory or an environment value lies under this run's temporary
  directory (pytest's basetemp, unique per run);
- its command line names a private tmux socket of this run (`loop-test-...-PID-...`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass

import psutil
import pytest

__all__ = ["MARKER", "leaked", "register", "session_finish", "session_start"]

MARKER = "LOOP_TEST_RUN"
GRACE_SECONDS = 5.0  # a process told to stop at teardown may take a moment to go


@dataclass
class _Run:
    token: str
    started: float
    basetemp: str
    socket: re.Pattern[str]


_RUN: _Run | None = None


def session_start(session: pytest.Session) -> None:
    """Note this run: its marker (exported), its start time, its temporary directory."""
    global _RUN
    token = uuid.uuid4().hex
    os.environ[MARKER] = token
    basetemp = str(session.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    pid = os.getpid()
    _RUN = _Run(
        token=token,
        started=psutil.Process().create_time(),
        basetemp=basetemp.rstrip("/") + "/",
        socket=re.compile(rf"\bloop-test-(?:[a-z]+-)*{pid}-[0-9a-f]+\b"),
    )


def _ours(proc: psutil.Process, run: _Run, family: set[int]) -> str | None:
    """Why `proc` belongs to this run, or None (also when it cannot be read)."""
    try:
        if proc.create_time() < run.started or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if proc.pid in family:
            return "a descendant of the pytest process"
        cmdline = " ".join(proc.cmdline())
        if run.socket.search(cmdline):
            return "names a private tmux socket of this run"
        try:
            environ = proc.environ()
        except (psutil.AccessDenied, psutil.ZombieProcess):
            environ = {}
        if environ.get(MARKER) == run.token:
            return f"carries this run's {MARKER}"
        if any(v.startswith(run.basetemp) for v in environ.values()):
            return "its environment names this run's temporary directory"
        try:
            cwd = proc.cwd()
        except (psutil.AccessDenied, psutil.ZombieProcess):
            cwd = ""
        if (cwd.rstrip("/") + "/").startswith(run.basetemp):
            return "runs in this run's temporary directory"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return None


def leaked() -> list[tuple[psutil.Process, str]]:
    """The run's processes still running now, with why each is the run's."""
    run = _RUN
    if run is None:
        return []
    me = psutil.Process()
    family = {p.pid for p in me.children(recursive=True)}
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me.pid:
            continue
        why = _ours(proc, run, family)
        if why is not None:
            found.append((proc, why))
    return found


def _describe(proc: psutil.Process) -> str:
    try:
        cmdline = " ".join(proc.cmdline())[:200]
    except psutil.Error:
        cmdline = "?"
    return f"pid {proc.pid}: {cmdline}"


def session_finish(session: pytest.Session) -> None:
    """Fail the run when a process it started is still running; end those processes."""
    deadline = time.monotonic() + GRACE_SECONDS
    found = leaked()
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = leaked()
    if not found:
        return
    lines = [f"{len(found)} process(es) started by this test run outlived it:"]
    lines += [f"  {_describe(proc)} ({why})" for proc, why in found]
    lines.append("  (ended now with SIGKILL; stop them in the fixture or test that starts them)")
    for proc, _ in found:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    text = "\n".join(lines)
    if reporter is not None:
        reporter.write_line(text, red=True, bold=True)
    else:  # pragma: no cover - pytest always has one unless -p no:terminal
        print(text)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def register(namespace: dict[str, object]) -> None:
    """Install the two hooks in a conftest's namespace (`register(globals())`)."""

    def pytest_sessionstart(session: pytest.Session) -> None:
        session_start(session)

    def pytest_sessionfinish(session: pytest.Session) -> None:
        session_finish(session)

    namespace["pytest_sessionstart"] = pytest_sessionstart
    namespace["pytest_sessionfinish"] = pytest_sessionfinish
