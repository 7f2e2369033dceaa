"""The validated config of a file, kept so the next command skips YAML and validation.

`status` runs in watch loops; importing PyYAML and validating every key cost it more
than the work it reports. A validated config is stored (msgpack, no code) under a key
of everything its validation depends on: the file's exact text, its folder (relative
paths are anchored there), the home directory (`~` expands to it), the-loop's version
and the modification times of the modules that validate. Any change is a miss, and a
miss (or a damaged, unreadable or unwritable cache) only means validating again: the
cache never refuses a config and never answers for one it did not see.
"""

from __future__ import annotations

import contextlib
import os
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


def _key(path: Path, text: str) -> list[str]:
    """Everything validation depends on, compared whole (no hash to import or collide)."""
    from . import __version__

    here = Path(__file__).parent
    stamps = []
    for name in _MODULES:
        try:
            stamps.append(str((here / name).stat().st_mtime_ns))
        except OSError:
            stamps.append("-")
    return [__version__, *stamps, str(path.parent.absolute()), str(Path.home()), text]


def _entry(path: Path) -> Path:
    """One entry per config path; two paths sharing a name only evict each other."""
    import zlib

    where = str(path.absolute()).encode("utf-8", "surrogatepass")
    return cache_dir() / f"{zlib.crc32(where):08x}-{len(where)}.msgpack"


def _enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1") != "0"


def _path_hook(type_: Any, obj: Any) -> Any:
    if type_ is Path and isinstance(obj, str):
        return Path(obj)
    raise NotImplementedError(f"{type_!r} is not kept in the config cache")


def cached(path: Path, text: str, kind: type[T]) -> T | None:
    """The `kind` validated earlier from exactly this text at this place; None on a miss.
    (`kind` is passed in, not imported: the config module is this one's caller.)"""
    if not _enabled():
        return None
    try:
        blob = _entry(path).read_bytes()
    except OSError:
        return None
    import msgspec

    try:
        key, body = msgspec.msgpack.decode(blob, type=tuple[list[str], msgspec.Raw])
        if key != _key(path, text):
            return None
        return msgspec.msgpack.decode(body, type=kind, dec_hook=_path_hook)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None  # damaged or from an older shape: validate again


def keep(path: Path, text: str, config: object) -> None:
    """Store a config just validated from `text`; any failure leaves no entry behind."""
    if not _enabled():
        return
    import msgspec

    entry = _entry(path)
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = msgspec.msgpack.encode(config, enc_hook=str)
        blob = msgspec.msgpack.encode((_key(path, text), msgspec.Raw(body)))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        os.replace(tmp, entry)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink()
