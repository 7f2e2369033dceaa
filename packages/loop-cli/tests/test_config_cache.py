"""The validated-config cache: a hit skips YAML and validation, anything else validates.

A wrong answer from the cache would be worse than a slow status, so every way the
answer could go stale is tried: another text, another folder (relative paths), a
damaged entry, an unwritable cache, a config with errors.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loop_cli import config_cache
from loop_cli.config import Config, load_file
from loop_cli.errors import ConfigError

TEXT = "stateDir: state\nrouting: {tmuxSocket: loop-cache-test}\nhost: {maxSessions: 7}\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(config_cache.DISABLE_ENV, raising=False)
    return tmp_path / "cache" / "the-loop" / "config"


def _write(path: Path, text: str = TEXT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_second_load_is_the_same_config_from_the_cache(tmp_path: Path, cache: Path) -> None:
    path = _write(tmp_path / "a" / "config.yaml")
    first = load_file(path)
    assert [p.suffix for p in cache.iterdir()] == [".msgpack"]
    assert config_cache.cached(path, Config, config_cache.key(path, TEXT)) == first
    again = load_file(path)
    assert again == first
    assert again.state_dir == tmp_path / "a" / "state"  # a Path again, anchored
    assert oct(next(cache.iterdir()).stat().st_mode & 0o777) == "0o600"


def test_a_warm_load_imports_no_yaml(tmp_path: Path, cache: Path) -> None:
    path = _write(tmp_path / "config.yaml")
    probe = (
        "import sys; from pathlib import Path; from loop_cli.config import Config, load_file; "
        f"c = load_file(Path({str(path)!r})); "
        "print(c.host.max_sessions, 'yaml' in sys.modules)"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = [
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.stdout.split() for r in runs] == [["7", "True"], ["7", "False"]], runs


def test_another_text_is_a_miss_and_the_new_value_wins(tmp_path: Path, cache: Path) -> None:
    path = _write(tmp_path / "config.yaml")
    assert load_file(path).host.max_sessions == 7
    _write(path, TEXT.replace("7", "9"))
    assert config_cache.cached(path, Config, config_cache.key(path, TEXT.replace("7", "9"))) is None
    assert load_file(path).host.max_sessions == 9


def test_the_same_text_in_another_folder_is_anchored_there(tmp_path: Path, cache: Path) -> None:
    a = _write(tmp_path / "a" / "config.yaml")
    assert load_file(a).state_dir == tmp_path / "a" / "state"
    moved = tmp_path / "b" / "config.yaml"
    moved.parent.mkdir()
    a.rename(moved)
    assert load_file(moved).state_dir == tmp_path / "b" / "state"


@pytest.mark.parametrize("damage", [b"", b"\x00garbage", b"\x92\x91\xa1x\xc4\x03abc"])
def test_a_damaged_entry_is_validated_again(tmp_path: Path, cache: Path, damage: bytes) -> None:
    path = _write(tmp_path / "config.yaml")
    good = load_file(path)
    for entry in cache.iterdir():
        entry.write_bytes(damage)
    assert config_cache.cached(path, Config, config_cache.key(path, TEXT)) is None
    assert load_file(path) == good
    assert (
        config_cache.cached(path, Config, config_cache.key(path, TEXT)) == good
    )  # and the entry was written anew


def test_an_entry_for_the_text_but_a_wrong_shape_is_a_miss(tmp_path: Path, cache: Path) -> None:
    import msgspec

    path = _write(tmp_path / "config.yaml")
    load_file(path)
    entry = next(cache.iterdir())
    key, _ = msgspec.msgpack.decode(entry.read_bytes())
    entry.write_bytes(msgspec.msgpack.encode((key, msgspec.Raw(b"\x81\xa1x\x01"))))
    assert config_cache.cached(path, Config, config_cache.key(path, TEXT)) is None


def test_an_unwritable_cache_costs_only_speed(tmp_path: Path, cache: Path) -> None:
    cache.parent.parent.mkdir(parents=True)
    cache.parent.parent.joinpath("the-loop").write_text("a file where the folder goes")
    path = _write(tmp_path / "config.yaml")
    assert load_file(path).host.max_sessions == 7
    assert load_file(path).host.max_sessions == 7
    assert not list(tmp_path.glob("cache/**/*.tmp"))


def test_a_config_with_errors_is_never_kept(tmp_path: Path, cache: Path) -> None:
    path = _write(tmp_path / "config.yaml", "host: {maxSessions: 0}\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"host\.maxSessions"):
            load_file(path)
    assert not cache.exists() or not list(cache.iterdir())


def test_disabled_reads_and_writes_nothing(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config_cache.DISABLE_ENV, "0")
    path = _write(tmp_path / "config.yaml")
    assert load_file(path).host.max_sessions == 7
    assert not cache.exists()


def test_a_value_msgpack_cannot_hold_still_loads(tmp_path: Path, cache: Path) -> None:
    """A whole number past 64 bits validates; the cache cannot keep it and stays out."""
    path = _write(tmp_path / "config.yaml", "eventLog: {maxBytes: 18446744073709551616}\n")
    for _ in range(2):
        assert load_file(path).event_log.max_bytes == 18446744073709551616


def test_an_entry_with_a_wrong_type_where_a_path_goes_is_a_miss(
    tmp_path: Path, cache: Path
) -> None:
    import msgspec

    path = _write(tmp_path / "config.yaml")
    good = load_file(path)
    entry = next(cache.iterdir())
    key, body = msgspec.msgpack.decode(entry.read_bytes())
    forged = msgspec.msgpack.decode(msgspec.msgpack.encode(body))
    forged["stateDir"] = 5
    entry.write_bytes(msgspec.msgpack.encode((key, forged)))
    assert load_file(path) == good


@pytest.mark.parametrize("where", ["folder", "entry"])
def test_an_entry_others_can_write_is_never_trusted(
    tmp_path: Path, cache: Path, where: str
) -> None:
    """A planted entry steers what runs (harness.argv): one in a folder or file that
    another user can write is a miss, and the file is validated again."""
    import msgspec

    path = _write(tmp_path / "config.yaml")
    load_file(path)
    entry = next(cache.iterdir())
    key, body = msgspec.msgpack.decode(entry.read_bytes())
    planted = msgspec.msgpack.decode(msgspec.msgpack.encode(body))
    planted["host"]["maxSessions"] = 99
    entry.write_bytes(msgspec.msgpack.encode((key, planted)))
    assert load_file(path).host.max_sessions == 99  # private: trusted as written
    (cache if where == "folder" else entry).chmod(0o777 if where == "folder" else 0o666)
    assert config_cache.cached(path, Config, config_cache.key(path, TEXT)) is None
    assert load_file(path).host.max_sessions == 7


def test_a_symlinked_entry_is_not_followed(tmp_path: Path, cache: Path) -> None:
    path = _write(tmp_path / "config.yaml")
    load_file(path)
    entry = next(cache.iterdir())
    real = tmp_path / "elsewhere.msgpack"
    real.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(real)
    assert config_cache.cached(path, Config, config_cache.key(path, TEXT)) is None
