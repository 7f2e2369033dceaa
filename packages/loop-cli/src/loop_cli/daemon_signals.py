"""SIGHUP for a foreground daemon: a request to re-read the config now.

A terminal that closes, `systemctl reload`, or an operator used to "HUP reloads" sends
SIGHUP; its default action ends the process (exit 129) and leaves a stale heartbeat
while the agents wait. `poll start` and `gh-webhook start` keep running instead: the
signal only raises a flag that the daemon's loop takes between cycles to re-read its
config file (live_config.py). The file is also compared before each cycle, so the
signal only makes a reload happen sooner; nothing is applied inside the handler.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

__all__ = ["hangup_reloads"]

log = logging.getLogger("loop.daemon")  # daemonlog.DAEMON_LOGGER


@contextlib.contextmanager
def hangup_reloads(daemon: str) -> Iterator[threading.Event]:
    """Within the block, SIGHUP sets the yielded event (the daemon's loop clears it
    when it re-reads the config) and logs one line.

    The handler only sets flags; a small thread writes the line, so logging never
    runs inside a signal handler (it could re-enter a stream mid-write). Outside the
    main thread (tests invoking the command in-process) nothing is installed: the
    event is then never set by a signal.
    """
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    heard = threading.Event()
    done = threading.Event()

    def on_hangup(_signum: int, _frame: object) -> None:
        requested.set()
        heard.set()

    def report() -> None:
        while True:
            heard.wait()
            if done.is_set():
                return
            heard.clear()
            log.info("%s: SIGHUP received: re-reading the configuration", daemon)

    reporter = threading.Thread(target=report, name=f"{daemon}-sighup", daemon=True)
    reporter.start()
    previous = signal.signal(signal.SIGHUP, on_hangup)
    try:
        yield requested
    finally:
        signal.signal(signal.SIGHUP, previous)
        done.set()
        heard.set()
        reporter.join(timeout=1)
