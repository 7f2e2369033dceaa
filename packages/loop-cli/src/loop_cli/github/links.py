"""Which work item a pull request belongs to, remembered in the store (issue 27).

A PR links to an item four ways, strongest first: `manual` (`the-loop sessions
link-pr`), `branch` (its head is `loop/<slug>`), `sidebar` (linked in GitHub's
"Development" sidebar, which GitHub exposes only through GraphQL's
`closingIssuesReferences`) and `keyword` (`Fixes #3` in its body). The poller writes
the automatic ways each time it reads a changed PR; a webhook payload lacks the sidebar,
so the receiver asks here and routes the PR's events the same way. One row per
(repository, PR, way): unlinking in the sidebar drops the sidebar row, and the PR falls
back to the next way that still holds.

The CI retry budget (github/cibudget.py) keeps its table in this namespace too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from loop_dispatch import WorkItemRef

__all__ = ["AUTOMATIC", "MIGRATIONS", "NAMESPACE", "VIAS", "PrLink", "PrLinks"]

NAMESPACE = "loop_cli.github"
MIGRATIONS = [
    """
    CREATE TABLE loop_cli_github_pr_links (
        repository TEXT NOT NULL,
        pr         INTEGER NOT NULL,
        via        TEXT NOT NULL,
        item       TEXT NOT NULL,
        linked_at  TEXT NOT NULL,
        PRIMARY KEY (repository, pr, via)
    );
    CREATE INDEX loop_cli_github_pr_links_by_item ON loop_cli_github_pr_links (item);
    """,
    """
    CREATE TABLE loop_cli_github_ci_pastes (
        delivery_id TEXT PRIMARY KEY,
        repository  TEXT NOT NULL,
        check_name  TEXT NOT NULL,
        sha         TEXT NOT NULL,
        escalated   INTEGER NOT NULL,
        failed_at   TEXT NOT NULL,
        pasted_at   TEXT NOT NULL
    );
    CREATE INDEX loop_cli_github_ci_pastes_by_check
        ON loop_cli_github_ci_pastes (repository, check_name, sha);
    """,
]
VIAS = ("manual", "branch", "sidebar", "keyword")  # strongest first
AUTOMATIC = frozenset({"branch", "sidebar", "keyword"})  # what the poller rewrites


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class PrLink:
    repository: str
    pr: int
    via: str
    item: WorkItemRef

    def as_dict(self) -> dict[str, Any]:
        return {"repository": self.repository, "pr": self.pr, "via": self.via}


class PrLinks:
    """The PR -> item links in dispatch's Store (its own namespace and table)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._ready = store.ensure_schema(NAMESPACE, MIGRATIONS) >= 1

    def target(self, repository: str, pr: int) -> WorkItemRef | None:
        """The item of the strongest link the PR has, None when it has none."""
        links = self.of_pr(repository, pr)
        return links[0].item if links else None

    def of_pr(self, repository: str, pr: int) -> list[PrLink]:
        if not self._ready:
            return []
        rows = self._store.query(
            "SELECT repository, pr, via, item FROM loop_cli_github_pr_links "
            "WHERE repository = ? AND pr = ?",
            (repository.lower(), int(pr)),
        )
        return sorted((_link(row) for row in rows), key=lambda link: VIAS.index(link.via))

    def by_item(self) -> dict[str, list[dict[str, Any]]]:
        """Every item's PRs (strongest way per PR), for `sessions list -o json`."""
        if not self._ready:
            return {}
        rows = self._store.query(
            "SELECT repository, pr, via, item FROM loop_cli_github_pr_links", ()
        )
        best: dict[tuple[str, int], PrLink] = {}
        for link in (_link(row) for row in rows):
            key = (link.repository, link.pr)
            if key not in best or VIAS.index(link.via) < VIAS.index(best[key].via):
                best[key] = link
        out: dict[str, list[dict[str, Any]]] = {}
        for key in sorted(best):
            link = best[key]
            out.setdefault(str(link.item), []).append(link.as_dict())
        return out

    def set(self, repository: str, pr: int, via: str, item: WorkItemRef) -> None:
        if via not in VIAS:
            raise ValueError(f"unknown link way {via!r}")
        with self._store.transaction() as conn:
            _upsert(conn, repository.lower(), int(pr), via, str(item))

    def remove(self, repository: str, pr: int, via: str) -> bool:
        with self._store.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM loop_cli_github_pr_links WHERE repository = ? AND pr = ? AND via = ?",
                (repository.lower(), int(pr), via),
            )
            return bool(cur.rowcount > 0)

    def replace_automatic(
        self, repository: str, pr: int, links: dict[str, WorkItemRef], *, keep: frozenset[str]
    ) -> None:
        """The automatic ways as the poller just read them; a way it did not read this
        time (`keep`: GraphQL failed, so the sidebar is unknown) stays as it was."""
        repo = repository.lower()
        with self._store.transaction() as conn:
            for via in sorted(AUTOMATIC - keep):
                if via not in links:
                    conn.execute(
                        "DELETE FROM loop_cli_github_pr_links "
                        "WHERE repository = ? AND pr = ? AND via = ?",
                        (repo, int(pr), via),
                    )
            for via, item in sorted(links.items()):
                _upsert(conn, repo, int(pr), via, str(item))


def _upsert(conn: Any, repository: str, pr: int, via: str, item: str) -> None:
    conn.execute(
        "INSERT INTO loop_cli_github_pr_links(repository, pr, via, item, linked_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(repository, pr, via) "
        "DO UPDATE SET item = excluded.item, linked_at = excluded.linked_at",
        (repository, pr, via, item, _now()),
    )


def _link(row: Any) -> PrLink:
    return PrLink(str(row[0]), int(row[1]), str(row[2]), WorkItemRef.parse(str(row[3])))
