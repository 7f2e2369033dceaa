"""Text for a human's terminal: control sequences neutralised, visibly.

Titles, bodies, authors and refs come from anyone who can write on a ticket. Printed
raw, an escape sequence (OSC, CSI) can retitle the operator's terminal, hide lines or
rewrite what was printed before. Everything a command renders for a human passes
through `printable`; JSON output keeps the exact text (json escapes what it must).
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_KEEP_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, lines: bool = False) -> str:
    """`text` with every control character shown as `\\xNN` (`\\uNNNN`); with `lines`,
    newlines and tabs are kept (a body shown as a block)."""
    pattern = _CONTROL_KEEP_LINES if lines else _CONTROL
    return pattern.sub(_visible, str(text))
