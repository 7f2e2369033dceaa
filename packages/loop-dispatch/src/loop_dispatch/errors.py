"""The root of loop_dispatch's exceptions: `except DispatchError` catches every one.

It lives in its own module, importing nothing, so that every module (the cheap model
as much as the store) can derive from it without an import circle.
"""

from __future__ import annotations

__all__ = ["DispatchError"]


class DispatchError(Exception):
    """An expected failure of loop_dispatch (bad ref, lock, store, lost ground...)."""
