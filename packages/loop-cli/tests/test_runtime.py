"""Runtime: one source per process, closed with the runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop_cli.config import load_config
from loop_cli.runtime import Runtime
from loop_cli.tracker import LocalSource


def test_source_is_built_once_and_closed_with_the_runtime(
    loop_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[object] = []
    monkeypatch.setattr(LocalSource, "close", lambda self: closed.append(self), raising=False)
    rt = Runtime(load_config(str(loop_config)))
    first = rt.source()
    assert rt.source() is first
    rt.close()
    assert closed == [first]
