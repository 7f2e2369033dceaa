"""Slack: the Block Kit payload from status's dict, and posting to a loopback 'Slack'.

The stand-in answers like Slack's incoming webhooks: 200 with body "ok", or an error
status with a short reason ("invalid_payload", "no_service").
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loop_cli.errors import OperationalError, UsageError
from loop_cli.slack import WEBHOOK_ENV, post_status, render_status_blocks

STATUS = {
    "version": "0.1.0",
    "ok": False,
    "services": [
        {"name": "poller", "enabled": True, "running": True, "pid": 42, "state": "running"},
        {"name": "webhook", "enabled": True, "running": False, "pid": None, "state": "stale"},
    ],
    "sessions": {"registered": 6, "live": 6, "dead": 0, "absent": 0, "unknown": 0},
    "lastPollCycle": None,
    "health": [
        {"check": "poller", "state": "ok", "reason": "running, pid 42", "remedy": ""},
        {
            "check": "webhook",
            "state": "failing",
            "reason": "webhook not running: heartbeat stale: last beat 99s ago (pid 7)",
            "remedy": "restart it (its systemd unit) and read its log",
        },
    ],
    "sessionEnvironment": {
        "line": "sessions: 2 of 6 running with a stale environment"
        " - run: the-loop sessions restart --all",
        "counts": {"stale": 2},
    },
}


class FakeSlack:
    def __init__(self, status: int = 200, body: str = "ok") -> None:
        self.status, self.body = status, body
        self.received: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                outer.received.append(json.loads(self.rfile.read(length)))
                data = outer.body.encode()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/services/T000/B000/XXXX"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeSlack:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_blocks_carry_services_sessions_and_the_drift_line():
    payload = render_status_blocks(STATUS)
    text = json.dumps(payload)
    assert payload["blocks"][0]["type"] == "header"
    assert payload["blocks"][0]["text"]["text"] == "the-loop: NOT OK: webhook"
    assert "heartbeat stale: last beat 99s ago" in text  # the reason...
    assert "restart it (its systemd unit)" in text  # ...and the remedy
    assert "webhook not running" in payload["text"]  # the fallback says it too
    assert "webhook: *NOT RUNNING* (stale)" in text
    assert "2 of 6 running with a stale environment" in text
    assert "2 of 6 running with a stale environment" in payload["text"]


def test_no_drift_line_when_nothing_is_stale():
    quiet = {**STATUS, "ok": True, "sessionEnvironment": {"counts": {"stale": 0}}}
    assert "stale environment" not in json.dumps(render_status_blocks(quiet))


def test_post_reaches_the_webhook():
    with FakeSlack() as slack:
        post_status(render_status_blocks(STATUS), environ={WEBHOOK_ENV: slack.url})
    assert slack.received == [render_status_blocks(STATUS)]


def test_rejected_post_is_a_clear_error_without_the_url():
    with FakeSlack(status=404, body="no_service") as slack, pytest.raises(OperationalError) as err:
        post_status({"text": "x"}, environ={WEBHOOK_ENV: slack.url})
    assert "HTTP 404" in str(err.value)
    assert "no_service" in str(err.value)
    assert "XXXX" not in str(err.value)
    assert err.value.exit_code == 1


def test_unreachable_webhook_is_a_clear_error(capsys):
    with FakeSlack() as slack:
        url = slack.url
    with pytest.raises(OperationalError, match="posting status to Slack failed") as err:
        post_status({"text": "x"}, environ={WEBHOOK_ENV: url})
    assert "XXXX" not in str(err.value)
    captured = capsys.readouterr()
    assert "XXXX" not in captured.err + captured.out


@pytest.mark.parametrize("value", ["", "ftp://example/hook", "not a url"])
def test_webhook_variable_must_be_an_http_url(value):
    with pytest.raises(UsageError, match=WEBHOOK_ENV) as err:
        post_status({"text": "x"}, environ={WEBHOOK_ENV: value} if value else {})
    if value:
        assert value not in str(err.value)
