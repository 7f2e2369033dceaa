"""Claude Code's folder trust, seeded for a new worktree.

Claude Code asks "do you trust the files in this folder?" the first time it starts in a
directory and waits on that dialog: an agent spawned into a fresh worktree would sit
there and every pasted comment would land on the dialog. Claude Code records the answer
in its global config (`$CLAUDE_CONFIG_DIR/.claude.json`, else `~/.claude.json`) under
`projects[<absolute path>].hasTrustDialogAccepted`; we set that key for worktrees the-loop
itself made, and touch nothing else in the file.

The file is rewritten atomically (temp file + rename) so a reader never sees half of
it; a file that is not a JSON object is left alone (one-line error), never replaced.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["TrustError", "claude_config_file", "is_trusted", "trust_folder"]

TRUST_KEY = "hasTrustDialogAccepted"


class TrustError(Exception):
    """The Claude Code config could not be read or written (one line)."""


def claude_config_file(environ: dict[str, str] | None = None) -> Path:
    """Where Claude Code keeps its global config for this user."""
    env = os.environ if environ is None else environ
    base = env.get("CLAUDE_CONFIG_DIR")
    if base:
        return Path(base) / ".claude.json"
    return Path(env.get("HOME") or Path.home()) / ".claude.json"


def _read(file: Path) -> dict:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise TrustError(f"{file}: cannot read Claude Code's config: {exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrustError(f"{file}: not JSON (line {exc.lineno}); folder trust not seeded") from None
    if not isinstance(data, dict):
        raise TrustError(f"{file}: not a JSON object; folder trust not seeded")
    return data


def is_trusted(folder: Path, file: Path | None = None) -> bool:
    data = _read(file or claude_config_file())
    entry = (data.get("projects") or {}).get(str(Path(folder).resolve()))
    return isinstance(entry, dict) and entry.get(TRUST_KEY) is True


def trust_folder(folder: Path, file: Path | None = None) -> bool:
    """Mark `folder` trusted; True when the file changed (False: it already was)."""
    target = file or claude_config_file()
    data = _read(target)
    projects = data.setdefault("projects", {})
    if not isinstance(projects, dict):
        raise TrustError(f"{target}: 'projects' is not an object; folder trust not seeded")
    key = str(Path(folder).resolve())
    entry = projects.setdefault(key, {})
    if not isinstance(entry, dict):
        raise TrustError(f"{target}: projects[{key}] is not an object; not seeded")
    if entry.get(TRUST_KEY) is True:
        return False
    entry[TRUST_KEY] = True
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".claude.json.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise TrustError(f"{target}: cannot write Claude Code's config: {exc}") from None
    return True
