"""The root of loop_envstate's exceptions: `except EnvstateError` catches every one."""

from __future__ import annotations

__all__ = ["EnvstateError"]


class EnvstateError(Exception):
    """An expected failure of loop_envstate (an unusable env file, a failed exec...)."""
