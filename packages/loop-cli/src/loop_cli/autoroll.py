"""`env.autoRoll: idle`: the poll daemon rolls each stale session at its next idle moment.

After an env-file rotation nobody has to run `sessions restart`: every
`AUTO_ROLL_SECONDS` (debounced: not every cycle, and never two runs at once) the daemon
runs the restart of this host's own stale sessions with a short wait
(`AUTO_ROLL_WAIT`, long enough for a harness without a signal to show a still screen):
each session idle then is relaunched under its item's lock, a busy one is left for a
later look, unrecorded. Relaunches are recorded as `session.env_restart` with
`auto: true`, at most `max_parallel` respawns in flight at once. It runs in a thread
of its own, so the poll cycle and its heartbeat go on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .rotation.restart import DEFAULT_WORKERS, Rollout, Row, restart_sessions

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["AUTO_ROLL_SECONDS", "AUTO_ROLL_WAIT", "AutoRoll", "roll_stale"]

AUTO_ROLL_SECONDS = 10.0
"""The least time between two looks for stale sessions."""
AUTO_ROLL_WAIT = 5.0
"""How long one look waits for a session to go idle (an "unknown" one needs its screen
still for 3 s) before leaving it for the next look."""


def roll_stale(rt: Runtime, max_parallel: int = DEFAULT_WORKERS) -> list[Row]:
    """One look: relaunch this host's stale sessions that are idle within AUTO_ROLL_WAIT."""
    from .host_restart import this_host_selection
    from .rotation.launcher import require_env_file

    env = require_env_file(rt.config)
    how = Rollout(wait_idle=AUTO_ROLL_WAIT, busy="skip", max_parallel=max_parallel, auto=True)
    return restart_sessions(this_host_selection(rt), env, rt.restart_deps(), how=how)


class AutoRoll:
    """The daemon's side: `maybe()` each cycle starts a look when one is due."""

    def __init__(
        self,
        rt: Runtime,
        *,
        every: float = AUTO_ROLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rt = rt
        self.every = every
        self.clock = clock
        self.last: float | None = None
        self.thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.rt.config.env.auto_roll == "idle" and self.rt.config.env.file is not None

    def maybe(self) -> bool:
        """Start a look in the background when enabled, due and none runs; True if so."""
        if not self.enabled:
            return False
        if self.thread is not None and self.thread.is_alive():
            return False
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return False
        self.last = now
        self.thread = threading.Thread(target=self._run, name="the-loop-autoroll", daemon=True)
        self.thread.start()
        return True

    def _run(self) -> None:
        """One look; a failure is recorded (`poll.error`) and the next look tries again."""
        try:
            roll_stale(self.rt)
        except Exception as exc:
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            self.rt.event_log.emit(
                "poll.error",
                level="error",
                source="poller",
                detail={"error": error, "during": "env.autoRoll"},
            )

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)
