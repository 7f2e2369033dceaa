"""The last turns of a conversation, read from the end of the harness's own file.

`sessions peek --transcript` shows what the agent and its people said lately without
attaching to its screen. A conversation file grows for weeks (megabytes), so it is read
backwards in blocks until enough turns are found, never whole. Consecutive records of
one speaker (Claude Code writes each block of a reply as a record of its own) make one
turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DispatchError

__all__ = ["TranscriptUnavailable", "Turn", "last_turns", "records_backwards"]

_BLOCK = 64 * 1024


class TranscriptUnavailable(DispatchError):
    """The adapter cannot show this conversation's turns (the message says why)."""


@dataclass(frozen=True)
class Turn:
    """One speaker's turn: `role` is "user" or "assistant"."""

    role: str
    text: str


def records_backwards(path: Path, block: int = _BLOCK) -> Iterator[dict[str, Any]]:
    """The file's whole JSON-object lines, last first (a half-written last line and
    lines that are not JSON objects are skipped). Raises OSError when unreadable."""
    with path.open("rb") as handle:
        position = handle.seek(0, os.SEEK_END)
        pending = b""  # the start of a line whose beginning lies further back
        past_partial = False  # the bytes after the file's last newline were set aside
        while position > 0:
            step = min(block, position)
            position -= step
            handle.seek(position)
            lines = (handle.read(step) + pending).split(b"\n")
            pending = lines.pop(0)
            if not past_partial:
                if not lines:
                    continue  # no newline yet: all of it is the unfinished last line
                lines.pop()  # after the last newline: empty, or a line being written
                past_partial = True
            yield from _objects(reversed(lines))
        if past_partial:
            yield from _objects([pending])


def _objects(lines: Any) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def last_turns(
    path: Path, count: int, turn_of: Callable[[dict[str, Any]], Turn | None]
) -> list[Turn]:
    """The last `count` turns of the file, oldest first; `turn_of` reads one record
    (None: not a turn, e.g. a tool result or a bookkeeping record)."""
    turns: list[Turn] = []
    try:
        for record in records_backwards(path):
            turn = turn_of(record)
            if turn is None or not turn.text.strip():
                continue
            if turns and turns[-1].role == turn.role:
                turns[-1] = Turn(turn.role, f"{turn.text}\n{turns[-1].text}")
                continue
            if len(turns) == count:
                break
            turns.append(turn)
    except OSError as exc:
        raise TranscriptUnavailable(f"cannot read {path.name}: {exc.strerror or exc}") from None
    return turns[::-1]
