"""A Hypothesis state machine drives dispatch attempts against the modelled fake tmux
(loop_tmux.fake) with injected silences, late spawns, deaths and strangers, and checks
after every step what the design promises:

- a delivery id is never pasted twice, nor pasted into a session whose prompt carried it
  (an event's own late spawn is adopted, never pasted into a second time);
- a live occupant is never killed or replaced (UNKNOWN is never treated as ABSENT);
- a transient fault never uses an attempt (a silent tmux fails transiently only).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from loop_dispatch.adapters import GenericAdapter
from loop_dispatch.dispatcher import Dispatcher
from loop_dispatch.eventlog import EventLog
from loop_dispatch.model import Event, EventKind, WorkItemRef
from loop_dispatch.reasons import Outcome, OutcomeKind
from loop_dispatch.store import Store
from loop_tmux import Tmux
from loop_tmux.fake import FakeState, install_fake_tmux

REF = "local:machine#1"
NAME = "loop-local_machine_1"
MARK = re.compile(r"MK-\d+-KM")
SILENCES = [
    None,
    {"hang": ["has-session"]},  # every look and every paste
    {"hang": ["list-panes"]},  # presence reads
    {"hang": ["load-buffer"]},  # the paste alone
    {"late": ["new-session"]},  # a spawn carried out, never answered
]


def _make_event(body: str, kind: EventKind) -> Event:
    return Event(
        delivery_id=f"comment:machine:{uuid.uuid4().hex[:12]}",
        work_item=WorkItemRef.parse(REF),
        kind=kind,
        actor="alice",
        body=body,
        url="https://example.invalid/machine/1",
        created_at=datetime.now(timezone.utc),
    )


class DispatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="loop-machine-"))
        state_path = self.tmp / "fake.json"
        shim = install_fake_tmux(self.tmp / "bin", state_path)
        self.fake = FakeState(state_path)
        self.tmux = Tmux(binary=str(shim), socket_name="fake", timeout=1.5, probe_timeout=1.0)
        self.store = Store.open(self.tmp / "state")
        work = self.tmp / "work"
        work.mkdir()
        self.disp = Dispatcher(
            self.store,
            self.tmux,
            GenericAdapter(["harness", "{prompt}"]),
            EventLog(self.tmp / "events.jsonl"),
            "0.1.0-test",
            cwd_for=lambda ref: work,
            lock_dir=self.tmp / "locks",
            survival_delay=0.0,
        )
        self.n = 0
        self.pending: dict[str, Any] = {}  # delivery id -> event, failed and retryable
        self.definite: dict[str, int] = {}  # attempts used, per delivery id
        self.done: set[str] = set()
        self.strangers: set[str] = set()  # pane ids of sessions that are not ours
        self.faulted: list[tuple[str, Outcome]] = []
        self.held: dict[str, Any] = {}  # waiting while the item is paused (issue 24)
        self.paused = False

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the world ----------------------------------------------------------------------

    def _session(self) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.fake.sessions().get(NAME)
        return found

    def _live_panes(self) -> set[str]:
        session = self._session()
        if session is None:
            return set()
        return {p["id"] for p in session["panes"] if not p["dead"]}

    @rule()
    def a_death(self) -> None:
        if self._session() is not None:
            self.fake.set_dead(NAME)
        self.strangers.clear()  # a dead occupant may be cleared

    @rule()
    def a_vanishing(self) -> None:
        with self.fake.edit() as state:
            state["sessions"].pop(NAME, None)
        self.strangers.clear()

    @rule()
    def a_stranger(self) -> None:
        if self._session() is None:
            self.fake.add_session(NAME, command="stranger")
            self.strangers |= self._live_panes()

    # -- attempts -----------------------------------------------------------------------

    @rule(silence=st.sampled_from(SILENCES), retry=st.booleans())
    def an_attempt(self, silence: dict[str, list[str]] | None, retry: bool) -> None:
        if retry and self.pending:
            event = next(iter(self.pending.values()))
            self.pending.pop(event.delivery_id)
        else:
            self.n += 1
            kind = EventKind.OPENED if self.n == 1 else EventKind.COMMENT
            event = _make_event(body=f"comment MK-{self.n}-KM", kind=kind)
        live_before = self._live_panes()
        for key, value in (silence or {}).items():
            self.fake.set_fault(key, value)
        try:
            outcome = self.disp.dispatch(event)
        finally:
            self.fake.clear_faults()
        # A live occupant is never killed or replaced, whatever tmux answered.
        assert live_before <= self._live_panes(), (silence, outcome)
        if outcome.kind is OutcomeKind.HELD:  # paused: it waits, never pasted now
            assert self.paused, outcome
            self.held[event.delivery_id] = event
        elif outcome.kind is OutcomeKind.FAILED:
            self.pending[event.delivery_id] = event
            if not outcome.transient:
                self.definite[event.delivery_id] = self.definite.get(event.delivery_id, 0) + 1
            if silence is not None:
                self.faulted.append((event.delivery_id, outcome))
        else:
            self.pending.pop(event.delivery_id, None)
            self.done.add(event.delivery_id)

    @rule(verb=st.sampled_from(["pause", "resume"]))
    def a_control_word(self, verb: str) -> None:
        """`the-loop pause|resume`: executed or refused, never pasted, never failed."""
        self.n += 1
        event = _make_event(f"the-loop {verb}\nCW-{self.n}-WC", EventKind.CONTROL)
        outcome = self.disp.dispatch(event)
        if verb == "resume" and not self.paused:
            assert outcome.reason == "control_rejected", outcome
            return
        assert outcome.reason == "control_executed", outcome
        self.paused = verb == "pause"
        if not self.paused:  # released: they come back (the drain's retry, here)
            self.pending.update(self.held)
            self.held.clear()

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def never_pasted_twice(self) -> None:
        typed = self.fake.typed(NAME) if hasattr(self, "fake") else []
        pasted = [m for entry in typed for text in entry[1:] for m in MARK.findall(text)]
        assert len(pasted) == len(set(pasted)), pasted
        words = " ".join(text for entry in typed for text in entry[1:])
        assert "CW-" not in words  # a control word is never pasted
        held = {m for e in getattr(self, "held", {}).values() for m in MARK.findall(e.body)}
        assert not held & set(pasted), (held, pasted)  # nothing held was pasted
        session = self._session() if hasattr(self, "fake") else None
        if session is not None and session["panes"][0]["command"] != "stranger":
            prompt = set(MARK.findall(" ".join(session.get("argv", []))))
            assert not prompt & set(pasted), (prompt, pasted)

    @invariant()
    def silence_uses_no_attempt(self) -> None:
        for delivery_id, outcome in getattr(self, "faulted", []):
            if outcome.reason not in ("occupied_unregistered", "session_occupied"):
                assert outcome.transient, (delivery_id, outcome)

    @invariant()
    def strangers_are_never_touched(self) -> None:
        for pane in getattr(self, "strangers", set()):
            session = self._session()
            if session is not None and session["panes"][0]["command"] == "stranger":
                assert pane in {p["id"] for p in session["panes"]}


DispatchMachine.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
TestDispatchMachine = DispatchMachine.TestCase
