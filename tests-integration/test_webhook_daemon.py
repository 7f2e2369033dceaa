"""`the-loop gh-webhook start --route` as a real process on a loopback port.

Driven by signed requests like GitHub's; routes into a private tmux server running the
fake harness; stopped with SIGTERM like systemd would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from integration_support import harness_texts

from loop_cli.webhook.verify import sign
from loop_tmux.testing import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "loop-cli" / "tests"))
from fakegithub import payloads

HERE = Path(__file__).resolve().parent
FAKE_HARNESS = HERE / "harness" / "fake_harness.py"
SECRET = "daemon-secret-Zq9"
REPO = "octo/app"

pytestmark = pytest.mark.tmux


class Daemon:
    def __init__(self, tmp: Path, socket_name: str) -> None:
        self.tmp = tmp
        self.convo = tmp / "conversations"
        self.convo.mkdir(exist_ok=True)
        (tmp / "work").mkdir(exist_ok=True)
        config = {
            "stateDir": str(tmp / "state"),
            "tracker": "github",
            "github": {"repositories": [REPO], "tokenEnv": "NO_TOKEN_HERE"},
            "authorizedActors": ["alice"],
            "harness": {
                "adapter": "claude-code",
                "binary": str(FAKE_HARNESS),
                "cwd": str(tmp / "work"),
                # the agents' server holds an allowlist only (docs/security.md)
                "passEnv": [
                    "FAKE_HARNESS_DIR",
                    "FAKE_HARNESS_EXIT_AFTER",
                    "FAKE_HARNESS_FAIL_RESUME",
                ],
                "stateDir": str(tmp / "claude"),
            },
            "routing": {"tmuxSocket": socket_name},
            "webhook": {"secretEnv": "HOOK_SECRET", "maxBodyBytes": 65536},
        }
        self.config = tmp / "config.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env.update(
            THE_LOOP_CONFIG=str(self.config),
            HOOK_SECRET=SECRET,
            FAKE_HARNESS_DIR=str(self.convo),
            HOME=str(tmp),
        )
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.stderr: list[str] = []

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loop_cli.main",
                "gh-webhook",
                "start",
                "--route",
                "--port",
                "0",
            ],
            env=self.env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        found = threading.Event()

        def read() -> None:
            assert self.proc is not None
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.stderr.append(line)
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
                if m:
                    self.url = m.group(1)
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(30):
            self.stop()
            raise AssertionError("daemon did not start: " + "".join(self.stderr))

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def post(
        self,
        body: bytes,
        *,
        event: str = "issue_comment",
        guid: str | None = None,
        signed: bool = True,
        ctype: str = "application/json",
        signature: str | None = None,
    ) -> httpx.Response:
        headers = {
            "Content-Type": ctype,
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": guid or uuid.uuid4().hex,
        }
        if signed:
            headers["X-Hub-Signature-256"] = signature or sign(SECRET.encode(), body)
        return httpx.post(self.url + "/", content=body, headers=headers, timeout=10)

    def messages(self) -> list[str]:
        return harness_texts(self.convo)

    def heartbeat(self) -> Any:
        from loop_cli.heartbeat import read
        from loop_dispatch.store import Store

        store = Store.open(self.tmp / "state")
        try:
            return read(store, "webhook")
        finally:
            store.close()


@pytest.fixture
def daemon(tmp_path: Path, tmux_socket: str) -> Iterator[Daemon]:
    d = Daemon(tmp_path, tmux_socket)
    d.start()
    yield d
    d.stop()


def comment(body: str, cid: int, login: str = "alice", number: int = 3) -> bytes:
    payload = payloads.issue_comment(REPO, number=number, comment_id=cid, body=body, login=login)
    return json.dumps(payload).encode()


def test_bad_requests_get_their_status_and_the_daemon_lives_on(daemon: Daemon) -> None:
    good = comment("hello", 1)
    assert daemon.post(good, signed=False).status_code == 401
    tampered = good.replace(b"hello", b"HELLO")
    assert daemon.post(tampered, signature=sign(SECRET.encode(), good)).status_code == 401
    assert daemon.post(good, ctype="text/plain").status_code == 415
    assert daemon.post(b"{" * 70_000).status_code == 413
    assert daemon.post(b"{oops").status_code == 400
    assert daemon.post(b'{"zen": "hi"}', event="ping").status_code == 200
    # Garbage straight onto the socket, then a clean request still works.
    host, port = daemon.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"\x00\xffNOT HTTP AT ALL\r\n\r\n")
        raw.recv(1024)
    assert daemon.post(b'{"zen": "hi"}', event="ping").status_code == 200
    assert daemon.proc is not None
    assert daemon.proc.poll() is None


def test_comment_is_answered_202_before_dispatch_and_reaches_a_session(daemon: Daemon) -> None:
    # A first request warms the daemon (thread pool, store) so the clock below times
    # only the answer, which must not wait for the ~1 s survival window of the dispatch.
    assert daemon.post(b'{"zen": "hi"}', event="ping").status_code == 200
    started = time.monotonic()
    r = daemon.post(comment("Please add a changelog entry.", 41))
    elapsed = time.monotonic() - started
    assert r.status_code == 202
    assert r.json()["deliveryId"] == f"comment:github:{REPO}:41"
    # The dispatcher waits ~1 s for the harness to survive its start; the answer did not.
    assert elapsed < 0.9
    assert wait_for(lambda: any("Please add a changelog entry." in m for m in daemon.messages()))
    beat = wait_for(daemon.heartbeat)
    assert beat.running()


def test_unauthorized_and_redelivered_comments_are_not_pasted(daemon: Daemon) -> None:
    assert daemon.post(comment("first", 51), guid="g-51").status_code == 202
    assert wait_for(lambda: any("first" in m for m in daemon.messages()))
    r = daemon.post(comment("evil", 52, login="mallory"))
    assert r.status_code == 202
    assert r.json()["status"] == "ignored"
    assert daemon.post(comment("first", 51), guid="g-51").status_code == 200
    # The same comment under a new GUID: the inbox already holds its delivery id.
    retry = daemon.post(comment("first", 51), guid="g-51-retry")
    assert (retry.status_code, retry.json()["status"]) == (200, "duplicate")
    time.sleep(1.5)
    texts = daemon.messages()
    assert sum("first" in m for m in texts) == 1
    assert not any("evil" in m for m in texts)


def test_sigterm_stops_cleanly_and_dedupe_survives_a_restart(daemon: Daemon) -> None:
    body = b'{"zen": "x"}'
    assert daemon.post(comment("persisted", 61), guid="g-restart").status_code == 202
    assert daemon.stop() == 0
    beat = daemon.heartbeat()
    assert beat.state == "stopped"
    assert SECRET not in "".join(daemon.stderr)
    daemon.start()
    assert daemon.post(body, event="ping").status_code == 200
    r = daemon.post(comment("persisted", 61), guid="g-restart")
    assert r.status_code == 200
    assert r.json()["status"] == "duplicate"


HOLD_WRITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_store_held_by_another_writer_is_answered_503_within_the_bound(daemon: Daemon) -> None:
    """Issue 20, point 13: another process holds the SQLite write lock for a minute. The
    receiver answers 503 (Retry-After) well within GitHub's 10 s instead of holding the
    request; GitHub's redelivery after the release is committed, and delivered, once."""
    from loop_cli.webhook.app import ANSWER_WITHIN_SECONDS
    from loop_dispatch.store import Store

    assert daemon.post(b'{"zen": "hi"}', event="ping").status_code == 200
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(daemon.tmp / "state" / "state.db"), "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        guid = uuid.uuid4().hex
        body = comment("Redelivered once the store is free.", 4242)
        started = time.monotonic()
        answer = daemon.post(body, guid=guid)
        elapsed = time.monotonic() - started
        print(f"503 after {elapsed:.2f}s under a held write lock")
        assert answer.status_code == 503
        assert answer.headers["Retry-After"].isdigit()
        assert "busy" in answer.json()["reason"] or "commit" in answer.json()["reason"]
        assert elapsed < ANSWER_WITHIN_SECONDS + 1.0
    finally:
        holder.kill()
        holder.wait()
    # GitHub redelivers with the same GUID: accepted now, then a duplicate.
    assert daemon.post(body, guid=guid).status_code == 202
    assert daemon.post(body, guid=guid).status_code == 200
    store = Store.open(daemon.tmp / "state", read_only=True)
    try:
        rows = store.query(
            "SELECT count(*) FROM inbox WHERE delivery_id = ?", (f"comment:github:{REPO}:4242",)
        )
    finally:
        store.close()
    assert rows[0][0] == 1
    text = "Redelivered once the store is free."
    assert wait_for(lambda: any(text in m for m in daemon.messages()))
    time.sleep(1.0)
    assert sum(text in m for m in daemon.messages()) == 1
