"""The poll daemon's read-only API (issue 26): a real `poll start` on a private tmux,
real HTTP on its unix socket and on loopback TCP, real Server-Sent Events.

One daemon serves the first test whole (its start is the expensive part); the refusals
start daemons that stop at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from loop_rig import Loop, cycled, the_loop

from loop_cli.api.client import build
from loop_tmux.testing import wait_for

TOKEN = "test-api-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _with_api(loop: Loop, api: dict[str, Any]) -> None:
    data = yaml.safe_load(loop.config.read_text())
    data["api"] = api
    loop.config.write_text(yaml.safe_dump(data))


def _end(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(timeout=30)


def _unix(loop: Loop) -> httpx.Client:
    path = loop.root / "state" / "api.sock"
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://loop")


def _status_text(loop: Loop, **env: str) -> list[str]:
    """`the-loop status` through the console script (its fast path), minus the lines
    whose figures move between two calls (ages of beats and cycles)."""
    done = subprocess.run(
        [the_loop(), "status"],
        capture_output=True,
        text=True,
        env={**loop.env, **env},
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    moving = ("poller:", "last poll:")
    return [line for line in done.stdout.splitlines() if not line.startswith(moving)]


@pytest.fixture
def loop(tmp_path: Path, tmux_socket: str) -> Loop:
    made = Loop(tmp_path, tmux_socket)  # tmux_socket ends our private server
    made.env["THE_LOOP_API_TOKEN"] = TOKEN
    return made


@pytest.mark.tmux
def test_the_daemon_serves_the_api_on_its_socket_and_behind_a_token_on_tcp(
    loop: Loop, tmp_path: Path
) -> None:
    port = _free_port()
    _with_api(loop, {"listen": f"127.0.0.1:{port}"})
    sock_path = loop.root / "state" / "api.sock"
    # A stale socket of an earlier daemon (nobody listens): replaced, not refused.
    sock_path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock_path))
    stale.close()
    out = tmp_path / "poller.out"
    daemon = loop.daemon(out)
    try:
        assert wait_for(lambda: cycled(out.read_text())), out.read_text()
        info = os.lstat(sock_path)
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == os.getuid()

        with _unix(loop) as unix:
            status = unix.get("/api/status")
            assert status.status_code == 200
            assert status.json()["services"][0]["name"] == "poller"
            assert "default-src 'none'" in status.headers["content-security-policy"]
            assert unix.get("/api/attention").json() == []
            assert unix.get("/api/sessions").json() == []
            assert unix.get("/api/inbox").json()["rows"] == []
            assert isinstance(unix.get("/api/events?limit=5").json(), list)
            assert unix.get("/api/events?limit=x").status_code == 400
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                refused = unix.request(method, "/api/status")
                assert refused.status_code == 405, method
                assert refused.headers["allow"] == "GET, HEAD"
            assert unix.head("/api/status").status_code == 200
            page = unix.get("/")
            assert page.status_code == 200
            assert "/static/app.js" in page.text

        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base) as tcp:
            assert tcp.get("/api/status").status_code == 401
            assert tcp.get("/").status_code == 401
            wrong = {"authorization": "Bearer not-the-token-at-all"}
            assert tcp.get("/api/status", headers=wrong).status_code == 401
            right = {"authorization": f"Bearer {TOKEN}"}
            assert tcp.get("/api/status", headers=right).status_code == 200
            assert tcp.post("/api/status", headers=right).status_code == 405
            assert tcp.get("/login?token=nope").status_code == 401
            login = tcp.get(f"/login?token={TOKEN}")
            assert login.status_code == 303
            assert login.headers["location"] == "/"
            cookie = login.cookies["the_loop_api"]
            assert TOKEN not in cookie  # the cookie is derived from the token, not it
            assert "httponly" in login.headers["set-cookie"].lower()
            assert tcp.get("/api/sessions").status_code == 200  # the cookie now
            assert tcp.get("/static/app.js").status_code == 200
        assert TOKEN not in out.read_text()  # never logged

        shown = loop.run("dashboard", "-o", "json")
        assert json.loads(shown.stdout) == {
            "url": f"http://127.0.0.1:{port}/login?token={TOKEN}",
            "socket": str(sock_path),
            "daemonAnswers": True,
        }

        # The live stream: a comment made meanwhile arrives as an event.
        got: list[dict[str, Any]] = []

        def follow() -> None:
            with (
                _unix(loop) as unix,
                unix.stream("GET", "/api/events/stream", timeout=30) as answer,
            ):
                assert answer.headers["content-type"].startswith("text/event-stream")
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        got.append(json.loads(line[6:]))
                        if any(r["type"] == "dispatch.delivered" for r in got):
                            return

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        time.sleep(0.5)  # the stream follows from its start: open it first
        loop.run("item", "open", "Watch me")
        assert wait_for(lambda: loop.sessions() and loop.sessions()[0]["presence"] == "live")
        loop.run("item", "comment", "local:loop#1", "a comment while the stream is open")
        reader.join(timeout=30)
        delivered = [r for r in got if r["type"] == "dispatch.delivered"]
        assert delivered, got
        assert delivered[0]["workItem"] == "local:loop#1", got
        assert delivered[0]["detail"]["latency_seconds"] >= 0

        with _unix(loop) as unix:
            (row,) = unix.get("/api/sessions").json()
            assert row["presence"] == "live"
            assert row["activity"] in (
                "idle",
                "busy",
                "blocked",
                "unknown",
            )
            metrics = unix.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        text = metrics.text
        assert 'the_loop_deliveries_total{outcome="delivered"} 1.0' in text, text
        assert "the_loop_comment_to_paste_seconds_count 1.0" in text
        assert 'the_loop_sessions{activity="' in text
        assert 'state="live"' in text
        assert 'the_loop_inbox{state="pending"}' in text
        assert "the_loop_poll_errors_total 0.0" in text
        assert 'the_loop_notifications_total{outcome="failed"} 0.0' in text

        # `status` asks the daemon and prints what it prints computing alone (the
        # daemon's answer may be up to 1.5 s old: the inbox row just settled shows soon).
        assert wait_for(
            lambda: _status_text(loop) == _status_text(loop, THE_LOOP_STATUS_LOCAL="1"),
            timeout=10,
        ), (_status_text(loop), _status_text(loop, THE_LOOP_STATUS_LOCAL="1"))
        # ... which the daemon rendered: the same lines as its `?render=text` answer.
        with _unix(loop) as unix:
            rendered = unix.get("/api/status?render=text")
            as_json = unix.get("/api/status?render=json")
            refused = unix.get("/api/status?render=html")
        assert rendered.status_code == 200, rendered.text
        assert rendered.headers["content-type"].startswith("text/plain")
        assert rendered.headers["x-the-loop-version"] == build()  # this very code
        assert rendered.headers["x-the-loop-ok"] in ("0", "1")
        moving = ("poller:", "last poll:")
        assert [
            line for line in rendered.text.splitlines() if not line.startswith(moving)
        ] == _status_text(loop)
        assert json.loads(as_json.text)["services"][0]["name"] == "poller"
        assert as_json.text.startswith('{\n  "')  # indented as `status -o json` prints
        assert refused.status_code == 400

        # A stream left open never holds up the daemon's stop: it is ended with it.
        opened = threading.Event()

        def linger() -> None:
            with (
                _unix(loop) as unix,
                unix.stream("GET", "/api/events/stream", timeout=60) as answer,
            ):
                opened.set()
                for _ in answer.iter_lines():
                    pass

        lingering = threading.Thread(target=linger, daemon=True)
        lingering.start()
        assert opened.wait(10)
        asked = time.monotonic()
        code = _end(daemon)
        took = time.monotonic() - asked
        lingering.join(10)
        assert not lingering.is_alive()  # the server ended the stream
        assert took < 15, took  # "within about 2 s" on an idle machine: generous here
    finally:
        code = _end(daemon)
    assert code == 0, out.read_text()
    assert not sock_path.exists()  # removed on a clean stop


def _refused(loop: Loop, tmp_path: Path) -> str:
    out = tmp_path / "refused.out"
    daemon = loop.daemon(out)
    try:
        code = daemon.wait(timeout=60)
    finally:
        _end(daemon)
    text = out.read_text()
    assert code == 1, text
    assert "Traceback" not in text
    return text


@pytest.mark.tmux
def test_the_daemon_refuses_a_socket_path_it_must_not_replace(loop: Loop, tmp_path: Path) -> None:
    state = loop.root / "state"
    state.mkdir(mode=0o700)
    path = state / "api.sock"
    path.write_text("not a socket")
    assert "is not a socket" in _refused(loop, tmp_path)
    assert path.read_text() == "not a socket"  # untouched
    path.unlink()

    # A live one: another process serves on it.
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen(1)
    try:
        assert "already serves the API" in _refused(loop, tmp_path)
    finally:
        live.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)  # not unlinked
    if os.getuid() != 0:
        return  # a socket owned by another user needs root to make (CI runs as root)
    os.chown(path, 65534, 65534)
    assert "belongs to another user" in _refused(loop, tmp_path)
    assert os.lstat(path).st_uid == 65534


@pytest.mark.tmux
def test_a_tcp_listener_without_its_token_is_refused_before_the_daemon_starts(
    loop: Loop, tmp_path: Path
) -> None:
    _with_api(loop, {"listen": "127.0.0.1:1"})
    del loop.env["THE_LOOP_API_TOKEN"]
    done = subprocess.run(
        [sys.executable, "-m", "loop_cli.main", "poll", "start"],
        capture_output=True,
        text=True,
        env=loop.env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "THE_LOOP_API_TOKEN" in done.stderr
    assert "api.listen" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (loop.root / "state" / "api.sock").exists()
