"""`the-loop events` on a big log (issue 22): the newest records read from the end, the
newest 50 and no poll.cycle by default, exclusions, a table that fits the terminal, times
with their zone."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest

from loop_dispatch.eventlog import EventLog, type_globs


def _types(output: str) -> list[str]:
    return [json.loads(line)["type"] for line in output.splitlines()]


def _line(n: int, kind: str) -> bytes:
    record = {
        "ts": f"2026-12-01T10:{n // 60 % 60:02d}:{n % 60:02d}.000000+00:00",
        "type": kind,
        "level": "info",
        "source": "bench",
        "workItem": "local:loop#1" if kind != "poll.cycle" else None,
        "deliveryId": f"d{n}" if kind != "poll.cycle" else None,
        "detail": {"n": n, "pad": "x" * 180},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def write_log(path: Path, size: int) -> None:
    """A log of about `size` bytes: 4 poll.cycle records to one delivery, as in the
    field (165 of 204), the last record a delivery."""
    block = b"".join(_line(n, "poll.cycle" if n % 5 else "dispatch.delivered") for n in range(500))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for _ in range(max(1, size // len(block))):
            fh.write(block)


def test_newest_records_across_rotated_files_match_a_full_read(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", max_bytes=4000, backups=4)
    for n in range(400):
        log.emit("poll.cycle" if n % 3 else "session.spawned", source="t", detail={"n": n})
    assert len(log.files()) == 5  # the current file and four backups
    everything = log.read()
    for limit in (1, 2, 7, 20, 50, len(everything), len(everything) + 5):
        assert log.read(limit=limit) == everything[-limit:]
        assert (
            log.read(types_glob="session.*", limit=limit)
            == [r for r in everything if r["type"] == "session.spawned"][-limit:]
        )
        assert (
            log.read(exclude_types="poll.cycle", limit=limit)
            == log.read(types_glob="!poll.cycle")[-limit:]
        )
    # a torn last line (a writer mid-append) is skipped, as the forward read skips it
    with log.path.open("ab") as fh:
        fh.write(b'{"ts":"2026-')
    assert log.read(limit=3) == everything[-3:]


def test_type_globs() -> None:
    assert type_globs("a.*, !b.c,d", "e,!f") == (["a.*", "d"], ["b.c", "e", "f"])
    assert type_globs(None, None) == ([], [])
    assert type_globs("!poll.cycle", None) == ([], ["poll.cycle"])


@pytest.fixture
def quiet_log(write_config, isolated) -> EventLog:
    write_config()
    log = EventLog(isolated / "state" / "events.jsonl")
    for n in range(60):
        log.emit("poll.cycle", source="poller", detail={"n": n})
        log.emit("dispatch.delivered", source="t", work_item="local:loop#1", delivery_id=f"d{n}")
    log.emit("session.spawned", source="t", work_item="local:loop#2", delivery_id="s1")
    return log


def test_quiet_and_bounded_by_default(run_cli, quiet_log) -> None:
    default = run_cli("events", "--format", "jsonl")
    types = _types(default.output)
    assert len(types) == 50
    assert "poll.cycle" not in types
    assert types[-1] == "session.spawned"
    table = run_cli("events")
    assert "the newest 50; --limit N or --all for more" in table.stderr
    assert len(table.stdout.splitlines()) == 51
    assert len(_types(run_cli("events", "--all", "--format", "jsonl").output)) == 61
    asked = _types(
        run_cli("events", "--type", "poll.*", "--limit", "3", "--format", "jsonl").output
    )
    assert asked == ["poll.cycle"] * 3
    every = _types(run_cli("events", "--type", "*", "--all", "--format", "jsonl").output)
    assert len(every) == 121
    assert run_cli("events", "--all", "--limit", "3").exit_code == 2


def test_exclusion_filters(run_cli, quiet_log) -> None:
    for args in (
        ["--type", "*,!dispatch.*"],
        ["--type", "*", "--exclude-type", "dispatch.delivered"],
        ["--type", "*", "--exclude-type", "nothing", "--exclude-type", "dispatch.*"],
    ):
        got = _types(run_cli("events", *args, "--all", "--format", "jsonl").output)
        assert got == ["poll.cycle"] * 60 + ["session.spawned"], args
    only = run_cli("events", "--type", "!dispatch.*", "--all", "--format", "jsonl")
    assert _types(only.output) == ["session.spawned"]  # poll.cycle stays quiet too


def test_table_fits_the_terminal_and_shows_the_zone(console, quiet_log) -> None:
    for columns, zone, offset in ((72, "UTC", "+00:00"), (140, "America/New_York", "-05:00")):
        out = console("events", "--limit", "5", env={"COLUMNS": str(columns), "TZ": zone})
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert len(lines) == 6
        assert lines[0].startswith("TIME ")
        assert all(len(line) <= columns for line in lines)
        assert all(line.split("  ")[0].endswith(offset) for line in lines[1:])
    piped = console("events", "--limit", "1", env={"COLUMNS": ""})  # not a terminal
    assert "local:loop#2" in piped.stdout


def _medians(console, configs: list[Path], runs: int = 5) -> list[float]:
    """Median wall time of `events --limit 20` per config, the runs interleaved so the
    machine's load falls on both alike."""
    times: list[list[float]] = [[] for _ in configs]
    for _ in range(runs):
        for spent, config in zip(times, configs, strict=True):
            start = time.perf_counter()
            out = console("--config", str(config), "events", "--limit", "20", "--format", "jsonl")
            spent.append(time.perf_counter() - start)
            assert out.returncode == 0, out.stderr
            assert len(out.stdout.splitlines()) == 20
    return [statistics.median(t) for t in times]


@pytest.mark.slow
def test_limit_20_on_100_mb_within_2x_of_1_mb(console, isolated) -> None:
    """The bound the issue sets, through the installed command."""
    configs = []
    for name, size in (("small", 1_000_000), ("big", 100_000_000)):
        write_log(isolated / name / "events.jsonl", size)
        configs.append(isolated / name / "config.yaml")
        configs[-1].write_text(f"stateDir: {isolated / name}\n", encoding="utf-8")
    assert os.path.getsize(isolated / "big" / "events.jsonl") > 99_000_000
    os.sync()
    small_s, big_s = _medians(console, configs)
    print(f"events --limit 20: 1 MB {small_s:.3f}s, 100 MB {big_s:.3f}s")
    assert big_s < 2 * small_s
