"""Repositories read under different rules (issue 27 `projects:`), as one Source.

A project may have its own trigger label, its own authorized actors (added to the
global list) and its own `sessionPerPr`. The GitHub source reads every repository it
is given under one set of those; so the repositories are grouped by their rules, one
GitHubSource per group, and this wrapper polls each group and joins what they found.

They share the one stored cursor of the `github` source: each group reads the whole
cursor and writes back only its own repositories' entries, so a group that failed
this cycle leaves its repositories where they were and the others move on.
"""

from __future__ import annotations

import json
from typing import Any

from loop_dispatch import PollBatch

__all__ = ["GroupedSource"]


class GroupedSource:
    """dispatch's Source over several GitHubSources (disjoint repositories)."""

    name = "github"

    def __init__(self, sources: list[Any]) -> None:
        self.sources = sources

    def poll(self, cursor: str | None) -> PollBatch:
        batch = PollBatch(events=[], cursor=cursor, baseline=[], errors=[])
        merged = _parse(cursor)
        for source in self.sources:
            found = source.poll(cursor)
            batch.events.extend(found.events)
            batch.baseline.extend(found.baseline)
            batch.errors.extend(found.errors)
            merged = _take(merged, _parse(found.cursor), source.repositories)
        batch.events.sort(key=lambda e: e.created_at)
        batch.cursor = json.dumps(merged, sort_keys=True) if merged else cursor
        return batch

    def close(self) -> None:
        for source in self.sources:
            source.close()


def _parse(cursor: str | None) -> dict[str, Any]:
    if not cursor:
        return {}
    try:
        data = json.loads(cursor)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _take(into: dict[str, Any], found: dict[str, Any], repositories: list[str]) -> dict[str, Any]:
    """`into` with `found`'s entries for `repositories` (and its other fields where
    `into` has none yet: the version, the token's login)."""
    if not found:
        return into
    out = {**found, **into}
    repos = dict(into.get("repos") or {})
    mine = found.get("repos") or {}
    for repository in repositories:
        if repository in mine:
            repos[repository] = mine[repository]
    out["repos"] = repos
    return out
