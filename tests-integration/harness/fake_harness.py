#!/usr/bin/env python3
"""A fake coding-agent harness that models Claude Code's CLI, for tests (stdlib only).

Contract (other packages' tests rely on it; change it only compatibly):

    fake_harness.py [--session-id ID | --resume ID] [PROMPT]

* Conversations live in ``$FAKE_HARNESS_DIR/<ID>.jsonl`` (default: the current
  directory). ``--session-id ID`` starts conversation ID (a new file, or appends to an
  existing one); without either flag a uuid4 id is made up, as Claude Code does.
* ``--resume ID`` of an unknown ID prints ``No conversation found with session ID: ID``
  to stderr and exits 1 at once (well within a second), as Claude Code does.
* On start it appends one JSON line to the conversation file::

      {"event": "start", "mode": "fresh"|"resume", "session_id": ID, "pid": PID,
       "cwd": CWD, "prompt": PROMPT-or-null, "argv": [...],
       "env_fp": {NAME: sha256(value)[:12] for every environment variable}}

  Fingerprints only: no environment value is ever written anywhere.
* It puts its terminal in raw mode, enables bracketed paste (``ESC[?2004h``) and records
  every pasted message: the text between ``ESC[200~`` and ``ESC[201~``, once the Enter
  that follows arrives, as ``{"event": "message", "text": TEXT, "pid": PID,
  "session_id": ID, "bracketed": true}``. Typed (unbracketed) input is recorded per
  Enter with ``"bracketed": false``. Without a terminal it reads lines from stdin.
* SIGTERM / SIGHUP: appends ``{"event": "exit", "signal": NAME, "pid": PID}`` and exits 0.
* Knobs (environment): ``FAKE_HARNESS_EXIT_AFTER=SECONDS`` exits 0 after that long
  (``{"event": "exit", "reason": "exit_after"}``); ``FAKE_HARNESS_FAIL_RESUME=1`` makes
  every ``--resume`` fail like an unknown id; ``FAKE_HARNESS_EDIT=FILE`` makes it edit
  FILE (relative to its cwd, as an agent edits its checkout): one line
  ``<session_id> start|message N`` appended on start and per message.
* Like Claude Code it switches to the alternate screen (``ESC[?1049h``) once its
  terminal is ready, and with ``CLAUDE_CONFIG_DIR`` set it also appends each user turn
  (the prompt, each message) as Claude Code does, ``{"type": "user", "message":
  {"role": "user", "content": TEXT}}``, to ``$CLAUDE_CONFIG_DIR/projects/fake/<ID>.jsonl``
  (the receipts the claude-code adapter reads), and when that turn is over (at once, or
  after ``FAKE_HARNESS_TURN_SECONDS``) its end as Claude Code 2.1.332 writes it: an
  ``assistant`` record with ``stop_reason: end_turn`` and a ``system`` record with
  ``subtype: turn_duration`` (the activity signal the adapter reads).
* It shows a one-line status on its screen per message (``[fake-harness] message N``)
  so ``capture-pane`` has something to read.
* ``FAKE_HARNESS_TURN_SECONDS=S`` models a turn's work, as Claude Code's: after each
  message (and the prompt) it is busy for S seconds, redrawing a status line
  (``working 1.2s (esc to interrupt)``) every 0.2 s, then records ``{"event":
  "turn_done", "turn": N}`` and shows ``[fake-harness] idle``. A SIGTERM mid-turn is
  recorded as ``{"event": "exit", "signal": ..., "mid_turn": true}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import sys
import time
import uuid
from pathlib import Path

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"


def _fingerprint(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]


class Conversation:
    def __init__(self, directory: Path, session_id: str) -> None:
        self.path = directory / f"{session_id}.jsonl"
        self.session_id = session_id
        claude = os.environ.get("CLAUDE_CONFIG_DIR")
        self.claude_path = (
            Path(claude) / "projects" / "fake" / f"{session_id}.jsonl" if claude else None
        )

    def user_turn(self, text: str) -> None:
        """Claude Code's own record of a submitted turn (only with CLAUDE_CONFIG_DIR)."""
        if self.claude_path is None:
            return
        self.claude_path.parent.mkdir(parents=True, exist_ok=True)
        record = {"type": "user", "message": {"role": "user", "content": text}}
        with self.claude_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def turn_end(self, seconds: float) -> None:
        """Claude Code's records of a turn that ended (only with CLAUDE_CONFIG_DIR)."""
        if self.claude_path is None:
            return
        reply = {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "type": "message",
                "stop_reason": "end_turn",
                "content": [{"type": "text", "text": "ok"}],
            },
        }
        ended = {"type": "system", "subtype": "turn_duration", "durationMs": int(seconds * 1000)}
        with self.claude_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(reply) + "\n" + json.dumps(ended) + "\n")

    def append(self, record: dict) -> None:
        record.setdefault("pid", os.getpid())
        record.setdefault("session_id", self.session_id)
        record.setdefault("ts", time.time())
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _parse_args(argv: list[str]) -> tuple[str, str | None, str | None]:
    mode, session_id, prompt = "fresh", None, None
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--session-id", "--resume"):
            if not rest:
                sys.stderr.write(f"error: {arg} needs a value\n")
                sys.exit(2)
            session_id = rest.pop(0)
            mode = "resume" if arg == "--resume" else "fresh"
        elif arg == "--":
            prompt = " ".join(rest) if rest else None
            break
        elif arg.startswith("--"):
            continue  # other Claude Code flags are accepted and ignored
        else:
            prompt = arg if not rest else " ".join([arg, *rest])
            break
    return mode, session_id, prompt


class PasteReader:
    """Turns terminal bytes into messages: bracketed pastes confirmed by Enter, or lines."""

    def __init__(self, on_message) -> None:
        self.buf = b""
        self.in_paste = False
        self.paste = b""
        self.pending: bytes | None = None  # a finished paste waiting for its Enter
        self.typed = b""
        self.on_message = on_message

    def feed(self, data: bytes) -> None:
        self.buf += data
        while self.buf:
            if self.in_paste:
                end = self.buf.find(PASTE_END)
                if end < 0:
                    keep = len(PASTE_END) - 1
                    self.paste += self.buf[:-keep] if len(self.buf) > keep else b""
                    self.buf = self.buf[-keep:] if len(self.buf) > keep else self.buf
                    return
                self.paste += self.buf[:end]
                self.buf = self.buf[end + len(PASTE_END) :]
                self.in_paste = False
                self.pending = (self.pending or b"") + self.paste
                self.paste = b""
                continue
            start = self.buf.find(PASTE_START)
            if start < 0:
                # Keep a tail that may be the start of a marker split across reads.
                keep = max(
                    (k for k in range(1, len(PASTE_START)) if self.buf.endswith(PASTE_START[:k])),
                    default=0,
                )
                cut = len(self.buf) - keep
                chunk, self.buf = self.buf[:cut], self.buf[cut:]
                self._typed(chunk)
                return
            self._typed(self.buf[:start])
            self.buf = self.buf[start + len(PASTE_START) :]
            self.in_paste = True

    def _typed(self, chunk: bytes) -> None:
        for byte in chunk:
            ch = bytes([byte])
            if ch in (b"\r", b"\n"):
                if self.pending is not None:
                    self.on_message(self.pending, True)
                    self.pending = None
                    self.typed = b""
                elif self.typed:
                    self.on_message(self.typed, False)
                    self.typed = b""
            elif ch == b"\x03":  # Ctrl-C behaves like a signal in raw mode
                raise KeyboardInterrupt
            else:
                self.typed += ch


def main(argv: list[str]) -> int:
    mode, session_id, prompt = _parse_args(argv)
    directory = Path(os.environ.get("FAKE_HARNESS_DIR") or os.getcwd())
    directory.mkdir(parents=True, exist_ok=True)
    if mode == "resume":
        assert session_id is not None
        known = (directory / f"{session_id}.jsonl").exists()
        if not known or os.environ.get("FAKE_HARNESS_FAIL_RESUME") == "1":
            sys.stderr.write(f"No conversation found with session ID: {session_id}\n")
            sys.stderr.flush()
            return 1
    if session_id is None:
        session_id = str(uuid.uuid4())
    convo = Conversation(directory, session_id)

    turn_seconds = float(os.environ.get("FAKE_HARNESS_TURN_SECONDS") or 0)
    busy_until: float | None = None

    def on_signal(signum, _frame) -> None:
        record = {"event": "exit", "signal": signal.Signals(signum).name}
        if busy_until is not None:
            record["mid_turn"] = True
        convo.append(record)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    count = 0
    edit = os.environ.get("FAKE_HARNESS_EDIT")

    def edit_file(what: str) -> None:
        if edit:
            with open(edit, "a", encoding="utf-8") as fh:
                fh.write(f"{session_id} {what}\n")

    def on_message(data: bytes, bracketed: bool) -> None:
        nonlocal count, busy_until
        count += 1
        if turn_seconds:
            busy_until = time.monotonic() + turn_seconds
        text = data.decode("utf-8", "replace")
        edit_file(f"message {count}")
        convo.append({"event": "message", "text": text, "bracketed": bracketed})
        convo.user_turn(text)
        if not turn_seconds:
            convo.turn_end(0)
        if tty:
            os.write(sys.stdout.fileno(), f"[fake-harness] message {count}\r\n".encode())

    exit_after = os.environ.get("FAKE_HARNESS_EXIT_AFTER")
    deadline = time.monotonic() + float(exit_after) if exit_after else None
    fd = sys.stdin.fileno()
    tty = os.isatty(fd)
    saved = None
    if tty:
        import termios
        import tty as ttymod

        saved = termios.tcgetattr(fd)
        ttymod.setraw(fd, termios.TCSANOW)
        os.write(sys.stdout.fileno(), b"\x1b[?1049h\x1b[?2004h")
        os.write(sys.stdout.fileno(), f"[fake-harness] {mode} {session_id}\r\n".encode())
    edit_file("start")
    # "start" is written once the terminal is raw and bracketed paste is on: a test that
    # waits for it may paste at once, as into a harness whose prompt is showing.
    convo.append(
        {
            "event": "start",
            "mode": mode,
            "cwd": os.getcwd(),
            "prompt": prompt,
            "argv": argv,
            "env_fp": {k: _fingerprint(v) for k, v in sorted(os.environ.items())},
        }
    )
    if prompt:
        convo.user_turn(prompt)
        if turn_seconds:
            busy_until = time.monotonic() + turn_seconds
        else:
            convo.turn_end(0)
    reader = PasteReader(on_message)
    begun = time.monotonic()
    try:
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if busy_until is not None:
                timeout = 0.2 if timeout is None else min(timeout, 0.2)
            ready, _, _ = select.select([fd], [], [], timeout)
            if busy_until is not None and not ready:
                now = time.monotonic()
                if now >= busy_until:
                    busy_until = None
                    convo.append({"event": "turn_done", "turn": count})
                    convo.turn_end(turn_seconds)
                    if tty:
                        os.write(sys.stdout.fileno(), b"\r\x1b[K[fake-harness] idle\r\n")
                elif tty:
                    status = f"\r\x1b[Kworking {now - begun:.1f}s (esc to interrupt)"
                    os.write(sys.stdout.fileno(), status.encode())
                continue
            if not ready:
                convo.append({"event": "exit", "reason": "exit_after"})
                return 0
            data = os.read(fd, 65536)
            if not data:
                convo.append({"event": "exit", "reason": "eof"})
                return 0
            reader.feed(data)
    except KeyboardInterrupt:
        convo.append({"event": "exit", "signal": "SIGINT"})
        return 0
    finally:
        if saved is not None:
            import termios

            os.write(sys.stdout.fileno(), b"\x1b[?2004l\x1b[?1049l")
            termios.tcsetattr(fd, termios.TCSANOW, saved)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
