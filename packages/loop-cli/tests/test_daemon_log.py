"""A daemon's own output is its log (issue 21, point 2): one line per decision with ref
and delivery id, nothing for an idle cycle at the default level, `--log-level` and
`--log-format json`; bodies and values never appear."""

from __future__ import annotations

import json
import logging

import pytest

from loop_cli.daemonlog import JsonFormatter, TextFormatter, configured
from loop_dispatch.eventlog import EventLog


def test_every_event_reaches_the_logger_redacted(tmp_path, caplog: pytest.LogCaptureFixture):
    log = EventLog(tmp_path / "events.jsonl")
    with caplog.at_level(logging.DEBUG, logger="loop.events"):
        log.emit(
            "dispatch.failed",
            level="warning",
            source="dispatcher",
            work_item="local:loop#3",
            delivery_id="comment:local:9",
            detail={"reason": "spawn_failed", "error": "no folder", "body": "SECRET BODY"},
        )
        log.emit("poll.cycle", level="debug", source="poller", detail={"new": 0})
    records = [r for r in caplog.records if r.name == "loop.events"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, "dispatch.failed"),
        (logging.DEBUG, "poll.cycle"),
    ]
    text = TextFormatter().format(records[0])
    assert text.split(" ")[1:5] == ["WARNING", "dispatch.failed", "local:loop#3", "comment:local:9"]
    assert 'reason=spawn_failed error="no folder" redacted=["body"]' in text
    assert "SECRET BODY" not in text
    as_json = json.loads(JsonFormatter().format(records[0]))
    assert as_json["type"] == "dispatch.failed"
    assert as_json["deliveryId"] == "comment:local:9"
    assert "SECRET BODY" not in json.dumps(as_json)


def test_text_lines_neutralise_control_sequences(tmp_path, caplog):
    log = EventLog(tmp_path / "events.jsonl")
    with caplog.at_level(logging.INFO, logger="loop.events"):
        log.emit("dispatch.failed", source="t", detail={"error": "a\x1b]0;owned\x07b"})
    line = TextFormatter().format(caplog.records[-1])
    assert "\x1b" not in line
    assert "\\x1b" in line


def test_configured_restores_the_loggers(tmp_path):
    import io

    stream = io.StringIO()
    before = logging.getLogger("loop").level
    with configured("warning", "json", stream):
        EventLog(tmp_path / "e.jsonl").emit("poll.error", level="warning", source="t")
        EventLog(tmp_path / "e.jsonl").emit("session.spawned", level="info", source="t")
        logging.getLogger("loop.daemon").warning("plain %s", "line")
    EventLog(tmp_path / "e.jsonl").emit("poll.error", level="error", source="t")  # after
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line.get("type", line.get("message")) for line in lines] == ["poll.error", "plain line"]
    assert lines[1]["logger"] == "loop.daemon"
    assert logging.getLogger("loop").level == before


@pytest.fixture
def fast_config(write_config, tmux_socket, isolated):
    """The demo agent on a private server, polling every 0.2 s."""
    (isolated / "work").mkdir(exist_ok=True)
    return write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "polling": {"intervalSeconds": 0.2},
        }
    )


def test_poll_start_logs_decisions_not_idle_cycles(run_cli, fast_config):
    ref = run_cli("item", "open", "Log me").output.strip()
    result = run_cli("poll", "start", "--cycles", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    spawned = [line for line in lines if " session.spawned " in line]
    assert len(spawned) == 1, result.output
    assert f" INFO session.spawned {ref} opened:local:1 tmux_name=" in spawned[0]
    assert not [line for line in lines if "poll.cycle" in line or "poll cycle" in line]
    assert any("the-loop poller: stopped after 2 cycle(s)" in line for line in lines)


def test_poll_start_debug_and_json(run_cli, fast_config):
    run_cli("item", "open", "Log me as JSON")
    result = run_cli(
        "poll", "start", "--cycles", "2", "--log-level", "debug", "--log-format", "json"
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(records) == len(result.output.splitlines())  # every line is one object
    types = [r.get("type") for r in records]
    assert types.count("poll.cycle") == 2  # idle cycles show at debug
    assert "session.spawned" in types
    assert records[0]["logger"] == "loop.daemon"


def test_log_options_refuse_unknown_values(run_cli, loop_config):
    assert run_cli("poll", "start", "--log-level", "loud").exit_code == 2
    assert run_cli("gh-webhook", "start", "--log-format", "xml").exit_code == 2
