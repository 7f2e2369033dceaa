"""Pure parts: names, command lines, paste neutralisation, versions, error texts."""

from __future__ import annotations

import pytest

from loop_tmux import Presence, SpawnOutcome, SpawnResult, neutralise, parse_version
from loop_tmux.commands import chain, directory_arg, env_flags, escape_arg, program_args
from loop_tmux.names import TERMINATE_NAME_RE, check_name, pane_target, session_target
from loop_tmux.paste import encode
from loop_tmux.runner import Answer, is_transient, says_absent
from loop_tmux.versions import NEW_SESSION_ENV, RESPAWN_PANE_ENV, supports


def test_targets_are_exact_match_forms() -> None:
    assert session_target("loop-foo-1") == "=loop-foo-1"
    assert pane_target("loop-foo-1") == "=loop-foo-1:"


@pytest.mark.parametrize(
    "name", ["loop-a.b", "loop-a:b", "loop #{x}", "", "=loop", "-loop", "loop a", "loop\n", "é"]
)
def test_names_tmux_would_rewrite_or_misread_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tmux session name"):
        check_name(name)


@pytest.mark.parametrize("name", ["loop-gh_a-b_c_1", "loop-local_x_d_y_2", "x", "_a+b"])
def test_names_tmux_keeps_verbatim_are_accepted(name: str) -> None:
    assert check_name(name) == name


def test_terminate_pattern() -> None:
    assert TERMINATE_NAME_RE.match("loop-a.b_c-1")
    assert not TERMINATE_NAME_RE.match("work")
    assert not TERMINATE_NAME_RE.match("loop-")
    assert not TERMINATE_NAME_RE.match("loop-a;b")
    assert not TERMINATE_NAME_RE.fullmatch("loop-a\n")


def test_arguments_ending_in_semicolon_are_escaped() -> None:
    assert escape_arg("fix this;") == "fix this\\;"
    assert escape_arg("a\\;") == "a\\\\;"
    assert escape_arg("a;b") == "a;b"
    assert chain(["new-session", "x;"], ["set-option", "y"]) == [
        "new-session",
        "x\\;",
        ";",
        "set-option",
        "y",
    ]


def test_single_argument_program_is_never_shell_parsed() -> None:
    assert program_args(["echo $(id)"]) == ["/bin/sh", "-c", 'exec "$0"', "echo $(id)"]
    assert program_args(["a", "b"]) == ["a", "b"]
    for bad in ([], "prog", ["a", 1], ["a\x00"]):
        with pytest.raises(ValueError, match="argv"):
            program_args(bad)  # type: ignore[arg-type]


def test_directory_hashes_survive_format_expansion() -> None:
    assert directory_arg("/srv/#{session_name}") == "/srv/##{session_name}"


def test_env_flags_are_sorted_and_checked_without_showing_values() -> None:
    assert env_flags({"B": "2", "A": "x=y;"}) == ["-e", "A=x=y;", "-e", "B=2"]
    assert env_flags(None) == []
    with pytest.raises(ValueError) as info:
        env_flags({"BAD NAME": "s3cret-value"})
    assert "s3cret-value" not in str(info.value)
    with pytest.raises(ValueError):
        env_flags({"A": "nul\x00"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text", "plain text"),
        ("a\r\nb\rc\n", "a\nb\nc\n"),
        ("tab\tkept", "tab\tkept"),
        ("\x1b[201~rm -rf", "\u241b[201~rm -rf"),
        ("bell\x07 nul\x00 del\x7f", "bell\u2407 nul\u2400 del\u2421"),
        ("c1 \x9b201~", "c1 \ufffd201~"),
        ("ünïcødé ✓ $(x) 'q' \"d\" ;", "ünïcødé ✓ $(x) 'q' \"d\" ;"),
    ],
)
def test_neutralise(text: str, expected: str) -> None:
    assert neutralise(text) == expected


def test_neutralised_text_holds_no_escape_byte() -> None:
    every_char = "".join(chr(c) for c in range(0x250))
    data = encode(every_char)
    assert b"\x1b" not in data
    assert all(b >= 0x20 or b in (0x09, 0x0A) for b in data)
    assert encode("\ud800") == b"?"


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("tmux 3.3a", (3, 3)),
        ("tmux 3.0", (3, 0)),
        ("tmux next-3.4", (3, 4)),
        ("tmux 2.9a\n", (2, 9)),
        ("tmux master", None),
    ],
)
def test_parse_version(text: str, version: tuple[int, int] | None) -> None:
    assert parse_version(text) == version


def test_capability_gates() -> None:
    assert NEW_SESSION_ENV == (3, 2)
    assert RESPAWN_PANE_ENV == (3, 0)
    assert supports((3, 2), NEW_SESSION_ENV)
    assert not supports((3, 1), NEW_SESSION_ENV)
    assert supports((3, 0), RESPAWN_PANE_ENV)
    assert not supports((2, 9), RESPAWN_PANE_ENV)
    assert supports(None, NEW_SESSION_ENV)


@pytest.mark.parametrize(
    ("stderr", "absent"),
    [
        ("can't find session: loop-a\n", True),
        ("no server running on /tmp/tmux-0/x\n", True),
        ("error connecting to /tmp/tmux-0/x (No such file or directory)\n", True),
        ("error connecting to /tmp/tmux-0/x (Connection refused)\n", True),
        ("error connecting to /tmp/tmux-0/x (Permission denied)\n", False),
        ("server exited unexpectedly\n", False),
        ("lost server\n", False),
        ("", False),
    ],
)
def test_only_definite_texts_mean_absent(stderr: str, absent: bool) -> None:
    assert says_absent(Answer(1, "", stderr)) is absent


def test_no_answer_is_never_absent() -> None:
    silent = Answer(None, reason="tmux did not answer within 1s")
    assert not says_absent(silent)
    assert silent.error == "tmux did not answer within 1s"
    assert not says_absent(Answer(0, "", "can't find session: x"))


def test_result_values_are_the_contract_strings() -> None:
    assert [o.value for o in SpawnOutcome] == [
        "spawned",
        "occupied-live",
        "occupied-unclearable",
        "failed",
    ]
    assert SpawnResult(outcome=SpawnOutcome.SPAWNED).ok
    assert not SpawnResult(outcome=SpawnOutcome.FAILED, error="x").ok
    assert {p.name for p in Presence} == {"ABSENT", "DEAD", "LIVE", "UNKNOWN"}


@pytest.mark.parametrize(
    ("stderr", "transient"),
    [
        ("server exited unexpectedly\n", True),
        ("no current target\n", True),
        ("can't find session: x\n", False),
        ("error connecting to /x (Permission denied)\n", False),
    ],
)
def test_exiting_server_texts_are_transient(stderr: str, transient: bool) -> None:
    assert is_transient(Answer(1, "", stderr)) is transient
    assert not is_transient(Answer(None, reason="timeout"))
