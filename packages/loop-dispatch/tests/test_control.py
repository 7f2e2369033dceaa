"""The control-word parser (issue 24): which comments are commands, and which verb."""

from __future__ import annotations

import pytest

from loop_dispatch.control import ControlWord, Verb, parse_control

P, R, S = Verb.PAUSE, Verb.RESUME, Verb.STOP


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("the-loop pause", ControlWord(P, "pause")),
        ("THE-LOOP Resume", ControlWord(R, "resume")),
        ("the-loop stop\r\n", ControlWord(S, "stop")),
        ("\n\n   \r\nthe-loop pause\r\nback soon", ControlWord(P, "pause")),
        ("  the-loop pause", ControlWord(P, "pause")),  # up to 3 spaces: still text
        ("the-loop pause while I review", ControlWord(P, "pause")),
        ("the-loop\tstart", ControlWord(Verb.START, "start")),
        ("the-loop restart", ControlWord(Verb.RESTART, "restart")),
        ("the-loop status", ControlWord(Verb.STATUS, "status")),
        ("the-loop pause\nthe-loop pause", ControlWord(P, "pause")),  # same verb twice
        ("the-loop pause\nthe-loop resume", ControlWord(None, "pause", "ambiguous")),
        ("the-loop pause\r\n\r\nTHE-LOOP STOP", ControlWord(None, "pause", "ambiguous")),
        ("the-loop frobnicate", ControlWord(None, "frobnicate", "unknown_verb")),
        # a second verb inside a quote or code does not count against the first
        ("the-loop pause\n> the-loop resume", ControlWord(P, "pause")),
        ("the-loop pause\n\n    the-loop resume", ControlWord(P, "pause")),
        ("the-loop pause\n```\nthe-loop stop\n```", ControlWord(P, "pause")),
    ],
)
def test_commands(body: str, expected: ControlWord) -> None:
    assert parse_control(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "",
        "   \n\n",
        "please the-loop pause",  # mid-line
        "hello\nthe-loop pause",  # not the first non-empty line
        "> the-loop pause",  # quoted
        ">the-loop pause",
        "  > the-loop pause",
        "> quoted\n\nthe-loop pause",  # the comment opens with a quote
        "```\nthe-loop pause\n```",  # fenced code
        "~~~\nthe-loop pause\n~~~",
        "```sh\nx\n```\nthe-loop stop",  # the comment opens with code
        "    the-loop pause",  # indented code
        "\tthe-loop pause",
        "\n\n    the-loop pause",
        "the-loop is great today",  # an unknown word followed by a sentence: prose
        "the-loops pause",
        "the-loop",
        "`the-loop pause`",
    ],
)
def test_not_commands(body: str) -> None:
    assert parse_control(body) is None


def test_a_huge_comment_is_bounded() -> None:
    body = "the-loop pause\n" + "text\n" * 100_000 + "the-loop resume\n"
    assert parse_control(body) == ControlWord(P, "pause")  # lines past the bound unread
