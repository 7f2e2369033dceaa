"""Where a config's daemon listens, known without loading the config.

`status` through the daemon must cost a small part of a Python start, but loading the
config imports msgspec and YAML (about 60 ms) just to learn the state directory. So
every full load remembers, per config file, the state directory it named: one small
private file keyed by the file's absolute path, the home and XDG state folders, and
valid only while the file's device, inode, size and mtime are the same. Any change, a
foreign or damaged hint, or another platform than Linux (where the XDG rules below are
platformdirs' own) is a miss: the caller loads the config as before. The daemon's own
answer then names the config it runs (`x-the-loop-config`), which `status` checks too.

Plain `os.path` strings and zlib, no pathlib, hashlib or json: this runs on every
`status`. A hint is NUL-separated fields (no path holds a NUL): the format's tag, the
key's three parts, the seal and the state directory.
"""

from __future__ import annotations

import os
import stat
import sys
import zlib

APP = "the-loop"
TAG = "the-loop-api-hint-2"  # earlier hints (JSON) are misses, rewritten at the next load
CONFIG_ENV = "THE_LOOP_CONFIG"
LOCAL_CONFIG = os.path.join(".the-loop", "config.yaml")


def _xdg(variable: str, default: str) -> str:
    """platformdirs' Linux rule: the variable when set and not blank, else the default."""
    value = os.environ.get(variable, "")
    return value if value.strip() else os.path.expanduser(default)


def config_path(explicit: str | None) -> str | None:
    """The config file `load_config` would read (config.find_config's search order)."""
    if explicit:
        return os.path.expanduser(explicit)
    named = os.environ.get(CONFIG_ENV)
    if named:
        return os.path.expanduser(named)
    if os.path.isfile(LOCAL_CONFIG):
        return os.path.realpath(LOCAL_CONFIG)
    user = os.path.join(_xdg("XDG_CONFIG_HOME", "~/.config"), APP, "config.yaml")
    return user if os.path.isfile(user) else None


def _key(path: str) -> str:
    home = os.path.expanduser("~")
    return "\0".join([os.path.abspath(path), home, os.environ.get("XDG_STATE_HOME", "")])


def _entry(key: str) -> str:
    """One file per key; two keys sharing a checksum only evict each other (the file
    holds its whole key, compared on read)."""
    name = f"{zlib.crc32(key.encode('utf-8', 'surrogatepass')):08x}.hint"
    return os.path.join(_xdg("XDG_CACHE_HOME", "~/.cache"), APP, "api-hints", name)


def _seal(path: str) -> str:
    info = os.stat(path)
    return f"{info.st_dev} {info.st_ino} {info.st_size} {info.st_mtime_ns}"


def _enabled() -> bool:
    """Linux, and the caches not switched off (`THE_LOOP_CONFIG_CACHE=0`)."""
    return sys.platform.startswith("linux") and os.environ.get("THE_LOOP_CONFIG_CACHE") != "0"


def _private(info: os.stat_result) -> bool:
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def state_dir(explicit: str | None) -> tuple[str | None, str] | None:
    """(config file or None, its state directory) without loading it; None on a miss."""
    if not _enabled():
        return None
    path = config_path(explicit)
    if path is None:  # the embedded defaults: the default state directory
        return None, os.path.join(_xdg("XDG_STATE_HOME", "~/.local/state"), APP)
    try:
        key = _key(path)  # a relative path under a deleted working directory: a miss
        entry = _entry(key)
        if not _private(os.lstat(os.path.dirname(entry))):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            if not _private(os.fstat(handle.fileno())):
                return None
            fields = handle.read(1 << 16).decode("utf-8", "surrogatepass").split("\0")
        if len(fields) != 6 or fields[0] != TAG or "\0".join(fields[1:4]) != key:
            return None
        if fields[4] != _seal(path) or not fields[5]:
            return None
        return path, fields[5]
    except (OSError, ValueError):
        return None


def remember(path: os.PathLike[str] | str | None, state: os.PathLike[str] | str) -> None:
    """Keep `state` as the state directory of the config file `path` (after a full
    load); never fails the command."""
    if path is None or not _enabled():
        return
    try:
        key = _key(os.fspath(path))
    except OSError:
        return
    entry = _entry(key)
    tmp = f"{entry}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(entry), mode=0o700, exist_ok=True)
        if not _private(os.lstat(os.path.dirname(entry))):
            return
        folder = os.fspath(state)
        if "\0" in folder:
            return
        data = "\0".join([TAG, key, _seal(os.fspath(path)), folder])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(tmp, flags, 0o600), "wb") as handle:
            handle.write(data.encode("utf-8", "surrogatepass"))
        os.replace(tmp, entry)
    except (OSError, ValueError):
        import contextlib  # the rare path only

        with contextlib.suppress(OSError):
            os.unlink(tmp)
