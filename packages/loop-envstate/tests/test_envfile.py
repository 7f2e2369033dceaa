from __future__ import annotations

import importlib.machinery
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import dotenv.parser
import pytest
from envstate_support import unreadable_file

from loop_envstate import (
    MAX_FILE_BYTES,
    EnvFile,
    EnvFileError,
    declared,
    envfile,
    parse,
    parse_text,
)
from loop_envstate.envfile import dotenv_parse_stream

# (id, text, expected values, expected malformed line numbers)
PARSE_CASES = [
    ("plain", "A=1\nB=two\n", {"A": "1", "B": "two"}, ()),
    ("crlf", "A=1\r\nB=2\r\n", {"A": "1", "B": "2"}, ()),
    ("crlf-malformed-line-number", "A=1\r\n\r\nbad line\r\nB=2\r\n", {"A": "1", "B": "2"}, (3,)),
    ("bom", "\ufeffA=1\nB=2\n", {"A": "1", "B": "2"}, ()),
    ("bom-crlf", "\ufeffA=1\r\n", {"A": "1"}, ()),
    ("unicode", "GRÜSSE=héllo ✓ 日本\n", {"GRÜSSE": "héllo ✓ 日本"}, ()),
    (
        "equals-in-value",
        "URL=postgres://u:p@h/db?a=b&c==d\n",
        {"URL": "postgres://u:p@h/db?a=b&c==d"},
        (),
    ),
    ("empty-values", "A=\nB=''\nC=\"\"\n", {"A": "", "B": "", "C": ""}, ()),
    ("empty-then-comment", "A= # nothing here\n", {"A": ""}, ()),
    ("unterminated-double", 'A="abc\nB=2\n', {"B": "2"}, (1,)),
    ("unterminated-single", "A='abc\nB=2\n", {"B": "2"}, (1,)),
    ("unterminated-last-line", 'A=1\nB="never closed', {"A": "1"}, (2,)),
    ("export", "export A=1\nexport  B=2\n", {"A": "1", "B": "2"}, ()),
    (
        "comments",
        "# head\nA=1 # trailing\nB=x#y\nC='q' # c\n  # indented\n",
        {"A": "1", "B": "x#y", "C": "q"},
        (),
    ),
    ("blank-lines", "\n\nA=1\n\n\n", {"A": "1"}, ()),
    ("later-duplicate-wins", "A=1\nB=b\nA=2\n", {"A": "2", "B": "b"}, ()),
    (
        "double-quote-escapes",
        'A="l1\\nl2\\t\\"q\\"\\\\"\n',
        {"A": 'l1\nl2\t"q"\\'},
        (),
    ),
    ("single-quote-escapes", "B='it\\'s'\n", {"B": "it's"}, ()),
    ("unquoted-backslash-literal", "C=raw\\n\n", {"C": "raw\\n"}, ()),
    ("multiline-double-quoted", 'A="l1\nl2"\nB=3\n', {"A": "l1\nl2", "B": "3"}, ()),
    ("no-interpolation", 'A=1\nB=${A}\nC="$HOME"\n', {"A": "1", "B": "${A}", "C": "$HOME"}, ()),
    ("no-shell", "A=$(touch /tmp/x)\nB=`id`\n", {"A": "$(touch /tmp/x)", "B": "`id`"}, ()),
    ("spaces-around", "A = 1\n  B=2  \n", {"A": "1", "B": "2"}, ()),
    ("bare-name-is-malformed", "A\nB=1\n", {"B": "1"}, (1,)),
    ("unusable-names", "'A B'=1\n'X=Y'=2\nOK=3\n", {"OK": "3"}, (1, 2)),
    (
        "malformed-after-blank-lines",
        "A=1\n\n\n  \nnot valid line\nB=2\n",
        {"A": "1", "B": "2"},
        (5,),
    ),
    (
        "several-malformed",
        "good=1\nbad one\nalso bad one\nfine=2\n",
        {"good": "1", "fine": "2"},
        (2, 3),
    ),
    ("empty-file", "", {}, ()),
]


@pytest.mark.parametrize(
    ("text", "values", "malformed"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_table(text: str, values: dict[str, str], malformed: tuple[int, ...]) -> None:
    env = parse_text(text)
    assert env.values == values
    assert env.malformed == malformed


def test_parse_reads_the_same_as_parse_text(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_bytes(b'\xef\xbb\xbfA=1\r\nbroken line\r\nB="x y"\r\n')
    env = parse(path)
    assert env == EnvFile(path, {"A": "1", "B": "x y"}, (2,))


def test_interpolation_ignores_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_NAME", "from-environ")
    assert parse_text("X=${SOME_NAME}\n").values == {"X": "${SOME_NAME}"}


def test_repr_never_shows_values() -> None:
    env = parse_text("TOKEN=very-secret-value\n")
    assert "very-secret-value" not in repr(env)
    assert "TOKEN" in repr(env)


def test_envfile_is_immutable() -> None:
    env = parse_text("A=1\n")
    with pytest.raises(AttributeError):
        env.values = {}  # type: ignore[misc]


def test_names_in_name_order() -> None:
    assert parse_text("b=1\nA=2\na=3\n").names == ["A", "a", "b"]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p, "does not exist"),
        (lambda p: (p.mkdir(), p)[1], "is a directory"),
        (lambda p: (p.write_bytes(b"A=1\n\0\0\x01\x02"), p)[1], "binary"),
        (lambda p: (p.write_bytes(b"A=caf\xe9\n"), p)[1], "not UTF-8"),
        (_fifo, "not a regular file"),
    ],
    ids=["missing", "directory", "nul-bytes", "undecodable", "fifo-without-writer"],
)
def test_unusable_files_raise_naming_the_path(
    tmp_path: Path, make: Callable[[Path], Path], reason: str
) -> None:
    path = make(tmp_path / "the.env")
    with pytest.raises(EnvFileError) as caught:
        parse(path)
    message = str(caught.value)
    assert reason in message
    assert str(path) in message
    assert "\n" not in message
    assert caught.value.path == path


def test_a_50_mb_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.env"
    with path.open("wb") as handle:  # sparse: 50 MB on paper, nothing on disk
        handle.truncate(50 * 1024 * 1024)
    with pytest.raises(EnvFileError, match="too large"):
        parse(path)


def test_the_cap_is_exact(tmp_path: Path) -> None:
    line = b"A=" + b"x" * 98 + b"\n"  # 101 bytes
    at_cap = tmp_path / "at.env"
    at_cap.write_bytes(b"#" * (MAX_FILE_BYTES - len(line) - 1) + b"\n" + line)
    assert at_cap.stat().st_size == MAX_FILE_BYTES
    assert parse(at_cap).values == {"A": "x" * 98}
    over = tmp_path / "over.env"
    over.write_bytes(at_cap.read_bytes() + b"\n")
    with pytest.raises(EnvFileError, match="too large"):
        parse(over)


def test_unreadable_file(tmp_path: Path) -> None:
    path = unreadable_file(tmp_path)
    with pytest.raises(EnvFileError, match="permission denied") as caught:
        parse(path)
    assert str(path) in str(caught.value)


def test_nul_in_text_is_refused() -> None:
    with pytest.raises(EnvFileError, match="binary"):
        parse_text("A=1\0\n", "mem.env")


def test_declared_none_when_no_file_is_configured() -> None:
    assert declared(None) is None


def test_declared_empty_file_is_not_none(tmp_path: Path) -> None:
    path = tmp_path / "empty.env"
    path.write_text("")
    env = declared(path)
    assert env is not None
    assert env.values == {}


def test_declared_is_a_fresh_read_and_leaves_os_environ_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROTATED", "old-from-environ")
    path = tmp_path / ".env"
    path.write_text("ROTATED=v1\n")
    before = dict(os.environ)
    first = declared(str(path))
    path.write_text("ROTATED=v2\nNEW=1\n")
    second = declared(path)
    assert first is not None
    assert second is not None
    assert first.values == {"ROTATED": "v1"}
    assert second.values == {"ROTATED": "v2", "NEW": "1"}
    assert dict(os.environ) == before
    assert "NEW" not in os.environ


def test_declared_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(EnvFileError, match="does not exist"):
        declared(tmp_path / "gone.env")


def test_dotenv_parser_is_loaded_without_the_dotenv_package() -> None:
    """The parser is python-dotenv's own file, run without dotenv/__init__ (start-up cost)."""
    code = (
        "import sys; from loop_envstate.envfile import dotenv_parse_stream, read_values;"
        "f = dotenv_parse_stream(); print(f.__code__.co_filename);"
        "print(sorted(m for m in sys.modules if m.startswith('dotenv')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out[0] == dotenv.parser.__file__
    assert out[1] == "[]"


@pytest.mark.parametrize("text", [case[1] for case in PARSE_CASES])
def test_the_directly_loaded_parser_binds_as_dotenv_does(text: str) -> None:
    ours = list(dotenv_parse_stream()(io.StringIO(text)))
    theirs = list(dotenv.parser.parse_stream(io.StringIO(text)))
    assert ours == theirs


def test_loader_falls_back_to_the_plain_import(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.machinery.PathFinder.find_spec

    def no_standalone_load(name: str, path: object = None, target: object = None) -> object:
        if name == "dotenv":  # only the loader's own look-up, not the plain import's
            raise ImportError("an unexpected layout")
        return real_find_spec(name, path, target)  # type: ignore[arg-type]

    monkeypatch.delitem(sys.modules, "dotenv.parser", raising=False)
    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", no_standalone_load)
    loaded = envfile._load_parse_stream()
    assert loaded is sys.modules["dotenv.parser"].parse_stream
    assert [b.value for b in loaded(io.StringIO("A=1\n"))] == ["1"]
