"""A model API on loopback, so the real coding-agent CLIs run with no account and offline.

It speaks just enough of two wire formats, streaming as the real services do:

- Anthropic Messages (`POST /v1/messages`, Claude Code): SSE `message_start`,
  `content_block_start`, `content_block_delta`, `content_block_stop`, `message_delta`,
  `message_stop`; or one JSON message when the request does not ask to stream.
- OpenAI Responses (`POST /v1/responses`, Codex): SSE `response.created`,
  `response.output_item.added`, `response.output_text.delta`, `response.output_item.done`,
  `response.completed`.

Every request is recorded (path and JSON body), so a test asks what the model really saw
rather than what the-loop says it sent. The reply is a short fixed text naming how many
user turns the request carried and the reply's own id: the agents stay idle between
turns. Only a user turn that carries `LOOP-FAKE-TOOL:bash` (or `:write`, `:question`:
Claude Code's) gets a tool call instead, once (a request that already answers a tool
call gets the text): so a test can make the real CLI draw its permission, question or
approval prompt.

A turn can be held open: when the request's newest user turn holds `loop-hold-<N>s`, the
reply streams for about N seconds (a text delta every quarter second, as a slow model
streams tokens; the Messages API's `ping` events keep the stream alive the same way).
Every streamed reply is recorded as a `Response`: begun, and whether the last byte of
it was written to a client still connected (`whole`), so a test can prove no turn was
cut by a restart.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeModelServer", "Request", "Response", "hold_marker", "user_texts"]

REPLY = "Noted."
TOOL_MARK = "LOOP-FAKE-TOOL:"
TOOL_COMMAND = "touch loop-fake-tool.txt"
# Codex's shell tools, by the name the request offers, and their arguments: asking to
# run outside the sandbox is what makes Codex ask the operator (approval on-request).
_ESCALATE = {"sandbox_permissions": "require_escalated", "justification": "to create a file"}
_CODEX_SHELLS: dict[str, dict[str, Any]] = {
    "shell": {"command": ["bash", "-lc", TOOL_COMMAND], **_ESCALATE},
    "shell_command": {"command": TOOL_COMMAND, **_ESCALATE},
    "exec_command": {"cmd": TOOL_COMMAND, **_ESCALATE},
}

TICK = 0.25  # seconds between the deltas of a held reply
_HOLD = re.compile(r"loop-hold-(\d{1,3}(?:\.\d+)?)s")


def hold_marker(seconds: float) -> str:
    """The text that makes the fake model hold its reply open for `seconds`."""
    return f"loop-hold-{seconds:g}s"


@dataclass(frozen=True)
class Request:
    """One recorded request: the API it used, its JSON body, when it arrived
    (`time.monotonic()`, for latency figures)."""

    path: str
    body: dict[str, Any]
    received: float = field(default_factory=time.monotonic)

    @property
    def api(self) -> str:
        return "responses" if self.path.rstrip("/").endswith("/responses") else "messages"


@dataclass
class Response:
    """One streamed reply: `began` when its first byte went out, `whole` once its last
    byte was written to a client that was still there (False: the client went away
    mid-stream, the turn was cut; None: still streaming)."""

    id: str
    path: str
    began: float
    held: float
    whole: bool | None = None
    error: str | None = None


def _texts(content: Any) -> Iterator[str]:
    """Text pieces of a message's content (a string or a list of typed blocks)."""
    if isinstance(content, str):
        yield content
        return
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user turns a request carries, oldest first (either API's shape)."""
    turns = body.get("messages") if "messages" in body else body.get("input")
    if isinstance(turns, str):
        return [turns]
    out = []
    for turn in turns or []:
        if isinstance(turn, dict) and turn.get("role") == "user":
            out.append("\n".join(_texts(turn.get("content"))))
    return out


def wanted_tool(body: dict[str, Any]) -> str | None:
    """The tool a request's newest user turn asks for, unless the request already
    carries a tool's answer as its last input."""
    last: Any = None
    for key in ("messages", "input"):
        items = body.get(key)
        if isinstance(items, list) and items:
            last = items[-1]
    if isinstance(last, dict):
        if last.get("type") == "function_call_output":
            return None
        content = last.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return None
    texts = user_texts(body)
    if not texts or TOOL_MARK not in texts[-1]:
        return None
    return texts[-1].split(TOOL_MARK, 1)[1].split()[0].strip(".,;:") or None


def _claude_tool(kind: str) -> tuple[str, dict[str, Any]]:
    if kind == "question":
        question = {
            "question": "Which colour should the button be?",
            "header": "Colour",
            "options": [
                {"label": "Blue", "description": "the brand colour"},
                {"label": "Green", "description": "the success colour"},
            ],
            "multiSelect": False,
        }
        return "AskUserQuestion", {"questions": [question]}
    if kind == "write":
        return "Write", {"file_path": "loop-fake-tool.txt", "content": "made by a fake model\n"}
    return "Bash", {"command": TOOL_COMMAND, "description": "Create a file"}


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _ticks(held: float) -> int:
    return int(held / TICK) if held > 0 else 0


def _anthropic_stream(model: str, text: str, held: float = 0.0) -> Iterator[bytes]:
    mid = f"msg_{uuid.uuid4().hex[:24]}"
    usage = {"input_tokens": 10, "output_tokens": 0}
    message: dict[str, Any] = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield _sse("message_start", {"type": "message_start", "message": message})
    yield _sse(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    for _ in range(_ticks(held)):
        time.sleep(TICK)
        yield _sse("ping", {"type": "ping"})
        yield _sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "."},
            },
        )
    yield _sse(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    )
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 2},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def _anthropic_tool_stream(model: str, kind: str) -> Iterator[bytes]:
    name, args = _claude_tool(kind)
    message: dict[str, Any] = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 0},
    }
    block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": {}}
    yield _sse("message_start", {"type": "message_start", "message": message})
    yield _sse(
        "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    )
    delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
    yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def _codex_shell(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    offered = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
    for name, args in _CODEX_SHELLS.items():
        if name in offered:
            return name, args
    return "shell", _CODEX_SHELLS["shell"]


def _responses_tool_stream(model: str, body: dict[str, Any]) -> Iterator[bytes]:
    name, args = _codex_shell(body)
    rid = f"resp_{uuid.uuid4().hex[:24]}"
    base = {"id": rid, "object": "response", "model": model, "output": []}
    yield _sse(
        "response.created",
        {"type": "response.created", "response": {**base, "status": "in_progress"}},
    )
    item = {
        "id": f"fc_{uuid.uuid4().hex[:24]}",
        "type": "function_call",
        "call_id": f"call_{uuid.uuid4().hex[:24]}",
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }
    yield _sse(
        "response.output_item.added",
        {"type": "response.output_item.added", "output_index": 0, "item": item},
    )
    done = {**item, "arguments": json.dumps(args), "status": "completed"}
    yield _sse(
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    )
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    completed = {**base, "status": "completed", "output": [done], "usage": usage}
    yield _sse("response.completed", {"type": "response.completed", "response": completed})


def _anthropic_message(model: str, text: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }


def _responses_stream(model: str, text: str, held: float = 0.0) -> Iterator[bytes]:
    rid = f"resp_{uuid.uuid4().hex[:24]}"
    item_id = f"msg_{uuid.uuid4().hex[:24]}"
    base = {"id": rid, "object": "response", "model": model, "output": []}
    yield _sse(
        "response.created",
        {"type": "response.created", "response": {**base, "status": "in_progress"}},
    )
    item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress"}
    yield _sse(
        "response.output_item.added",
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
    )
    dots = _ticks(held)
    for _ in range(dots):
        time.sleep(TICK)
        yield _sse(
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": ".",
            },
        )
    yield _sse(
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "delta": text,
        },
    )
    text = "." * dots + text
    done = {
        **item,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    yield _sse(
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    )
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12,
    }
    completed = {**base, "status": "completed", "output": [done], "usage": usage}
    yield _sse("response.completed", {"type": "response.completed", "response": completed})


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the recorded requests are the log

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, chunks: Iterator[bytes], response: Response) -> None:
        """Stream the chunks, recording whether the client took the reply whole: a
        client that went away makes a write fail (reset, broken pipe) or has closed
        its end before the last chunk (a peek at the socket sees it gone)."""
        self.server.began(response)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in chunks:
                if self._client_gone():
                    raise ConnectionResetError("the client closed the connection mid-reply")
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError as err:
            self.server.ended(response, False, f"{type(err).__name__}: {err}")
            return
        self.server.ended(response, True, None)

    def _client_gone(self) -> bool:
        """Has the client closed its end (EOF or reset waiting on the socket)?"""
        sock = self.connection
        try:
            sock.setblocking(False)
            try:
                data: bytes = sock.recv(1, socket.MSG_PEEK)
            finally:
                sock.setblocking(True)
        except (BlockingIOError, InterruptedError):
            return False  # nothing to read: still connected
        except OSError:
            return True
        return data == b""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/models"):
            self._reply(200, {"object": "list", "data": [], "models": []})
        else:
            self._reply(404, {"error": {"type": "not_found", "message": path}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._reply(400, {"error": {"type": "invalid_request_error", "message": "not JSON"}})
            return
        path = self.path.split("?", 1)[0]
        if not isinstance(body, dict):
            body = {}
        self.server.record(Request(path, body))
        model = str(body.get("model") or "fake-model")
        turns = user_texts(body)
        held = _held(turns)
        reply_id = f"reply-{uuid.uuid4().hex[:12]}"
        count = len(turns)
        text = f"{REPLY} ({count} user turn{'s' if count != 1 else ''} seen) [{reply_id}]"
        response = Response(reply_id, path, time.monotonic(), held)
        tool = wanted_tool(body)
        if path.rstrip("/").endswith("/count_tokens"):
            self._reply(200, {"input_tokens": 10})
        elif path.rstrip("/").endswith("/responses"):
            if tool is not None:
                self._stream(_responses_tool_stream(model, body), response)
            else:
                self._stream(_responses_stream(model, text, held), response)
        elif path.rstrip("/").endswith("/messages"):
            if body.get("stream") and tool is not None:
                self._stream(_anthropic_tool_stream(model, tool), response)
            elif body.get("stream"):
                self._stream(_anthropic_stream(model, text, held), response)
            else:
                self._reply(200, _anthropic_message(model, text))
        else:
            self._reply(404, {"error": {"type": "not_found", "message": path}})


def _held(turns: list[str]) -> float:
    """Seconds to hold the reply open: the newest user turn's `loop-hold-<N>s`, else 0."""
    found = _HOLD.search(turns[-1]) if turns else None
    return float(found.group(1)) if found else 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[Request]
    responses: list[Response]
    lock: threading.Lock

    def record(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    def began(self, response: Response) -> None:
        with self.lock:
            self.responses.append(response)

    def ended(self, response: Response, whole: bool, error: str | None) -> None:
        with self.lock:
            response.whole = whole
            response.error = error


@dataclass
class FakeModelServer:
    """The server on 127.0.0.1 (a free port unless given), in a background thread."""

    port: int = 0
    _server: _Server | None = field(default=None, init=False, repr=False)

    def start(self) -> FakeModelServer:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.requests = []
        server.responses = []
        server.lock = threading.Lock()
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, name="fake-model", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[Request]:
        assert self._server is not None, "the server is not running"
        with self._server.lock:
            return list(self._server.requests)

    def responses(self) -> list[Response]:
        """Every streamed reply begun so far, in order (copies: they change while streaming)."""
        assert self._server is not None, "the server is not running"
        with self._server.lock:
            return [replace(r) for r in self._server.responses]

    def user_turns_seen(self) -> list[list[str]]:
        """The user turns of each conversation request, in arrival order."""
        return [user_texts(r.body) for r in self.requests()]
