"""Env rotation end to end: real tmux on a private socket, the real `the-loop` command,
the fake harness, a real loopback HTTP server standing in for Slack.

The story: sessions run on a token; the operator rotates it in the env file; status
says which sessions are stale; `sessions restart --all` rolls them, each resuming its
own conversation in its own cwd; a session spawned afterwards is born on the new value
although tmux's global environment still holds the old one. Throughout, no value ever
appears in an output, the event log, JSON, the Slack payload or a tmux argv.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loop_tmux.testing import finished_records

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs a tmux binary"),
]

HARNESS = Path(__file__).parent / "harness" / "fake_harness.py"
DRIFT_WORDS = "running with a stale environment - run: the-loop sessions restart --all"


def fp(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def the_loop_argv() -> list[str]:
    beside = Path(sys.executable).parent / "the-loop"
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-c", "from loop_cli.main import main; main()"]


@dataclass
class Deployment:
    """One the-loop deployment in a temp dir, on its own tmux server."""

    root: Path
    socket: str
    env: dict[str, str]
    old: str = field(default_factory=lambda: f"old-{uuid.uuid4().hex}")
    new: str = field(default_factory=lambda: f"new-{uuid.uuid4().hex}")
    outputs: list[str] = field(default_factory=list)

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def env_file(self) -> Path:
        return self.root / "app.env"

    @property
    def convos(self) -> Path:
        return self.root / "convos"

    def write_env(self, token: str, extra: str = "") -> None:
        self.env_file.write_text(f"# rotated tokens\nAPI_TOKEN={token}\nREGION=eu-west\n{extra}")

    def run(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*the_loop_argv(), "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            env=env or self.env,
            cwd=self.root,
            timeout=90,
        )
        self.outputs += [done.stdout, done.stderr]
        if check:
            assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        return done

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=10,
            check=False,
        )

    def open_and_start(self, n: int) -> list[str]:
        refs = []
        for _ in range(n):
            ref = self.run("item", "open", "a ticket", "--project", "proj").stdout.strip()
            refs.append(ref)
        for ref in refs:
            self.run("sessions", "start", ref)
        # Wait until each harness has started (the launcher has read the file), so a
        # rotation that follows is really a rotation under a running session.
        sessions = self.sessions()
        for ref in refs:
            started = self.wait_starts(sessions[ref]["conversationId"], 1)
            assert started, f"{ref}: the harness never recorded its start"
        return refs

    def sessions(self) -> dict[str, dict]:
        rows = json.loads(self.run("sessions", "list", "--format", "json").stdout)
        return {row["ref"]: row for row in rows}

    def starts(self, conversation: str) -> list[dict]:
        path = self.convos / f"{conversation}.jsonl"
        return [rec for rec in finished_records(path) if rec["event"] == "start"]

    def wait_starts(self, conversation: str, count: int, timeout: float = 15.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.starts(conversation)
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def event_log_text(self) -> str:
        state = self.root / "state"
        return "".join(p.read_text() for p in sorted(state.glob("events.jsonl*")))

    def event_records(self) -> list[dict]:
        """The event log's finished records, across its rotated files."""
        state = self.root / "state"
        return [r for p in sorted(state.glob("events.jsonl*")) for r in finished_records(p)]


@pytest.fixture
def deployment(tmp_path: Path, tmux_socket: str) -> Deployment:
    socket = tmux_socket
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}"
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        env.pop(name, None)
    dep = Deployment(tmp_path, socket, env)
    (tmp_path / "work").mkdir()
    dep.convos.mkdir()
    # The tmux server started by the first spawn inherits this: panes find conversations.
    env["FAKE_HARNESS_DIR"] = str(dep.convos)
    py, harness = sys.executable, str(HARNESS)
    dep.config.write_text(
        json.dumps(
            {
                "stateDir": str(tmp_path / "state"),
                "routing": {"tmuxSocket": socket},
                "services": {"poller": False},
                "harness": {
                    "adapter": "generic",
                    "argv": [py, harness, "--session-id", "{session_id}", "{prompt}"],
                    "resumeArgv": [py, harness, "--resume", "{session_id}", "{prompt}"],
                    "cwd": str(tmp_path / "work"),
                    # the agents' server holds an allowlist only (docs/security.md)
                    "passEnv": [
                        "FAKE_HARNESS_DIR",
                        "FAKE_HARNESS_EXIT_AFTER",
                        "FAKE_HARNESS_FAIL_RESUME",
                    ],
                },
                "env": {"file": str(dep.env_file)},
            }
        )
    )
    dep.write_env(dep.old)
    return dep


def assert_no_value(dep: Deployment, *texts: str) -> None:
    haystack = "\n".join([*dep.outputs, dep.event_log_text(), *texts])
    for value in (dep.old, dep.new):
        assert value not in haystack


def test_rotation_fleet_story(deployment: Deployment) -> None:
    dep = deployment
    refs = dep.open_and_start(4)
    sessions = dep.sessions()
    convo = {ref: sessions[ref]["conversationId"] for ref in refs}
    for ref in refs:
        (first,) = dep.wait_starts(convo[ref], 1)
        assert first["env_fp"]["API_TOKEN"] == fp(dep.old)

    # The server itself holds the old value, as after a daemon restart under it.
    assert dep.tmux("set-environment", "-g", "API_TOKEN", dep.old).returncode == 0
    status = dep.run("status")
    assert DRIFT_WORDS not in status.stdout

    dep.write_env(dep.new)
    status = dep.run("status")
    assert f"sessions: 4 of 4 {DRIFT_WORDS}" in status.stdout
    data = json.loads(dep.run("status", "--format", "json").stdout)
    block = data["sessionEnvironment"]
    assert block["counts"]["stale"] == 4
    assert {row["stale"][0]["process"] for row in block["sessions"]} == {fp(dep.old)}

    doctor = json.loads(dep.run("env", "doctor", "--format", "json").stdout)
    token = next(row for row in doctor["names"] if row["name"] == "API_TOKEN")
    assert (token["file"], token["tmuxGlobal"]) == (fp(dep.new), fp(dep.old))
    assert token["sessions"] == {fp(dep.old): 4}

    dry = json.loads(
        dep.run("sessions", "restart", "--all", "--dry-run", "--format", "json").stdout
    )
    assert {row["outcome"] for row in dry["rows"]} == {"would-restart"}
    assert all(len(dep.starts(convo[ref])) == 1 for ref in refs)  # nothing touched

    done = dep.run("sessions", "restart", "--all", "--format", "json")
    rows = {row["ref"]: row for row in json.loads(done.stdout)["rows"]}
    assert {rows[ref]["outcome"] for ref in refs} == {"restarted"}, rows
    assert all(rows[ref]["tmuxName"] == sessions[ref]["tmuxName"] for ref in refs)

    for ref in refs:
        first, second = dep.wait_starts(convo[ref], 2)[:2]
        assert second["mode"] == "resume"
        assert second["session_id"] == convo[ref]
        assert second["cwd"] == first["cwd"] == sessions[ref]["cwd"]
        assert second["env_fp"]["API_TOKEN"] == fp(dep.new)
        assert second["env_fp"]["THE_LOOP_WORK_ITEM"] == fp(ref)
        assert second["env_fp"]["THE_LOOP_CONFIG"] == fp(str(dep.config))
    after = dep.sessions()
    assert all(after[ref]["presence"] == "live" for ref in refs)

    status = dep.run("status")
    assert DRIFT_WORDS not in status.stdout
    again = json.loads(dep.run("sessions", "restart", "--all", "--format", "json").stdout)
    assert {row["outcome"] for row in again["rows"]} == {"up-to-date"}

    # Born after the rotation: the file's value, though tmux's global env is still old.
    (late,) = dep.open_and_start(1)
    (start,) = dep.wait_starts(dep.sessions()[late]["conversationId"], 1)
    assert start["env_fp"]["API_TOKEN"] == fp(dep.new)
    assert dep.tmux("show-environment", "-g", "API_TOKEN").stdout.strip() == (
        f"API_TOKEN={dep.old}"
    )

    events = dep.event_records()
    restarts = [e for e in events if e["type"] == "session.env_restart"]
    assert sorted(e["workItem"] for e in restarts) == sorted(refs)
    assert all(e["detail"]["stale_names"] == ["API_TOKEN"] for e in restarts)
    assert_no_value(dep)


def test_not_resumable_and_not_running_sessions_are_left_alone(deployment: Deployment) -> None:
    dep = deployment
    running, stopped = dep.open_and_start(2)
    dep.run("sessions", "stop", stopped)
    dep.write_env(dep.new)
    cfg = json.loads(dep.config.read_text())
    del cfg["harness"]["resumeArgv"]  # the harness can no longer resume
    dep.config.write_text(json.dumps(cfg))
    pids = dep.sessions()[running]["pids"]

    out = dep.run("sessions", "restart", running, stopped, "--format", "json", check=False)

    rows = {row["ref"]: row["outcome"] for row in json.loads(out.stdout)["rows"]}
    assert rows == {running: "skipped-not-resumable", stopped: "skipped-unregistered"}
    assert out.returncode == 0
    assert dep.sessions()[running]["pids"] == pids  # the live agent was not touched


def test_preflight_failure_leaves_the_session_running(deployment: Deployment) -> None:
    dep = deployment
    (ref,) = dep.open_and_start(1)
    before = dep.sessions()[ref]
    dep.write_env(dep.new)
    cfg = json.loads(dep.config.read_text())
    cfg["harness"]["resumeArgv"][0] = str(dep.root / "no-such-python")
    dep.config.write_text(json.dumps(cfg))

    out = dep.run("sessions", "restart", "--all", check=False)

    assert out.returncode == 1
    assert "failed" in out.stdout
    assert "left running" in out.stdout
    assert "no-such-python" in out.stdout
    assert dep.sessions()[ref]["pids"] == before["pids"]
    assert_no_value(dep)


def test_refusals(deployment: Deployment) -> None:
    dep = deployment
    neither = dep.run("sessions", "restart", check=False)
    assert neither.returncode == 2
    assert "--all" in neither.stderr
    assert "ref" in neither.stderr

    dep.env_file.unlink()
    gone = dep.run("sessions", "restart", "--all", check=False)
    assert gone.returncode == 2
    assert str(dep.env_file) in gone.stderr
    assert "Traceback" not in gone.stderr
    assert dep.run("env", "doctor", check=False).returncode == 2

    cfg = json.loads(dep.config.read_text())
    del cfg["env"]
    dep.config.write_text(json.dumps(cfg))
    unset = dep.run("sessions", "restart", "--all", check=False)
    assert unset.returncode == 2
    assert "env.file" in unset.stderr


class FakeSlack:
    """Answers like Slack's incoming webhooks: 200 "ok", or the configured failure."""

    def __init__(self, status: int = 200, body: str = "ok") -> None:
        self.status, self.body, self.received = status, body, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.received.append(raw.decode())
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/services/T1/B1/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_redaction_across_every_command(deployment: Deployment) -> None:
    """Every command of env rotation, success and failure paths, with a value that
    would be found anywhere it leaked."""
    dep = deployment
    refs = dep.open_and_start(2)
    dep.write_env(dep.new, extra=f"broken line {dep.new}\n")  # a malformed line holding a value
    slack, broken = FakeSlack(), FakeSlack(status=500, body="invalid_payload")
    try:
        assert DRIFT_WORDS in dep.run("status").stdout
        for fmt in ("json", "slack"):
            dep.run("status", "--format", fmt)
        ok = dict(dep.env, THE_LOOP_SLACK_WEBHOOK_URL=slack.url)
        dep.run("status", "--format", "slack", "--post", env=ok)
        bad = dict(dep.env, THE_LOOP_SLACK_WEBHOOK_URL=broken.url)
        failed = dep.run("status", "--format", "slack", "--post", env=bad, check=False)
        assert failed.returncode == 1
        assert "HTTP 500" in failed.stderr
        for fmt in ("text", "json"):
            dep.run("env", "doctor", "--format", fmt)
            dep.run("sessions", "restart", "--all", "--dry-run", "--format", fmt)
        warned = dep.run("sessions", "restart", refs[0], "--format", "text")
        assert "malformed line(s) 4" in warned.stderr
        assert "restarted" in warned.stdout
        forced = dep.run("sessions", "restart", "--all", "--force", "--format", "json")
        assert {row["outcome"] for row in json.loads(forced.stdout)["rows"]} == {"restarted"}
        dep.env_file.unlink()
        dep.run("sessions", "restart", "--all", check=False)
        dep.run("env", "doctor", check=False)
        dep.run("status", "--format", "json", check=False)
    finally:
        slack.close()
        broken.close()
    assert len(slack.received) == 1
    assert "stale environment" in slack.received[0]
    state = b"".join(p.read_bytes() for p in (dep.root / "state").rglob("*") if p.is_file())
    assert_no_value(dep, *slack.received, *broken.received, state.decode("latin-1"))


def test_no_value_on_any_tmux_argv(deployment: Deployment, tmp_path: Path) -> None:
    """A recording `tmux` first on PATH logs the argv of every tmux client the-loop
    runs during a spawn and a restart; no value may be among them, nor in the panes'
    own command lines."""
    dep = deployment
    real = shutil.which("tmux", path=dep.env["PATH"])
    assert real is not None
    bindir, log = tmp_path / "recording-bin", tmp_path / "tmux-argv.log"
    bindir.mkdir()
    wrapper = bindir / "tmux"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s\\n" "$a"; done >> "{log}"\n'
        f'printf "%s\\n" "-- end of call --" >> "{log}"\n'
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    dep.env["PATH"] = f"{bindir}{os.pathsep}{dep.env['PATH']}"

    (ref,) = dep.open_and_start(1)
    dep.write_env(dep.new)
    done = json.loads(dep.run("sessions", "restart", "--all", "--format", "json").stdout)
    assert [row["outcome"] for row in done["rows"]] == ["restarted"]

    recorded = log.read_text()
    assert "new-session" in recorded
    assert "respawn-pane" in recorded
    assert dep.old not in recorded
    assert dep.new not in recorded
    for pid in dep.sessions()[ref]["pids"]:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert dep.new not in cmdline
        assert "fake_harness.py" in cmdline


# -- Ctrl-C and SIGTERM leave a record (issue 21, point 11) ------------------------------


def _restart_process(dep: Deployment) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*the_loop_argv(), "--config", str(dep.config), "sessions", "restart", "--all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dep.env,
        cwd=dep.root,
    )


def _events(dep: Deployment, type_: str) -> list[dict]:
    lines = dep.event_records()
    return [e for e in lines if e["type"] == type_]


def test_sigint_in_the_survival_window_records_and_summarises(deployment: Deployment) -> None:
    """A real SIGINT to a real `sessions restart --all` while its relaunched harnesses are
    in their (slow, 30 s) survival window: every session was relaunched, each gets its
    `session.env_restart` (unverified) and its row, a partial summary is printed, the
    run is recorded as interrupted, and the exit code is 130."""
    dep = deployment
    refs = dep.open_and_start(4)
    convo = {ref: dep.sessions()[ref]["conversationId"] for ref in refs}
    cfg = json.loads(dep.config.read_text())
    cfg["harness"]["survivalSeconds"] = 30  # a harness slow to prove it is up
    dep.config.write_text(json.dumps(cfg))
    dep.write_env(dep.new)

    proc = _restart_process(dep)
    try:
        # Every harness has started again (resumed) under the new file: mid-window now.
        for ref in refs:
            assert len(dep.wait_starts(convo[ref], 2, timeout=30)) == 2, ref
        assert proc.poll() is None, "the restart should still be in its survival window"
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)  # well inside the 30 s window
        print(
            f"\nsessions restart --all: exit {proc.returncode} "
            f"{time.monotonic() - signalled:.2f}s after SIGINT (survival window 30 s)"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    dep.outputs += [out, err]

    assert proc.returncode == 130, (out, err)
    assert "Aborted!" not in err
    assert "Traceback" not in err
    assert "summary: 4 unverified" in out
    assert out.count("interrupted (SIGINT) before its survival check") == 4
    assert "interrupted by SIGINT: summary above is partial" in err
    restarts = _events(dep, "session.env_restart")
    assert sorted(e["workItem"] for e in restarts) == sorted(refs)
    assert {e["detail"]["outcome"] for e in restarts} == {"unverified"}
    (stopped,) = _events(dep, "command.interrupted")
    assert stopped["detail"] == {
        "command": "sessions restart",
        "signal": "SIGINT",
        "counts": {"unverified": 4},
    }
    assert all(row["presence"] == "live" for row in dep.sessions().values())
    assert_no_value(dep)


def test_sigterm_while_waiting_for_a_busy_item_touches_nothing(deployment: Deployment) -> None:
    """SIGTERM while the restart waits for an item another process holds: no session is
    relaunched, every row says so, no session record is written, exit 143."""
    import fcntl

    from loop_dispatch import WorkItemRef
    from loop_dispatch.lock import lock_path

    dep = deployment
    refs = dep.open_and_start(3)
    pids = {ref: row["pids"] for ref, row in dep.sessions().items()}
    dep.write_env(dep.new)
    locks = dep.root / "state" / "locks"
    first = lock_path(locks, WorkItemRef.parse(refs[0]))
    with open(lock_path(locks, WorkItemRef.parse(refs[1])), "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # a dispatch of item 2 "runs"
        proc = _restart_process(dep)
        try:

            def restart_holds_first() -> bool:
                with open(first, "a+") as probe:
                    try:
                        fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return True
                    fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
                    return False

            deadline = time.monotonic() + 30
            while not restart_holds_first() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert restart_holds_first(), "the restart never took item 1's lock"
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    dep.outputs += [out, err]

    assert proc.returncode == 143, (out, err)
    assert "summary: 3 interrupted" in out
    assert "interrupted by SIGTERM" in err
    assert _events(dep, "session.env_restart") == []
    (stopped,) = _events(dep, "command.interrupted")
    assert stopped["detail"]["counts"] == {"interrupted": 3}
    assert {ref: row["pids"] for ref, row in dep.sessions().items()} == pids  # untouched
