"""The versions `the-loop version` and `--version` report: four packages, Python, tmux.

The packages are released separately, so a bug report needs all four. Each version is
read from its package's `__init__.py` text (where `__version__` is written, see
docs/releasing.md) without importing the package: `--version` stays as fast as before.
"""

from __future__ import annotations

import sys

PACKAGES = ("loop-cli", "loop-dispatch", "loop-tmux", "loop-envstate")


def _init_candidates(module: str) -> list[str]:
    """Where `module/__init__.py` lives: next to loop_cli (an installed tool), in the
    monorepo's `packages/<dist>/src` (a development install)."""
    import os

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dist = module.replace("_", "-")
    return [
        os.path.join(here, module, "__init__.py"),
        os.path.join(here, "..", "..", dist, "src", module, "__init__.py"),
    ]


def _read_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("__version__"):
                    return line.partition("=")[2].strip().strip("\"'")
    except OSError:
        return None
    return None


def _module_version(distribution: str) -> str | None:
    """`__version__` as written in the package's `__init__.py`, or None if not found.
    The usual places are tried first; a full import-path search (slower) last."""
    import os

    module = distribution.replace("-", "_")
    for path in _init_candidates(module):
        if os.path.isfile(path):
            return _read_version(path)
    from importlib.util import find_spec

    try:
        spec = find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return _read_version(spec.origin)


def tmux_version() -> str | None:
    """`tmux -V`'s version (`3.4`), or None when tmux is not installed or fails.

    posix_spawn on a pipe rather than `subprocess`, whose import alone would double
    what `--version` costs."""
    import os

    read_end, write_end = os.pipe()
    try:
        pid = os.posix_spawnp(
            "tmux",
            ["tmux", "-V"],
            {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, write_end, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    os.close(write_end)
    with os.fdopen(read_end, "rb") as out:
        text = out.read(200).decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    words = text.split()
    return words[-1] if os.waitstatus_to_exitcode(status) == 0 and words else None


def versions(*, tmux: bool = True) -> dict[str, str | None]:
    """{"loop-cli": "0.1.0", ..., "python": "3.12.3", "tmux": "3.4"}; None = not found."""
    found: dict[str, str | None] = {name: _module_version(name) for name in PACKAGES}
    found["python"] = sys.version.split()[0]
    if tmux:
        found["tmux"] = tmux_version()
    return found


def render_text(found: dict[str, str | None]) -> str:
    """`the-loop X` first (what scripts grep), then one aligned line per component."""
    width = max(len(name) for name in found) + 2
    lines = [f"the-loop {found.get('loop-cli') or '?'}"]
    lines += [f"  {name.ljust(width)}{found[name] or 'not found'}" for name in found]
    return "\n".join(lines)
