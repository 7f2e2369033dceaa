"""Helpers shared by the integration tests (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TypeVar

from loop_tmux.testing import finished_records

T = TypeVar("T")


def harness_texts(directory: Path) -> list[str]:
    """Every text the fake harness received in `directory`: first prompts and pastes."""
    texts: list[str] = []
    for path in sorted(directory.glob("*.jsonl")):
        for record in finished_records(path):
            if record.get("event") == "start" and record.get("prompt"):
                texts.append(record["prompt"])
            elif record.get("event") == "message":
                texts.append(record["text"])
    return texts


def poll_and_drain(
    store,
    source,
    dispatcher,
    events,
    *,
    version: str = "1.0.0",
    max_attempts: int = 3,
    give_up_after: float = 86400.0,
):
    """One `poll --once`: commit what the source lists, then one drain run until nothing
    is due now (backoff a few ms, so a retry is due by the next call). Returns the two
    reports' counts in one namespace; `failed` = attempts that failed (retried or given
    up). `version` stands for the whole set of deciding versions (AC11)."""
    from types import SimpleNamespace

    from loop_dispatch.drain import Drain, RetryPolicy
    from loop_dispatch.poll import run_poll_cycle

    polled = run_poll_cycle(store, source, events)
    drained = Drain(
        store,
        dispatcher,
        events,
        versions={"loop-cli": version, "loop-dispatch": version, "loop-tmux": version},
        policy=RetryPolicy(
            max_attempts=max_attempts, give_up_after=give_up_after, backoff=0.01, max_backoff=0.01
        ),
        idle=0.01,
    ).run(until_idle=True)
    time.sleep(0.02)  # a retry scheduled by this run is due by the next one
    counts = {**drained.as_dict(), **polled.as_dict()}  # `errors`: the source's
    return SimpleNamespace(**counts, failed=drained.retried + drained.gave_up)


def end_private_server(socket: str) -> None:
    """End a test's own tmux server on its private socket and remove the socket file
    (tmux 3.3a leaves it behind: a run of the real-harness tests left one per test)."""
    from loop_tmux import Tmux

    Tmux(socket_name=socket, config_file="/dev/null").kill_server()
