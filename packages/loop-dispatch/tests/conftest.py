"""Fixtures for loop-dispatch's tests: a private real tmux, the modelled fake tmux,
a store, an event log, and the fake harness program (from tests-integration/harness).

The private server, the fake and `wait_until` come from the loop_tmux.testing plugin."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_dispatch.eventlog import EventLog
from loop_dispatch.model import Event, EventKind, WorkItemRef
from loop_dispatch.pgcluster import Cluster, ClusterUnavailable, start_cluster
from loop_dispatch.store import Store
from loop_tmux import Tmux
from loop_tmux.testing import fake_client, finished_records, wait_until

REPO = Path(__file__).resolve().parents[3]
FAKE_HARNESS = REPO / "tests-integration" / "harness" / "fake_harness.py"

# A process a test started that outlives the run fails it (loop-cli's tests/leakguard.py,
# shared by every suite of the repository).
sys.path.insert(0, str(REPO / "packages" / "loop-cli" / "tests"))
import leakguard  # noqa: E402

leakguard.register(globals())


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One private PostgreSQL cluster for the session (skipped, naming what is missing,
    where no server binaries exist; on CI .ci/run installs them)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'loop-dispatch[postgresql]')")
    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        pytest.skip(f"no private PostgreSQL cluster: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def backend() -> str:
    """Which store backend the `store` fixture opens; store, inbox and registry tests
    override it to run on both."""
    return "sqlite"


@pytest.fixture
def store(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    if backend == "postgresql":
        cluster: Cluster = request.getfixturevalue("pg_cluster")
        s = Store.open(url=cluster.create_database(), password=cluster.password)
    else:
        s = Store.open(tmp_path / "state")
    yield s
    s.close()


@pytest.fixture
def events(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "events.jsonl")


@pytest.fixture
def real_tmux(tmux_server: Tmux) -> Tmux:
    """A tmux server on a private socket (loop_tmux.testing's `tmux_server`: at teardown
    it, only it, is killed and its socket file, which tmux 3.3a leaves behind, removed)."""
    # A bystander session keeps the server up when a test kills an item's session (as in
    # a real fleet); otherwise the next command races the emptied server's exit.
    assert tmux_server.spawn("bystander", ["sleep", "600"], "/").ok
    return tmux_server


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


class FakeTmuxKit:
    """loop_tmux.fake behind the real client: `.tmux`, `.state`, and `.on_sleep` hooks
    run during the dispatcher's survival window (e.g. to let a pane die there)."""

    def __init__(self, tmp_path: Path) -> None:
        self.on_sleep: list = []
        self.tmux, self.state = fake_client(
            tmp_path,
            # Each call starts a Python process (~80 ms): 25x that, so a loaded box is
            # not UNKNOWN; the hang faults wait these out, so not more.
            timeout=3.0,
            probe_timeout=2.0,
            sleep=self._sleep,
        )

    def _sleep(self, delay: float) -> None:
        for hook in self.on_sleep:
            hook()

    def verbs(self) -> list[str]:
        return self.state.commands()


@pytest.fixture
def fake_tmux(tmp_path: Path) -> FakeTmuxKit:
    return FakeTmuxKit(tmp_path)


@pytest.fixture
def make_dispatcher(store: Store, events: EventLog, tmp_path: Path):
    """Factory: make_dispatcher(tmux, adapter=None, **kwargs) -> Dispatcher."""
    from loop_dispatch.adapters import ClaudeCodeAdapter
    from loop_dispatch.dispatcher import Dispatcher

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)

    def build(tmux: Tmux, adapter=None, **kwargs):
        kwargs.setdefault("survival_delay", 0.0)
        kwargs.setdefault("terminate_grace", 0.5)
        return Dispatcher(
            store,
            tmux,
            adapter or ClaudeCodeAdapter(checks=False),
            events,
            "0.1.0-test",
            cwd_for=lambda ref: work,
            lock_dir=tmp_path / "locks",
            **kwargs,
        )

    return build


def read_conversation(directory: Path, conversation_id: str) -> list[dict]:
    return finished_records(directory / f"{conversation_id}.jsonl")


@pytest.fixture(name="read_conversation")
def read_conversation_fixture():
    return read_conversation


@pytest.fixture(name="wait_for")
def wait_for_fixture():
    """loop_tmux.testing's wait_until: poll until truthy (returned), or fail the test."""
    return wait_until
