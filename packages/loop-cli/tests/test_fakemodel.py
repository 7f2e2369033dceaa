"""The loopback model API: both wire formats stream as the real services do, and every
request is recorded (real HTTP on loopback)."""

from __future__ import annotations

import json

import httpx

from loop_cli.fakemodel import FakeModelServer


def _events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_anthropic_messages_stream_and_record() -> None:
    with FakeModelServer() as server:
        body = {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "second"}]},
            ],
        }
        reply = httpx.post(f"{server.url}/v1/messages", json=body, timeout=10)
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        kinds = [k for k, _ in _events(reply.text)]
        assert kinds == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        delta = _events(reply.text)[2][1]["delta"]["text"]
        assert "2 user turns" in delta
        plain = httpx.post(f"{server.url}/v1/messages", json={**body, "stream": False})
        assert plain.json()["content"][0]["type"] == "text"
        assert server.user_turns_seen()[0] == ["first", "second"]
        assert [r.api for r in server.requests()] == ["messages", "messages"]


def test_openai_responses_stream_and_record() -> None:
    with FakeModelServer() as server:
        body = {
            "model": "m",
            "stream": True,
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {"role": "user", "content": [{"type": "input_text", "text": "hello codex"}]},
            ],
        }
        reply = httpx.post(f"{server.url}/v1/responses", json=body, timeout=10)
        kinds = [k for k, _ in _events(reply.text)]
        assert kinds == [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed",
        ]
        completed = _events(reply.text)[-1][1]["response"]
        assert completed["status"] == "completed"
        assert server.user_turns_seen() == [["hello codex"]]
        bad = httpx.post(f"{server.url}/v1/responses", content=b"{not json")
        assert bad.status_code == 400


def test_a_marked_turn_gets_one_tool_call_and_its_answer_gets_text() -> None:
    with FakeModelServer() as server:
        ask = {"role": "user", "content": "Please do it. LOOP-FAKE-TOOL:bash"}
        body = {"model": "m", "stream": True, "messages": [ask]}
        reply = httpx.post(f"{server.url}/v1/messages", json=body, timeout=10)
        events = dict(_events(reply.text))
        block = events["content_block_start"]["content_block"]
        assert (block["type"], block["name"]) == ("tool_use", "Bash")
        assert events["message_delta"]["delta"]["stop_reason"] == "tool_use"
        answered = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
        body["messages"] = [ask, {"role": "assistant", "content": "x"}, answered]
        again = dict(_events(httpx.post(f"{server.url}/v1/messages", json=body, timeout=10).text))
        assert again["content_block_start"]["content_block"]["type"] == "text"
        plain = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        text = dict(_events(httpx.post(f"{server.url}/v1/messages", json=plain, timeout=10).text))
        assert text["content_block_start"]["content_block"]["type"] == "text"


def test_codex_gets_its_offered_shell_tool_asking_to_leave_the_sandbox() -> None:
    with FakeModelServer() as server:
        body = {
            "model": "m",
            "tools": [{"type": "function", "name": "exec_command"}],
            "input": [{"role": "user", "content": "LOOP-FAKE-TOOL:bash"}],
        }
        reply = httpx.post(f"{server.url}/v1/responses", json=body, timeout=10)
        done = dict(_events(reply.text))["response.output_item.done"]["item"]
        assert (done["type"], done["name"]) == ("function_call", "exec_command")
        assert json.loads(done["arguments"])["sandbox_permissions"] == "require_escalated"
        body["input"].append({"type": "function_call_output", "call_id": "c", "output": "ok"})
        again = dict(_events(httpx.post(f"{server.url}/v1/responses", json=body, timeout=10).text))
        assert again["response.output_item.done"]["item"]["type"] == "message"
