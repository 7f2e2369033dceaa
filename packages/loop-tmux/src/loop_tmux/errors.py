"""Exceptions and warnings raised by loop_tmux: every exception is a `TmuxError`."""

from __future__ import annotations


class TmuxError(Exception):
    """The root of loop_tmux's exceptions: `except TmuxError` catches every one."""


class TmuxUnavailable(TmuxError):
    """tmux gave no usable answer (timeout, OSError, missing binary, unrecognised error).

    Raised only by reads that have no other honest way to say "I do not know"
    (``panes``, ``pane_pids``, ``survived``); actions report it in their result.
    """


class TmuxCapabilityWarning(RuntimeWarning):
    """The installed tmux lacks a flag loop_tmux would use; it proceeds without it."""
