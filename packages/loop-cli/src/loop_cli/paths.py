"""Where the-loop keeps things by default (platformdirs: XDG on Linux)."""

from __future__ import annotations

from pathlib import Path

APP = "the-loop"
CONFIG_ENV = "THE_LOOP_CONFIG"
LOCAL_CONFIG = Path(".the-loop") / "config.yaml"


def user_config_file() -> Path:
    """`<user config dir>/config.yaml`, e.g. ~/.config/the-loop/config.yaml."""
    from platformdirs import user_config_path

    return user_config_path(APP) / "config.yaml"


def user_state_dir() -> Path:
    """Default state directory, e.g. ~/.local/state/the-loop."""
    from platformdirs import user_state_path

    return user_state_path(APP)
