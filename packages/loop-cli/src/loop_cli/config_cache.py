"""The validated config of a file, kept so the next command skips YAML and validation.

`status` runs in watch loops; importing PyYAML and validating every key cost it more
than the work it reports. A validated config is stored (msgpack, no code) under a key
of everything its validation depends on: a digest of the file's exact text, its folder
(relative paths are anchored there), the home directory (`~` expands to it), the
versions of the-loop and msgspec, and a digest of the modules that validate. Any change
is a miss, and a miss (or a damaged, unreadable or unwritable cache) only means
validating again: the cache never refuses a config and never answers for one it did
not see.

An entry steers what the-loop runs (`harness.argv`), so one is trusted only when this
user owns it and its folder and nobody else can write either; otherwise it is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

DISABLE_ENV = "THE_LOOP_CONFIG_CACHE"  # "0": always validate (nothing read or written)
_MODULES = ("config.py", "validation.py", "yamlload.py")


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/the-loop/config` (platformdirs' answer elsewhere than Linux; its
    import is skipped on Linux, where the answer is the XDG rule itself)."""
    if sys.platform.startswith("linux"):
        base = os.environ.get("XDG_CACHE_HOME") or ""
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
        return root / "the-loop" / "config"
    from platformdirs import user_cache_path

    return user_cache_path("the-loop") / "config"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _code() -> str:
    """What validates: the validating modules' bytes and msgspec's version (mtimes are
    normalised by some installers, and a version string is not bumped by every edit)."""
    import msgspec

    here = Path(__file__).parent
    parts = [msgspec.__version__.encode()]
    for name in _MODULES:
        try:
            parts.append((here / name).read_bytes())
        except OSError:
            parts.append(b"-")
    return _digest(b"\0".join(parts))


def key(path: Path, text: str) -> list[str]:
    """Everything validation depends on; computed once, before validating."""
    from . import __version__

    where = [str(path.parent.absolute()), str(Path.home())]
    return [__version__, _code(), *where, _digest(text.encode("utf-8", "surrogatepass"))]


def _entry(path: Path) -> Path | None:
    """One entry per config path; two paths sharing a name only evict each other.
    None for a relative path under a working directory deleted meanwhile (no entry)."""
    try:
        where = str(path.absolute()).encode("utf-8", "surrogatepass")
    except OSError:
        return None
    return cache_dir() / f"{_digest(where)[:32]}.msgpack"


def _enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1") != "0"


def _private(info: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _path_hook(type_: Any, obj: Any) -> Any:
    if type_ is Path and isinstance(obj, str):
        return Path(obj)
    raise TypeError(f"{type_!r} is not kept in the config cache")


def _read(entry: Path) -> bytes | None:
    """The entry's bytes, only from a private folder and a private regular file."""
    try:
        folder = os.lstat(entry.parent)
        if not stat.S_ISDIR(folder.st_mode) or not _private(folder):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or not _private(info):
            return None
        return handle.read()


def cached(path: Path, kind: type[T], want: list[str]) -> T | None:
    """The `kind` validated earlier under exactly the key `want`; None on a miss.
    (`kind` is passed in, not imported: the config module is this one's caller.)"""
    if not _enabled():
        return None
    entry = _entry(path)
    blob = None if entry is None else _read(entry)
    if blob is None:
        return None
    import msgspec

    try:
        found, body = msgspec.msgpack.decode(blob, type=tuple[list[str], msgspec.Raw])
        if found != want:
            return None
        return msgspec.msgpack.decode(body, type=kind, dec_hook=_path_hook)
    except Exception:  # damaged, forged or of an older shape: validate again
        return None


def last_valid(path: Path, kind: type[T]) -> T | None:
    """The config last validated for this path by this code, whatever the file holds
    now (`status` shows a daemon's state while the file is broken); None if none.
    Everything of the key but the file's text must still match."""
    if not _enabled():
        return None
    entry = _entry(path)
    blob = None if entry is None else _read(entry)
    if blob is None:
        return None
    import msgspec

    try:
        found, body = msgspec.msgpack.decode(blob, type=tuple[list[str], msgspec.Raw])
        if found[:-1] != key(path, "")[:-1]:
            return None
        return msgspec.msgpack.decode(body, type=kind, dec_hook=_path_hook)
    except Exception:  # damaged, forged or of an older shape
        return None


def keep(path: Path, config: object, want: list[str]) -> None:
    """Store a config just validated under the key computed before validating it; any
    failure (an unwritable or foreign folder, a value msgpack cannot hold) leaves no
    entry behind and never fails the command."""
    if not _enabled():
        return
    import msgspec

    entry = _entry(path)
    if entry is None:
        return
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder = os.lstat(entry.parent)
        if stat.S_IMODE(folder.st_mode) & 0o077 and folder.st_uid == os.geteuid():
            from loop_dispatch.private import DIR_MODE, tighten  # rare: a looser folder

            tighten(entry.parent, DIR_MODE)
            folder = os.lstat(entry.parent)
        if not _private(folder):
            return
        body = msgspec.msgpack.encode(config, enc_hook=str)
        blob = msgspec.msgpack.encode((want, msgspec.Raw(body)))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(tmp, flags, 0o600), "wb") as handle:
            handle.write(blob)
        os.replace(tmp, entry)
    except Exception:
        with contextlib.suppress(OSError):
            tmp.unlink()
