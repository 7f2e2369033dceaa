"""Control words: a comment whose first non-empty line is `the-loop VERB` is a command.

Pure text rules (issue 24), shared by every ingress and the dispatcher: the word must
open a line of ordinary text (never inside a `>` quote, a fenced or an indented code
block), case-insensitive. The first non-empty line decides whether the comment is a
command at all; any other line that is a control word too must name the same verb, or
the comment is ambiguous and nothing runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["ControlWord", "Hold", "Verb", "parse_control"]


class Verb(str, Enum):
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    START = "start"
    RESTART = "restart"
    STATUS = "status"


class Hold(str, Enum):
    """An item's control state: its arriving events wait in the inbox."""

    PAUSED = "paused"  # the harness runs on
    STOPPED = "stopped"  # the harness was ended


@dataclass(frozen=True)
class ControlWord:
    """A comment that is a command: `verb`, or why it cannot run (`problem`)."""

    verb: Verb | None
    word: str  # the verb as written (lower case), for the reply
    problem: str = ""  # "unknown_verb" | "ambiguous" | ""


_LINE = re.compile(r"[ ]{0,3}the-loop[ \t]+([^\s]+)(.*)$", re.IGNORECASE)
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")
_VERBS = frozenset(v.value for v in Verb)
_MAX_LINES = 2000  # a comment is bounded; the scan is too


def _text_lines(body: str) -> list[str]:
    """The lines of ordinary text: code fences, indented code and quotes left out."""
    out: list[str] = []
    fence: str | None = None
    previous_blank = True
    for raw in body.replace("\r\n", "\n").replace("\r", "\n").split("\n")[:_MAX_LINES]:
        line = raw.rstrip()
        opened = _FENCE.match(line)
        if fence is not None:
            if opened is not None and _closes(opened.group(1), line, fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        indented = raw.startswith(("    ", "\t"))
        if indented and previous_blank and line.strip():
            continue  # indented code (a paragraph's continuation stays text)
        if line.lstrip().startswith(">"):
            out.append("")  # a quote is never a command, nor a blank
            previous_blank = False
            continue
        out.append("" if indented else line)
        previous_blank = not line.strip()
    return out


def _closes(marker: str, line: str, fence: str) -> bool:
    """A closing fence: the same character, at least as long, nothing after it."""
    return marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip(" " + fence[0])


def parse_control(body: str) -> ControlWord | None:
    """The command `body` is, or None when it is an ordinary comment."""
    lines = _text_lines(body or "")
    first = next((line for line in lines if line.strip()), "")
    if not _quoted_or_code_first(body or "", first):
        return None
    word = _word(first)
    if word is None:
        return None
    words = {w for w in map(_word, lines) if w is not None}
    if len(words) > 1:
        return ControlWord(None, word[:40], "ambiguous")
    try:
        return ControlWord(Verb(word), word)
    except ValueError:
        return ControlWord(None, word[:40], "unknown_verb")


def _word(line: str) -> str | None:
    """The verb a line commands: a known verb (words may follow it), or an unknown word
    standing alone (a typo: refused, never pasted); None for ordinary text."""
    m = _LINE.match(line)
    if m is None:
        return None
    word = m.group(1).lower()
    if word in _VERBS or not m.group(2).strip():
        return word
    return None


def _quoted_or_code_first(body: str, first: str) -> bool:
    """The first non-empty line of the whole comment is the first text line: a comment
    opening with a quote or code is not a command even if a text line follows."""
    for raw in body.replace("\r\n", "\n").replace("\r", "\n").split("\n")[:_MAX_LINES]:
        if raw.strip():
            return raw.rstrip() == first and bool(first)
    return False
