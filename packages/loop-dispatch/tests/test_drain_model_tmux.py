"""1,000 events over 50 items through the real Dispatcher and Drain, against an
in-memory model of tmux that goes silent at random (issue 9's acceptance).

The model keeps real tmux's behaviour where it matters for delivery: a silent paste is
never carried out (its client is killed, so tmux fails `load-buffer -`), a silent
`new-session` may still be carried out (tmux runs it when it resumes), a session
carries the spawn token it was created with, and a harness receives its prompt as argv.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from dataclasses import dataclass, field

from loop_dispatch.adapters import GenericAdapter
from loop_dispatch.drain import Drain, RetryPolicy
from loop_dispatch.model import EventKind
from loop_tmux import (
    DeliverResult,
    Observation,
    Presence,
    SpawnOutcome,
    SpawnResult,
    TmuxUnavailable,
)

MARK = re.compile(r"MK-\d+-\d+-KM")
V = {"loop-cli": "1", "loop-dispatch": "1", "loop-tmux": "1"}


@dataclass
class _Session:
    token: str | None
    received: list[str] = field(default_factory=list)  # prompt, then pastes
    alive: bool = True


class ModelTmux:
    """The part of `loop_tmux.Tmux` the dispatcher uses, with random silence."""

    def __init__(self, rng: random.Random, silence: float) -> None:
        self.rng = rng
        self.silence = silence
        self.sessions: dict[str, _Session] = {}
        self.ended: list[_Session] = []
        self.lock = threading.Lock()
        self.silent_calls = 0
        self.late_spawns = 0

    def _silent(self) -> bool:
        with self.lock:
            quiet = self.rng.random() < self.silence
            self.silent_calls += quiet
            return quiet

    def probe(self, name: str, **_: object) -> Presence:
        if self._silent():
            return Presence.UNKNOWN
        s = self.sessions.get(name)
        if s is None:
            return Presence.ABSENT
        return Presence.LIVE if s.alive else Presence.DEAD

    def observe(self, name: str, **_: object) -> Observation:
        """Presence and token in one call, as `Tmux.observe` reads them."""
        if self._silent():
            return Observation(presence=Presence.UNKNOWN, error="tmux did not answer within 10s")
        s = self.sessions.get(name)
        if s is None:
            return Observation(presence=Presence.ABSENT)
        presence = Presence.LIVE if s.alive else Presence.DEAD
        return Observation(presence=presence, token=s.token or "")

    def session_token(self, name: str, **_: object) -> str | None:
        if self._silent():
            raise TmuxUnavailable("tmux did not answer within 10s")
        s = self.sessions.get(name)
        return None if s is None else s.token

    def survived(self, name: str, delay: float, **_: object) -> bool:
        if self._silent():
            raise TmuxUnavailable("tmux did not answer within 10s")
        s = self.sessions.get(name)
        return s is not None and s.alive

    def spawn(self, name, argv, cwd, env=None, *, token=None, **_: object) -> SpawnResult:
        silent = self._silent()
        with self.lock:
            s = self.sessions.get(name)
            if s is not None and s.alive:
                if silent:
                    return SpawnResult(
                        outcome=SpawnOutcome.FAILED, error="no answer", answered=False
                    )
                return SpawnResult(outcome=SpawnOutcome.OCCUPIED_LIVE, error="live occupant")
            if silent and self.rng.random() < 0.5:  # never carried out
                return SpawnResult(outcome=SpawnOutcome.FAILED, error="no answer", answered=False)
            if s is not None:
                self.ended.append(s)
            self.sessions[name] = _Session(token=token, received=[argv[-1]])
            if silent:  # carried out late, when tmux resumes
                self.late_spawns += 1
                return SpawnResult(outcome=SpawnOutcome.FAILED, error="no answer", answered=False)
            return SpawnResult(outcome=SpawnOutcome.SPAWNED, pid=1000 + len(self.sessions))

    def deliver(self, name: str, text: str, **_: object) -> DeliverResult:
        if self._silent():  # the killed client's paste fails inside tmux: nothing lands
            return DeliverResult(
                ok=False, session_missing=False, error="tmux did not answer within 10s"
            )
        with self.lock:
            s = self.sessions.get(name)
            if s is None or not s.alive:
                return DeliverResult(
                    ok=False, session_missing=True, error=f"session {name} is gone"
                )
            s.received.append(text)
        return DeliverResult(ok=True)

    def terminate(self, name: str, grace: float = 5.0) -> bool:
        if self._silent():
            return False
        with self.lock:
            s = self.sessions.get(name)
            if s is not None:
                s.alive = False
        return True


def test_1000_events_over_50_items_with_a_flaky_modelled_tmux_each_delivered_once_in_order(
    store, events, make_event, make_dispatcher
) -> None:
    rng = random.Random(int(os.environ.get("LOOP_MODEL_SEED", "20261203")))  # to replay a run
    tmux = ModelTmux(rng, silence=0.15)
    disp = make_dispatcher(tmux, GenericAdapter(["harness", "{prompt}"]), survival_delay=0.0)
    sent: dict[str, list[str]] = {}
    batch = []
    for n in range(1000):
        item, k = n % 50, n // 50
        ref = f"local:p{item}#1"
        marker = f"MK-{item}-{k}-KM"
        kind = EventKind.OPENED if k == 0 else EventKind.COMMENT
        batch.append(make_event(ref, body=f"comment {marker}", kind=kind, delivery_id=f"d{n}"))
        sent.setdefault(batch[-1].work_item.tmux_name(), []).append(marker)
    store.inbox.accept("t", batch)
    drain = Drain(
        store,
        disp,
        events,
        versions=V,
        policy=RetryPolicy(backoff=0.001, max_backoff=0.005),
        concurrency=4,
        idle=0.005,
    )
    stop = threading.Event()
    runner = threading.Thread(target=drain.run, args=(stop,), daemon=True)
    started = time.monotonic()
    runner.start()
    deadline = started + 300
    while store.inbox.counts().get("done", 0) < 1000 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    runner.join(30)

    once = twice = lost = 0
    disorder = []
    for name, markers in sent.items():
        session = tmux.sessions[name]
        got = [m for text in session.received for m in MARK.findall(text)]
        for marker in markers:
            count = got.count(marker)
            once += count == 1
            twice += count > 1
            lost += count == 0
        if [m for m in got if m in markers] != markers:
            disorder.append(name)
    line = (
        f"modelled tmux, 1000 events / 50 items: once={once} twice={twice} lost={lost} "
        f"out-of-order items={len(disorder)}; silent tmux calls={tmux.silent_calls}, "
        f"late spawns={tmux.late_spawns}, adopted={len(events.read('session.adopted'))}, "
        f"carried={len(events.read('dispatch.carried'))}, "
        f"in {time.monotonic() - started:.1f}s"
    )
    print("\n" + line)
    assert (once, twice, lost) == (1000, 0, 0), line
    assert disorder == [], line
    assert tmux.silent_calls > 100, line  # the faults really were injected
    assert tmux.ended == [], line  # no session was ever replaced (no respawn)
    assert store.inbox.counts() == {"done": 1000}, line
