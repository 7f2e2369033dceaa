"""The bundled demo agent: a small, friendly stand-in for a coding-agent CLI.

Modelled on Claude Code's command line so the-loop drives it exactly as it drives a real
harness: `--session-id ID PROMPT` starts a conversation under a pre-assigned id,
`--resume ID PROMPT` continues one (and fails fast, exit 1, on an id it does not know).
Each message (the prompt, then every bracketed paste followed by Enter) is appended to
`<dir>/<ID>.jsonl` and printed back, so a human attaching to the tmux session sees it.
The directory comes from `--conversations DIR`, else `$THE_LOOP_DEMO_AGENT_DIR`, else
`<user state dir>/demo-agent`.

Deliberately stdlib only: it starts in a few milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

DIR_ENV = "THE_LOOP_DEMO_AGENT_DIR"
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"


def conversations_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    from platformdirs import user_state_path

    return user_state_path("the-loop") / "demo-agent"


def read_conversation(path: Path) -> list[dict[str, Any]]:
    """Every record of a conversation file (used by `the-loop demo` to verify)."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            records.append(json.loads(line))
    return records


class Conversation:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        record = {"ts": time.time(), "pid": os.getpid(), **record}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def messages(self) -> int:
        if not self.path.exists():
            return 0
        return sum(1 for r in read_conversation(self.path) if r.get("role") == "user")


class Screen:
    """Output that works both in raw tty mode (needs CR LF) and on a pipe."""

    def __init__(self, raw: bool) -> None:
        self.raw = raw

    def say(self, text: str = "") -> None:
        nl = "\r\n" if self.raw else "\n"
        os.write(1, (text.replace("\n", nl) + nl).encode("utf-8", "replace"))


def handle(conv: Conversation, screen: Screen, text: str, via: str) -> None:
    conv.append({"role": "user", "via": via, "text": text})
    n = conv.messages()
    screen.say(f"--- message {n} ({len(text)} chars, via {via}) ---")
    screen.say(text)
    screen.say(f"demo-agent: got it. That makes {n} message(s) in this conversation.")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="demo-agent", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--session-id", help="start a conversation with this id")
    group.add_argument("--resume", help="resume the conversation with this id")
    parser.add_argument("--conversations", help=f"directory of conversations (${DIR_ENV})")
    parser.add_argument("prompt", nargs="?", default=None)
    return parser.parse_args(argv)


def run(argv: list[str]) -> int:
    args = _parse(argv)
    conv_id = args.session_id or args.resume
    if not _ID_RE.fullmatch(conv_id):
        print(f"demo-agent: invalid conversation id {conv_id!r}", file=sys.stderr)
        return 2
    directory = conversations_dir(args.conversations)
    directory.mkdir(parents=True, exist_ok=True)
    conv = Conversation(directory / f"{conv_id}.jsonl")
    if args.resume and not conv.path.exists():
        print(f"No conversation found with session ID: {conv_id}", file=sys.stderr)
        return 1
    if args.session_id and conv.path.exists():
        print(f"Session ID {conv_id} is already in use.", file=sys.stderr)
        return 1

    raw = os.isatty(0)
    # The terminal is raw with bracketed paste on BEFORE "start" is recorded: whoever
    # waits for that record may paste at once, and the paste must arrive bracketed.
    restore = _raw_terminal() if raw else None
    try:
        screen = Screen(raw)
        conv.append({"event": "resume" if args.resume else "start", "cwd": os.getcwd()})
        verb = "resumed" if args.resume else "started"
        screen.say(f"demo-agent: conversation {conv_id} {verb} (pid {os.getpid()}).")
        if args.resume:
            screen.say(f"demo-agent: {conv.messages()} earlier message(s) remembered.")
        if args.prompt:
            handle(conv, screen, args.prompt, "prompt")
        screen.say("demo-agent: waiting for messages (paste, then Enter).")
        if raw:
            _read_messages(conv, screen)
        else:
            _loop_pipe(conv, screen)
        return 0
    finally:
        if restore is not None:
            restore()


def _loop_pipe(conv: Conversation, screen: Screen) -> None:
    for line in sys.stdin:
        if line.strip():
            handle(conv, screen, line.rstrip("\n"), "stdin")


def _raw_terminal() -> Callable[[], None]:
    """Put the terminal in raw mode with bracketed paste on; return what undoes it
    (also run on SIGTERM/SIGHUP)."""
    import termios
    import tty

    saved = termios.tcgetattr(0)

    def restore() -> None:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
        os.write(1, b"\x1b[?2004l")

    def on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(0)  # the caller's `finally` restores the terminal

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    tty.setraw(0)
    os.write(1, b"\x1b[?2004h")  # ask the terminal (tmux) for bracketed pastes
    return restore


def _read_messages(conv: Conversation, screen: Screen) -> None:
    pending = b""  # bytes not yet interpreted
    message = bytearray()  # the message being composed (pastes and typing)
    in_paste = False
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        while pending:
            if in_paste:
                end = pending.find(PASTE_END)
                if end < 0:
                    keep = len(PASTE_END) - 1  # an end marker may be split across reads
                    message += pending[:-keep] if len(pending) > keep else b""
                    pending = pending[-keep:] if len(pending) > keep else pending
                    break
                message += pending[:end]
                pending = pending[end + len(PASTE_END) :]
                in_paste = False
                continue
            if pending.startswith(PASTE_START):
                pending = pending[len(PASTE_START) :]
                in_paste = True
                continue
            if PASTE_START.startswith(pending):
                break  # maybe the start of a paste marker: wait for more bytes
            byte, pending = pending[:1], pending[1:]
            if byte in (b"\r", b"\n"):
                text = message.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
                message.clear()
                if text.strip():
                    handle(conv, screen, text, "paste")
            elif byte in (b"\x03", b"\x04") and not message:
                screen.say("demo-agent: bye.")
                return
            elif byte == b"\x7f":
                del message[-1:]
            elif byte >= b" " or byte == b"\t":
                message += byte
                os.write(1, byte)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
