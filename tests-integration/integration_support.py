"""Helpers shared by the integration tests (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.05) -> T:
    """Poll `predicate` until it returns something truthy or `timeout` passes.

    Returns the last value, so `assert wait_for(...)` fails with the deadline reached.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def harness_texts(directory: Path) -> list[str]:
    """Every text the fake harness received in `directory`: first prompts and pastes."""
    texts: list[str] = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == "start" and record.get("prompt"):
                texts.append(record["prompt"])
            elif record.get("event") == "message":
                texts.append(record["text"])
    return texts
