"""SIGHUP for a foreground daemon: heard, logged, and otherwise a no-op.

A terminal that closes, `systemctl reload`, or an operator used to "HUP reloads" sends
SIGHUP; its default action ends the process (exit 129) and leaves a stale heartbeat
while the agents wait. The daemons keep running instead and say so in one log line:
the configuration is read at start, so a changed config takes a restart (which never
ends the agents: their tmux server is not the daemon's child).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

__all__ = ["hangup_ignored"]

log = logging.getLogger("loop.daemon")  # daemonlog.DAEMON_LOGGER


@contextlib.contextmanager
def hangup_ignored(daemon: str) -> Iterator[None]:
    """Within the block, SIGHUP is logged (once per signal) and ignored.

    The handler only sets a flag; a small thread writes the line, so logging never
    runs inside a signal handler (it could re-enter a stream mid-write). Outside the
    main thread (tests invoking the command in-process) nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heard = threading.Event()
    done = threading.Event()

    def on_hangup(_signum: int, _frame: object) -> None:
        heard.set()

    def report() -> None:
        while True:
            heard.wait()
            if done.is_set():
                return
            heard.clear()
            log.warning(
                "%s: SIGHUP received and ignored: still running (the configuration is "
                "read at start; restart the daemon to apply a change)",
                daemon,
            )

    reporter = threading.Thread(target=report, name=f"{daemon}-sighup", daemon=True)
    reporter.start()
    previous = signal.signal(signal.SIGHUP, on_hangup)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)
        done.set()
        heard.set()
        reporter.join(timeout=1)
