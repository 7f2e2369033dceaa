"""Fixtures for loop-dispatch's tests: a private real tmux, the modelled fake tmux,
a store, an event log, and the fake harness program (from tests-integration/harness)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_dispatch.eventlog import EventLog
from loop_dispatch.model import Event, EventKind, WorkItemRef
from loop_dispatch.store import Store
from loop_tmux import Tmux

REPO = Path(__file__).resolve().parents[3]
FAKE_HARNESS = REPO / "tests-integration" / "harness" / "fake_harness.py"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "state")
    yield s
    s.close()


@pytest.fixture
def events(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "events.jsonl")


@pytest.fixture
def real_tmux(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tmux]:
    """A tmux server on a private socket, killed (only it) at teardown."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)
    name = f"loop-test-{uuid.uuid4().hex[:10]}"
    client = Tmux(socket_name=name, config_file="/dev/null", timeout=10.0, probe_timeout=3.0)
    yield client
    subprocess.run(
        ["tmux", "-L", name, "kill-server"], capture_output=True, timeout=10, check=False
    )


@pytest.fixture
def fake_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(program path, conversation dir); FAKE_HARNESS_DIR is set for spawned panes."""
    if not FAKE_HARNESS.exists():
        pytest.skip("tests-integration/harness/fake_harness.py is not in this checkout")
    convo = tmp_path / "conversations"
    convo.mkdir()
    monkeypatch.setenv("FAKE_HARNESS_DIR", str(convo))
    return FAKE_HARNESS, convo


def _make_event(
    ref: str | WorkItemRef = "github:acme/widgets#7",
    *,
    delivery_id: str | None = None,
    body: str = "please look at the failing test",
    kind: EventKind = EventKind.COMMENT,
    actor: str = "alice",
) -> Event:
    work_item = ref if isinstance(ref, WorkItemRef) else WorkItemRef.parse(ref)
    return Event(
        delivery_id=delivery_id or f"comment:test:{uuid.uuid4().hex[:12]}",
        work_item=work_item,
        kind=kind,
        actor=actor,
        body=body,
        url="https://example.invalid/acme/widgets/issues/7#c1",
        created_at=datetime.now(timezone.utc),
    )


@pytest.fixture(name="make_event")
def make_event_fixture():
    """Factory: make_event(ref, delivery_id=..., body=..., kind=..., actor=...)."""
    return _make_event
