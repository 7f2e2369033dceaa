"""Env files in the dotenv format: read safely, parse without a shell, report by number.

Parsing is python-dotenv's own parser (``dotenv.parser.parse_stream``), which reads the
format without executing anything. We use its bindings directly instead of
``dotenv_values`` because that function interpolates ``${VAR}`` from the environment,
and a declared value must be exactly what the file says.
"""

from __future__ import annotations

import io
import os
import stat
import sys

from loop_envstate.errors import EnvstateError

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from dotenv.parser import Binding

    ParseStream = Callable[[io.StringIO], Iterator[Binding]]

_parse_stream: ParseStream | None = None

MAX_FILE_BYTES = 1024 * 1024
"""Largest env file accepted (1 MiB).

Linux caps one environment string at 128 KiB and argv plus environment together at
about 2 MiB, so a bigger file could never reach a process anyway; refusing early keeps
a wrong path (a log, a disk image) from being read into memory.
"""


class EnvFileError(EnvstateError):
    """An env file that cannot be used at all: missing, unreadable, not text, too big.

    ``str(err)`` is one line naming the path, fit to show an operator as is.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        from pathlib import Path

        self.path: Path = Path(path)
        self.reason = reason
        super().__init__(f"env file {display_path(os.fspath(path))}: {reason}")


class EnvFile:
    """What one env file declares: values by name and the malformed line numbers.

    A plain slotted class rather than a dataclass so `import loop_envstate` does not pay
    for the dataclasses import. Its repr lists names only: a stray log of this object
    must never carry a value.
    """

    __slots__ = ("malformed", "path", "values")

    path: Path
    values: dict[str, str]
    malformed: tuple[int, ...]

    def __init__(self, path: Path, values: dict[str, str], malformed: tuple[int, ...]) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "malformed", malformed)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"EnvFile is immutable; cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EnvFile):
            return NotImplemented
        return (self.path, self.values, self.malformed) == (
            other.path,
            other.values,
            other.malformed,
        )

    __hash__ = None  # type: ignore[assignment]  # values is a dict

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.values))
        return f"EnvFile(path={str(self.path)!r}, names=[{names}], malformed={self.malformed})"

    @property
    def names(self) -> list[str]:
        """Declared names in name order."""
        return sorted(self.values)


def is_valid_name(name: str) -> bool:
    """Whether a name can be an environment variable name handed to exec.

    Non-empty, and free of ``=`` (it would split the NAME=VALUE entry), NUL (it ends a
    C string) and whitespace (no shell or tool can address it).
    """
    return (
        bool(name) and "=" not in name and "\0" not in name and not any(c.isspace() for c in name)
    )


def parse_text(text: str, path: str | os.PathLike[str] = "<text>") -> EnvFile:
    """Parse dotenv text: ``export``, quotes with escapes, comments; later duplicate wins.

    Never interpolates and never runs anything. A line the parser rejects, a bare name
    without ``=``, or an unusable name is reported by its 1-based line number.
    """
    from pathlib import Path

    values, malformed = _bindings(text, path)
    return EnvFile(Path(path), values, malformed)


def parse(path: str | os.PathLike[str]) -> EnvFile:
    """Read and parse an env file; raises EnvFileError naming the path when unusable."""
    return parse_text(read_text(path), path)


def read_values(path: str | os.PathLike[str]) -> tuple[dict[str, str], tuple[int, ...]]:
    """parse(path) as (values, malformed line numbers), without building an EnvFile.

    The launcher's way in: it needs nothing else, and skipping pathlib saves a few
    milliseconds on every pane start.
    """
    return _bindings(read_text(path), path)


def _bindings(text: str, path: str | os.PathLike[str]) -> tuple[dict[str, str], tuple[int, ...]]:
    if "\0" in text:
        raise EnvFileError(path, "is binary (contains NUL bytes)")
    text = text.removeprefix("\ufeff")
    values: dict[str, str] = {}
    malformed: list[int] = []
    for binding in dotenv_parse_stream()(io.StringIO(text)):
        original = binding.original
        if binding.error:
            malformed.append(_first_line(original.string, original.line))
        elif binding.key is None:
            continue  # blank line or comment
        elif binding.value is None or not is_valid_name(binding.key):
            malformed.append(_first_line(original.string, original.line))
        else:
            values[binding.key] = binding.value
    return values, tuple(malformed)


def dotenv_parse_stream() -> ParseStream:
    """python-dotenv's ``parser.parse_stream``, loaded without running ``dotenv/__init__``.

    That ``__init__`` imports ``dotenv.main`` (logging, tempfile, shutil, ...): about
    13 ms of a launcher start measured at ~32 ms, paid by every pane the-loop starts.
    The parser module itself needs only codecs, re and typing, so it is executed from
    the very file ``import dotenv.parser`` would load. Anything unexpected (another
    layout, a relative import in a later release) falls back to that plain import.
    """
    global _parse_stream
    if _parse_stream is None:
        _parse_stream = _load_parse_stream()
    return _parse_stream


def _load_parse_stream() -> ParseStream:
    loaded = sys.modules.get("dotenv.parser")
    if loaded is None:
        try:
            from importlib.machinery import PathFinder
            from types import ModuleType

            package = PathFinder.find_spec("dotenv")
            where = None if package is None else package.submodule_search_locations
            spec = None if where is None else PathFinder.find_spec("dotenv.parser", where)
            if spec is not None and spec.loader is not None:
                module = ModuleType(spec.name)
                module.__spec__ = spec
                module.__file__ = spec.origin
                module.__loader__ = spec.loader
                module.__package__ = "dotenv"
                spec.loader.exec_module(module)
                loaded = module
        except Exception:  # any surprise: the ordinary import below
            loaded = None
    if loaded is None or not callable(getattr(loaded, "parse_stream", None)):
        from dotenv.parser import parse_stream

        return parse_stream
    found: ParseStream = loaded.parse_stream
    return found


def declared(path: str | os.PathLike[str] | None) -> EnvFile | None:
    """What the configured file declares right now, or None when no file is configured.

    A fresh read on every call, and never a look at os.environ: the question is what
    the file says, not what this process happened to inherit.
    """
    if path is None:
        return None
    return parse(path)


def read_text(path: str | os.PathLike[str]) -> str:
    """The file's text, refusing anything that is not a small UTF-8 regular file.

    Opened non-blocking so a FIFO without a writer cannot hang the launcher, checked on
    the open descriptor (no race between check and read), and read no further than the
    cap, so a huge file is refused without being read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise EnvFileError(path, "does not exist") from None
    except IsADirectoryError:
        raise EnvFileError(path, "is a directory") from None
    except PermissionError:
        raise EnvFileError(path, "permission denied") from None
    except (OSError, ValueError) as err:
        raise EnvFileError(path, f"cannot be opened ({_reason(err)})") from None
    try:
        data = _read_capped(fd, path)
    finally:
        os.close(fd)
    if b"\0" in data:
        raise EnvFileError(path, "is binary (contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EnvFileError(
            path, f"is not UTF-8 text (undecodable byte at offset {err.start})"
        ) from None


def _read_capped(fd: int, path: str | os.PathLike[str]) -> bytes:
    try:
        info = os.fstat(fd)
    except OSError as err:
        raise EnvFileError(path, f"cannot be read ({_reason(err)})") from None
    if stat.S_ISDIR(info.st_mode):
        raise EnvFileError(path, "is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise EnvFileError(path, "is not a regular file")
    too_large = f"is too large (over {MAX_FILE_BYTES} bytes)"
    if info.st_size > MAX_FILE_BYTES:
        raise EnvFileError(path, too_large)
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - total)
        except OSError as err:
            raise EnvFileError(path, f"cannot be read ({_reason(err)})") from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_FILE_BYTES:
            raise EnvFileError(path, too_large)
    return b"".join(chunks)


def _first_line(original: str, line: int) -> int:
    """The line a binding's own text starts on.

    dotenv marks a binding where the previous one ended, so blank lines before it are
    part of its original text; count them off to name the line a person would look at.
    """
    stripped = original.lstrip()
    leading = original[: len(original) - len(stripped)]
    return line + leading.replace("\r\n", "\n").replace("\r", "\n").count("\n")


def _reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or type(err).__name__


def display_path(path: str | bytes) -> str:
    """A path or program name fit for a one-line message: control characters escaped,
    the empty name shown as ``''`` so the message still says which one it was."""
    text = os.fsdecode(path)
    if not text:
        return "''"
    if text.isprintable():
        return text
    return repr(text)[1:-1]
