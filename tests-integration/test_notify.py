"""Issue 26 points 1 and 3 end to end: a real `poll start`, a real tmux session whose
harness exits with its item open, and a receiver on loopback HTTP that records every
post, refuses the first ones and checks each signature.

The daemon's detector raises `session.stalled` (dead-with-open-item); the event is
committed to the outbox, posted to the signed webhook and to a Slack-shaped incoming
webhook, retried with backoff while the receiver refuses (each refusal a
`notify.failed`), and delivered once per target. No secret value reaches any post.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from inbox_rig import SECRET, Rig

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

NOTIFY_SECRET = "nfy-0123456789abcdef-signing"
SLACK_PATH = "/services/T000/B000/sl4ck-url-s3cret"
TOKEN_VALUE = "ghp_ThisIsNotARealTokenButLooksLikeOne0001"


class Receiver:
    """Records posts by path; answers 503 to the first `fail_first` on each path; a
    post whose signature does not check is recorded as forged."""

    def __init__(self, fail_first: int) -> None:
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        self.forged: list[str] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = receiver.take(self.path, dict(self.headers.items()), body)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"busy")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def take(self, path: str, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            seen = sum(1 for p, _, _ in self.posts if p == path)
            self.posts.append((path, headers, body))
            if path == "/hook":
                mac = hmac.new(NOTIFY_SECRET.encode(), body, hashlib.sha256)
                want = "sha256=" + mac.hexdigest()
                got = {k.lower(): v for k, v in headers.items()}.get("x-the-loop-signature-256")
                if not hmac.compare_digest(want, got or ""):
                    self.forged.append(path)
                    return 401
            return 503 if seen < self.fail_first else 200

    def ok(self, path: str) -> list[bytes]:
        """Bodies of the posts on `path` that were answered 200."""
        with self.lock:
            bodies = [b for p, _, b in self.posts if p == path]
        return bodies[self.fail_first :]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(fail_first=2) as r:
        yield r


def _notifying_rig(tmp_path: Path, tmux_socket: str, receiver: Receiver) -> Rig:
    rig = Rig(
        tmp_path,
        tmux_socket,
        interval=0.3,
        extra_env={"FAKE_HARNESS_EXIT_AFTER": "1"},
    )
    config = yaml.safe_load(rig.config_path.read_text())
    config["github"] = {"tokenEnv": "GH_TOKEN_FOR_TEST"}
    config["attention"] = {"deadSeconds": 1.5}
    config["notify"] = {
        "webhookUrl": f"{receiver.url}/hook",
        "webhookSecretEnv": "NOTIFY_SECRET",
        "slackUrlEnv": "NOTIFY_SLACK_URL",
        "backoffSeconds": 0.2,
        "maxBackoffSeconds": 0.5,
        "timeoutSeconds": 5,
    }
    rig.config_path.write_text(yaml.safe_dump(config))
    rig.env.update(
        NOTIFY_SECRET=NOTIFY_SECRET,
        NOTIFY_SLACK_URL=f"{receiver.url}{SLACK_PATH}",
        GH_TOKEN_FOR_TEST=TOKEN_VALUE,
    )
    return rig


def test_a_dead_agent_is_raised_notified_once_per_target_after_refusals(
    tmp_path: Path, tmux_socket: str, receiver: Receiver
) -> None:
    rig = _notifying_rig(tmp_path, tmux_socket, receiver)
    poller = rig.poller()
    try:
        poller.start()
        ref = rig.cli("item", "open", "an agent that quits").stdout.strip()
        assert wait_for(lambda: rig.events("session.stalled"), timeout=30), poller.log()
        assert wait_for(lambda: receiver.ok("/hook") and receiver.ok(SLACK_PATH), timeout=30), (
            receiver.posts,
            poller.log(),
        )
        # A restarted daemon raises nothing again and posts nothing more.
        assert poller.stop() == 0, poller.log()
        restarted = rig.poller()
        restarted.start()
        cycles = len(rig.events("poll.cycle"))
        assert wait_for(lambda: len(rig.events("poll.cycle")) >= cycles + 3, timeout=30)
        status = json.loads(rig.cli("status", "-o", "json", check=False).stdout)
    finally:
        rig.close()
    (stalled,) = rig.events("session.stalled")  # once, across the restart
    assert stalled["workItem"] == ref
    assert stalled["detail"]["reason"] == "dead-with-open-item"
    assert [a["item"] for a in status["attention"]] == [ref]
    assert status["attention"][0]["remedy"] == f"the-loop sessions start {ref}"

    hooks, slacks = receiver.ok("/hook"), receiver.ok(SLACK_PATH)
    print(
        f"\nposts: {len(receiver.posts)}; webhook delivered {len(hooks)}, slack {len(slacks)}; "
        f"forged {len(receiver.forged)}; notify.failed {len(rig.events('notify.failed'))}"
    )
    assert len(hooks) == 1  # delivered once, after two refusals
    assert len(slacks) == 1
    assert receiver.forged == []
    message = json.loads(hooks[0])
    assert message["event"] == "session.stalled"
    assert message["item"] == ref
    assert message["reason"] == "dead-with-open-item"
    assert message["remedy"] == f"the-loop sessions start {ref}"
    slack = json.loads(slacks[0])
    assert ref in slack["text"]
    failed = rig.events("notify.failed")
    assert len(failed) == 4  # two refusals on each target
    assert all(e["detail"]["willRetry"] for e in failed)
    sent = rig.events("notify.sent")
    assert sorted(e["detail"]["target"] for e in sent) == ["slack", "webhook"]
    # No secret value in any post, nor in the event log.
    everything = b"".join(b + json.dumps(h).encode() for _, h, b in receiver.posts)
    everything += rig.events_path.read_bytes()
    for value in (NOTIFY_SECRET, SLACK_PATH, TOKEN_VALUE, SECRET):
        assert value.encode() not in everything, value
