"""The local API's parts (issue 26): its config, the status client's daemon path and
its fallbacks, the owner-only socket at any depth, the event-log follower across a
rotation, and the counters /metrics keeps from the log.

The daemon itself is tested end to end in tests-integration/test_api_daemon.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loop_cli.api.client import build, config_id, daemon_output, get_json
from loop_cli.api.follow import LogFollower, last_records
from loop_cli.api.unixsock import bind_private
from loop_cli.config import parse_text
from loop_cli.errors import ConfigError, OperationalError


def _errors(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_text(text, tmp_path / "c.yaml")
    return info.value.problems


@pytest.mark.parametrize("listen", ["0.0.0.0:8788", "192.168.1.5:80", "[::]:8788"])
def test_a_listener_off_loopback_is_refused_unless_allowed(tmp_path: Path, listen: str) -> None:
    (problem,) = _errors(f"api: {{listen: '{listen}'}}\n", tmp_path)
    assert "api" in problem
    assert "not a loopback address" in problem
    assert "allowRemote" in problem
    cfg = parse_text(f"api: {{listen: '{listen}', allowRemote: true}}\n", tmp_path / "c.yaml")
    assert cfg.api.listen == listen


@pytest.mark.parametrize("listen", ["8788", "localhost", "127.0.0.1:0", "example.com:80", "::1"])
def test_a_listener_that_is_not_host_port_is_refused(tmp_path: Path, listen: str) -> None:
    (problem,) = _errors(f"api: {{listen: '{listen}'}}\n", tmp_path)
    assert "api.listen" in problem


def test_loopback_listeners_are_accepted(tmp_path: Path) -> None:
    for listen in ("127.0.0.1:8788", "localhost:1", "[::1]:8788", "127.0.0.2:65535"):
        assert parse_text(f"api: {{listen: '{listen}'}}\n", tmp_path / "c.yaml").api.listen


def test_the_api_token_never_reaches_an_agent(tmp_path: Path) -> None:
    (problem,) = _errors("harness: {passEnv: [THE_LOOP_API_TOKEN]}\n", tmp_path)
    assert "api.tokenEnv" in problem


def _answer(status: int, body: bytes, headers: dict[str, str]) -> bytes:
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


class FakeDaemon:
    """A unix-socket HTTP server answering every GET with one canned answer; with
    `rendered`, `/api/status?render=FMT` is answered as the real daemon does (the status
    rendered by status_text.render_output, its ok and version headers)."""

    def __init__(
        self,
        path: Path,
        status: int,
        body: bytes,
        headers: dict[str, str],
        rendered: dict[str, Any] | None = None,
    ) -> None:
        self.sock = bind_private(path)
        self.requests: list[bytes] = []
        self.answer = _answer(status, body, headers)
        self.renders: dict[bytes, bytes] = {}
        if rendered is not None:
            from loop_cli.status_text import render_output

            extra = {
                **headers,
                "content-type": "text/plain; charset=utf-8",
                "x-the-loop-ok": "1" if rendered["ok"] else "0",
            }
            for fmt in ("text", "json"):
                text = render_output(rendered, fmt).encode()
                self.renders[f"/api/status?render={fmt}".encode()] = _answer(status, text, extra)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):  # a probe that only connects
                request = conn.recv(65536)
                if request:
                    self.requests.append(request)
                    target = request.split(b" ")[1] if b" " in request else b""
                    conn.sendall(self.renders.get(target, self.answer))

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def fake_daemon(isolated: Path) -> Iterator[Callable[..., FakeDaemon]]:
    made: list[FakeDaemon] = []

    def make(
        body: dict[str, Any],
        *,
        status: int = 200,
        config: str = "",
        renders: bool = True,
        headers: dict[str, str] | None = None,
    ) -> FakeDaemon:
        """A daemon serving `body` as its status (rendered too, unless `renders` is
        False: a daemon from before `?render`, which answers JSON to every GET)."""
        (isolated / "state").mkdir(mode=0o700, exist_ok=True)
        sent = {
            "content-type": "application/json",
            "x-the-loop-config": config_id(config),
            "x-the-loop-version": build(),
        }
        sent.update(headers or {})
        made.append(
            FakeDaemon(
                isolated / "state" / "api.sock",
                status,
                json.dumps(body).encode(),
                sent,
                rendered=body if renders else None,
            )
        )
        return made[-1]

    yield make
    for daemon in made:
        daemon.close()


def _local_status(console: Callable[..., subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    done = console("status", "-o", "json", env={"THE_LOOP_STATUS_LOCAL": "1"})
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.mark.parametrize(
    ("argv", "target"),
    [
        (("status",), b"/api/status?render=text"),
        (("status", "-o", "json"), b"/api/status?render=json"),
        (("status", "-o", "slack"), b"/api/status"),
    ],
)
def test_status_prints_what_the_daemon_answers(
    loop_config: Path,
    console: Callable[..., subprocess.CompletedProcess[str]],
    fake_daemon: Callable[..., FakeDaemon],
    argv: tuple[str, ...],
    target: bytes,
) -> None:
    """text and json: the plain entry path prints the daemon's rendering as it came;
    slack: the click command renders the daemon's JSON itself."""
    served = _local_status(console)
    served["version"] = "served-by-the-daemon"  # a mark the local status cannot have
    served["ok"] = not served["ok"]  # and an exit code it would not give
    daemon = fake_daemon(served, config=str(loop_config.resolve()))
    done = console(*argv)
    assert "served-by-the-daemon" in done.stdout, done.stdout + done.stderr
    assert done.returncode == (0 if served["ok"] else 1)
    assert daemon.requests
    assert daemon.requests[0].startswith(b"GET " + target + b" HTTP/1.0")
    if argv[-1] != "slack":  # byte for byte what the daemon rendered
        from loop_cli.status_text import render_output

        assert done.stdout == render_output(served, argv[-1] if len(argv) > 1 else "text")


@pytest.mark.parametrize(
    "headers",
    [
        {"x-the-loop-version": "0.1.0 1.2 3.4"},  # another build might render otherwise
        {"x-the-loop-ok": "maybe"},  # no exit code to give
    ],
)
def test_status_computes_itself_when_the_rendering_is_not_its_own(
    loop_config: Path,
    console: Callable[..., subprocess.CompletedProcess[str]],
    fake_daemon: Callable[..., FakeDaemon],
    headers: dict[str, str],
) -> None:
    served = _local_status(console)
    served["version"] = "served-by-the-daemon"
    daemon = fake_daemon(served, config=str(loop_config.resolve()))
    for target, answer in list(daemon.renders.items()):
        head, _, body = answer.partition(b"\r\n\r\n")
        for name, value in headers.items():  # the same answer, one header changed
            lines = [ln for ln in head.split(b"\r\n") if not ln.startswith(name.encode())]
            head = b"\r\n".join([*lines, f"{name}: {value}".encode()])
        daemon.renders[target] = head + b"\r\n\r\n" + body
    done = console("status")
    assert daemon.requests  # it asked
    assert "served-by-the-daemon" not in done.stdout, done.stdout
    assert done.stdout.startswith("the-loop ")


@pytest.mark.parametrize("argv", [("status",), ("status", "-o", "slack")])
def test_status_computes_itself_when_an_older_daemon_answers_json(
    loop_config: Path,
    console: Callable[..., subprocess.CompletedProcess[str]],
    fake_daemon: Callable[..., FakeDaemon],
    argv: tuple[str, ...],
) -> None:
    """A daemon from before `?render` answers its JSON to it, without a version: not
    printed as text, nor its JSON rendered by this version (its fields may differ)."""
    served = _local_status(console)
    served["version"] = "served-by-the-daemon"
    daemon = fake_daemon(
        served,
        config=str(loop_config.resolve()),
        renders=False,
        headers={"x-the-loop-version": ""},
    )
    done = console(*argv)
    assert daemon.requests
    assert "served-by-the-daemon" not in done.stdout, done.stdout
    assert done.returncode in (0, 1), done.stderr


def test_a_served_status_loads_no_config_code_once_the_hint_is_kept(
    loop_config: Path,
    console: Callable[..., subprocess.CompletedProcess[str]],
    fake_daemon: Callable[..., FakeDaemon],
) -> None:
    served = _local_status(console)  # a full load: it keeps the hint
    served["version"] = "served-by-the-daemon"
    fake_daemon(served, config=str(loop_config.resolve()))
    script = Path(sys.executable).with_name("the-loop")
    if not script.exists():
        pytest.skip("the-loop console script is not installed next to this python")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "served-by-the-daemon" in done.stdout, done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()}
    assert {"msgspec", "yaml", "sqlite3", "loop_tmux", "loop_cli.config"}.isdisjoint(imported)
    # ... nor any module the daemon's rendering spares it (json, signal's enums, typing)
    assert {"json", "enum", "typing", "signal", "loop_cli.status_text"}.isdisjoint(imported)

    loop_config.write_text(loop_config.read_text() + "# edited\n")  # the hint is sealed
    edited = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "loop_cli.config" in edited.stderr  # loaded again, as it must be


def test_status_computes_itself_when_the_daemon_runs_another_config(
    loop_config: Path,
    console: Callable[..., subprocess.CompletedProcess[str]],
    fake_daemon: Callable[..., FakeDaemon],
) -> None:
    served = _local_status(console)
    served["version"] = "served-by-the-daemon"
    daemon = fake_daemon(served, config="/elsewhere/config.yaml")
    done = console("status")
    assert daemon.requests  # it asked
    assert "served-by-the-daemon" not in done.stdout  # and did not take the answer
    assert done.stdout.startswith("the-loop ")


@pytest.mark.parametrize("status", [500, 404])
def test_status_computes_itself_when_the_daemon_fails(
    loop_config: Path,
    console: Callable[..., subprocess.CompletedProcess[str]],
    fake_daemon: Callable[..., FakeDaemon],
    status: int,
) -> None:
    served = _local_status(console)
    served["version"] = "served-by-the-daemon"
    daemon = fake_daemon(served, status=status, config=str(loop_config.resolve()))
    done = console("status", "-o", "json")
    assert daemon.requests
    assert json.loads(done.stdout)["version"] != "served-by-the-daemon"


def _rendered_answer(text: bytes, config: Path, *, length: int | None = None) -> bytes:
    """What the real daemon answers to `?render=text` (its headers), `text` as the body."""
    headers = {
        "content-type": "text/plain; charset=utf-8",
        "x-the-loop-config": config_id(config),
        "x-the-loop-version": build(),
        "x-the-loop-ok": "1",
    }
    answer = _answer(200, text, headers)
    if length is not None:
        answer = answer.replace(
            f"content-length: {len(text)}".encode(), f"content-length: {length}".encode()
        )
    return answer


@pytest.mark.parametrize(
    ("body", "length", "taken"),
    [
        (b"the-loop 0.1.0\nstate: /x\n", None, True),  # the control: whole, plain
        (b"the-loop 0.1.0\nsta", 40, False),  # cut short: the daemon died mid-answer
        (b"the-loop 0.1.0\n\x1b]0;title\x07\x1b[2J\n", None, False),  # escapes
        ("the-loop 0.1.0 \x9b2J\n".encode(), None, False),  # a C1 control
        (b"the-loop \xff\n", None, False),  # not UTF-8
    ],
)
def test_only_a_whole_plain_rendering_is_printed(
    tmp_path: Path, body: bytes, length: int | None, taken: bool
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    server = FakeDaemon(tmp_path / "api.sock", 200, b"", {})
    server.answer = _rendered_answer(body, config, length=length)
    try:
        found = daemon_output(tmp_path, config, "text")
    finally:
        server.close()
    assert server.requests
    assert found == ((body.decode(), True) if taken else None)


def test_a_socket_of_another_user_is_not_asked(tmp_path: Path) -> None:
    """A state directory others can write to: whoever listens on api.sock there is
    not taken at its word unless it runs as us (or root). SO_PEERCRED says who."""
    if not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("no SO_PEERCRED on this platform (the socket file's owner is checked)")
    if os.geteuid() != 0:
        pytest.skip("needs root, to listen as another user (nobody) in this test")
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="loop-shared-state-", dir="/tmp"))
    try:
        shared.chmod(0o777)  # a state directory anyone can write to
        config = tmp_path / "config.yaml"
        config.write_text("{}\n")
        answer = _rendered_answer(b"the-loop 0.1.0\nplanted\n", config)
        for uid, taken in ((65534, False), (os.geteuid(), True)):
            path = shared / "api.sock"
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the listener, as `uid`; never returns into pytest
                try:
                    os.close(ready_r)
                    os.setgid(uid)
                    os.setuid(uid)
                    listener = socket.socket(socket.AF_UNIX)
                    listener.bind(str(path))
                    listener.listen(4)
                    os.write(ready_w, b"1")
                    while True:
                        conn, _ = listener.accept()
                        conn.recv(65536)
                        conn.sendall(answer)
                        conn.close()
                finally:
                    os._exit(0)
            os.close(ready_w)
            try:
                assert os.read(ready_r, 1) == b"1"
                found = daemon_output(shared, config, "text")
            finally:
                os.close(ready_r)
                os.kill(pid, 9)  # our own child
                os.waitpid(pid, 0)
                path.unlink()
            assert (found is not None) is taken, (uid, found)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_config_travels_as_hex_whatever_its_name(tmp_path: Path) -> None:
    """A header is Latin-1: a config path in another script (or not UTF-8 at all)
    must still name the daemon's config."""
    for name in ("配置.yaml", "conf\udcff.yaml"):
        named = config_id(tmp_path / name)
        assert named.isascii()
        assert bytes.fromhex(named) == os.fsencode(os.path.realpath(tmp_path / name))
    assert config_id(None) == ""


def test_a_stale_socket_is_no_answer(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: refused at once
    assert get_json(path, "/api/status") is None
    assert get_json(tmp_path / "absent.sock", "/api/status") is None


def test_the_socket_is_owner_only_and_reachable_from_a_deep_state_dir(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6)
    deep.mkdir(parents=True)
    path = deep / "api.sock"
    assert len(str(path)) > 108  # beyond AF_UNIX's own limit
    server = FakeDaemon(path, 200, b'{"deep": true}', {})
    try:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert get_json(path, "/x") == {"deep": True}
        with pytest.raises(OperationalError, match="already serves the API"):
            bind_private(path)
    finally:
        server.close()


def _append(path: Path, *records: dict[str, Any]) -> None:
    with open(path, "a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def test_the_follower_reads_each_record_once_across_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    _append(log, {"type": "old"})
    follower = LogFollower(log)
    assert follower.read() == []  # it starts at the end
    _append(log, {"type": "a"})
    with open(log, "a") as handle:
        handle.write('{"type": "b"')  # a writer mid-line
    assert [r["type"] for r in follower.read()] == ["a"]
    with open(log, "a") as handle:
        handle.write("}\n")
    _append(log, {"type": "c"})
    log.rename(tmp_path / "events.jsonl.1")  # rotated between two reads
    _append(log, {"type": "d"}, {"type": "e"})
    assert [r["type"] for r in follower.read()] == ["b", "c", "d", "e"]
    _append(log, {"type": "f"})
    assert [r["type"] for r in follower.read()] == ["f"]
    follower.close()
    assert [r["type"] for r in last_records(log, 2)] == ["e", "f"]


def test_the_counters_count_what_the_log_records() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from loop_cli.api.metrics import EventCounters

    registry = CollectorRegistry()
    counters = EventCounters(registry)
    for record in (
        {"type": "dispatch.delivered", "detail": {"latency_seconds": 1.5}},
        {"type": "dispatch.delivered", "detail": {"latency_seconds": 40}},
        {"type": "dispatch.failed", "detail": {}},
        {"type": "inbox.gave_up", "detail": {}},
        {"type": "poll.error", "detail": {}},
        {"type": "notify.failed", "detail": {}},
        {"type": "session.stalled", "detail": {"why": "no-progress"}},
        {"type": "session.spawned", "detail": {}},
    ):
        counters.observe(record)
    text = generate_latest(registry).decode()
    assert 'the_loop_deliveries_total{outcome="delivered"} 2.0' in text
    assert 'the_loop_deliveries_total{outcome="failed"} 1.0' in text
    assert 'the_loop_deliveries_total{outcome="gave_up"} 1.0' in text
    assert 'the_loop_comment_to_paste_seconds_bucket{le="2.0"} 1.0' in text
    assert 'the_loop_comment_to_paste_seconds_bucket{le="60.0"} 2.0' in text
    assert "the_loop_poll_errors_total 1.0" in text
    assert 'the_loop_notifications_total{outcome="failed"} 1.0' in text
    assert 'the_loop_notifications_total{outcome="sent"} 0.0' in text
    assert 'the_loop_stalled_total{why="no-progress"} 1.0' in text


def test_the_status_snapshot_is_computed_once_per_burst_and_never_served_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loop_cli.api import views

    clock = [1000.0]
    monkeypatch.setattr(views.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(views, "REFRESH_SECONDS", 3600.0)  # no background refresh here
    computed: list[float] = []

    def compute() -> dict[str, Any]:
        computed.append(clock[0])
        return {"n": len(computed)}

    snapshot = views.Snapshot(compute)
    try:
        assert snapshot.get() == {"n": 1}  # the first asks: computed now
        clock[0] += views.FRESH_SECONDS  # still fresh: the same answer, no work
        assert snapshot.get() == {"n": 1}
        clock[0] += 0.01  # past the bound: computed again before answering
        assert snapshot.get() == {"n": 2}
        assert computed == [1000.0, 1000.0 + views.FRESH_SECONDS + 0.01]
    finally:
        snapshot.stop()


def test_a_relative_config_under_a_deleted_directory_is_one_line(isolated: Path) -> None:
    """The hint and the config cache make the path absolute: with the working
    directory gone that fails, and must be a miss, not a traceback."""
    script = Path(sys.executable).with_name("the-loop")
    if not script.exists():
        pytest.skip("the-loop console script is not installed next to this python")
    gone = isolated / "gone"
    gone.mkdir()
    for args in (["--config", "c.yaml", "status"], ["status", "-o", "json"]):
        done = subprocess.run(
            [
                "sh",
                "-c",
                'cd "$1" && rmdir "$1" && shift && exec "$@"',
                "sh",
                str(gone),
                str(script),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "THE_LOOP_CONFIG": "c.yaml"},
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr == "Error: c.yaml: config file not found\n"
        gone.mkdir()


def test_the_build_changes_with_the_code_that_makes_status() -> None:
    """A checkout edited under a running daemon keeps its version: the build does not."""
    import loop_cli.status_text as code

    source = Path(code.__file__)
    before = build()
    held = source.stat()
    try:
        os.utime(source, ns=(held.st_atime_ns, held.st_mtime_ns + 1_000_000_000))
        assert build() != before
    finally:
        os.utime(source, ns=(held.st_atime_ns, held.st_mtime_ns))
    assert build() == before
