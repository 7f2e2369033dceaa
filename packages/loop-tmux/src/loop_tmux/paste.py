"""Make untrusted text safe to paste: it can never leave a bracketed paste.

tmux below 3.7 pastes an embedded ``ESC[201~`` raw, which ends the bracketed paste
early and types the rest as keystrokes. So every control character except newline and
tab is replaced by a visible stand-in before the text reaches tmux: C0 controls and DEL
become their Unicode "control picture" (ESC -> U+241B), C1 controls become U+FFFD.
Carriage returns are newlines (CRLF and lone CR become LF) because tickets written on
the web arrive with CRLF.
"""

from __future__ import annotations

import re

_CRLF = re.compile(r"\r\n?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return "\ufffd"


def neutralise(text: str) -> str:
    """Return ``text`` with CR normalised to LF and other controls made visible."""
    return _CONTROL.sub(_picture, _CRLF.sub("\n", text))


def encode(text: str) -> bytes:
    """UTF-8 bytes of the neutralised text (a lone surrogate becomes `?`)."""
    return neutralise(text).encode("utf-8", errors="replace")
