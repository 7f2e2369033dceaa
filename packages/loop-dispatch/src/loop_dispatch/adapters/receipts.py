"""Finding a pasted text in a harness's conversation file (JSON lines, append-only).

Both harnesses write each submitted user turn as one JSON line. The pasted text is the
framed event after loop-tmux neutralised it; the harness may wrap a long paste in tags
(Claude Code's `<pasted_content>`) or add reminders around it, so the match is on the
text with whitespace collapsed, and for a long text on its head and tail.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from loop_tmux import neutralise

__all__ = ["contains", "new_records", "text_of"]

_WHOLE_MAX = 600
_EDGE = 200


def _flat(text: str) -> str:
    return " ".join(text.split())


def contains(haystack: str, pasted: str) -> bool:
    """Does `haystack` hold the text that was pasted (as the harness saw it)?"""
    needle = _flat(neutralise(pasted))
    hay = _flat(haystack)
    if not needle:
        return False
    if len(needle) <= _WHOLE_MAX:
        return needle in hay
    return needle[:_EDGE] in hay and needle[-_EDGE:] in hay


def text_of(content: Any) -> str:
    """The text of a message content: a string, or a list of typed blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def new_records(path: Path, mark: int) -> Iterator[dict[str, Any]] | None:
    """The whole JSON lines past byte `mark`; None when the file cannot be read.

    A half-written last line is left for the next read; a line that is not JSON is
    skipped (the harness's file, not ours to judge).
    """
    try:
        with path.open("rb") as handle:
            handle.seek(mark)
            data = handle.read()
    except OSError:
        return None
    lines = data.split(b"\n")[:-1]
    return _parsed(lines)


def _parsed(lines: list[bytes]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def find(
    path: Path | None, mark: int, pasted: str, texts: Callable[[dict[str, Any]], str | None]
) -> str:
    """ "confirmed", "absent" or "unknown" for `pasted` in `path` past `mark`."""
    if path is None or not path.is_file():
        return "unknown"
    records = new_records(path, mark)
    if records is None:
        return "unknown"
    for record in records:
        text = texts(record)
        if text and contains(text, pasted):
            return "confirmed"
    return "absent"
