"""docs/events.md lists every event type the repository writes (operators filter on them).

Static: every string literal a package passes as the type of an `emit(...)` call, and
loop-dispatch's EVENT_TYPES, must appear in the page as a code span.
"""

from __future__ import annotations

import re
from pathlib import Path

from loop_dispatch.eventlog import EVENT_TYPES

REPO = Path(__file__).resolve().parents[1]
# `.emit("type"`, `_emit("type"`, `self._emit(\n    "type",` ...
EMIT_CALL = re.compile(r"[._]emit\(\s*\"([a-z_]+\.[a-z_]+)\"")


def _emitted_types() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(REPO.glob("packages/*/src/**/*.py")):
        for type_ in EMIT_CALL.findall(path.read_text(encoding="utf-8")):
            found.setdefault(type_, path.relative_to(REPO))
    return found


def test_the_scan_sees_each_family_of_writers() -> None:
    found = _emitted_types()
    # One literal from each writer, so a scan that silently matches nothing fails here.
    assert {"session.spawned", "inbox.rearmed", "webhook.received", "session.env_restart"} <= set(
        found
    )


def test_every_emitted_type_is_documented() -> None:
    page = (REPO / "docs" / "events.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([a-z_]+\.[a-z_]+)`", page))
    missing = {t: str(p) for t, p in _emitted_types().items() if t not in documented}
    missing |= {t: "loop_dispatch.eventlog.EVENT_TYPES" for t in EVENT_TYPES - documented}
    assert not missing, f"event types missing from docs/events.md: {missing}"
