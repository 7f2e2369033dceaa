"""`the-loop sessions link-pr` / `unlink-pr`: tie a pull request to an item by hand.

For a PR the-loop cannot link itself (no `loop/<slug>` branch, no closing keyword,
nothing in GitHub's sidebar). A manual link is the strongest way (github/links.py):
the poller and the webhook route the PR's activity to the item until it is unlinked.
"""

from __future__ import annotations

import re
from typing import Any

import click

from ..errors import UsageError
from ._common import complete_ref, echo_json, output_option, parse_ref, runtime

_PR = re.compile(r"(?:(?P<repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+)#|#)?(?P<number>[1-9][0-9]{0,9})")


def _pr(text: str, item: Any, configured: list[str]) -> tuple[str, int]:
    """`N` / `#N` (the item's repository) or `OWNER/REPO#N` of a configured one."""
    m = _PR.fullmatch(text.strip())
    if m is None:
        raise UsageError("PR must be a number (N, #N) or OWNER/REPO#N")
    repo = (m.group("repo") or item.project).lower()
    if repo not in {r.lower() for r in configured}:
        raise UsageError(
            f"{repo} is not in github.repositories: a PR of an unconfigured repository "
            "cannot be linked"
        )
    return repo, int(m.group("number"))


def _github_item(ref: str) -> Any:
    item = parse_ref(ref)
    if item.source != "github":
        raise UsageError(f"{item} is not a GitHub item: only GitHub items have pull requests")
    return item


@click.command("link-pr", epilog="Example: the-loop sessions link-pr github:acme/api#3 12")
@click.argument("ref", shell_complete=complete_ref)
@click.argument("pr")
@output_option("json")
@click.pass_context
def link_pr(ctx: click.Context, ref: str, pr: str, fmt: str) -> None:
    """Route pull request PR's activity to REF (before any automatic link)."""
    from ..github.links import PrLinks

    item = _github_item(ref)
    rt = runtime(ctx)
    repo, number = _pr(pr, item, list(rt.config.github.repositories))
    links = PrLinks(rt.store)
    links.set(repo, number, "manual", item)
    _echo(fmt, item, repo, number, "linked", links)


@click.command("unlink-pr", epilog="Example: the-loop sessions unlink-pr github:acme/api#3 12")
@click.argument("ref", shell_complete=complete_ref)
@click.argument("pr")
@output_option("json")
@click.pass_context
def unlink_pr(ctx: click.Context, ref: str, pr: str, fmt: str) -> None:
    """Remove a link-pr link (exit 1 when PR has no manual link to REF)."""
    from ..errors import OperationalError
    from ..github.links import PrLinks

    item = _github_item(ref)
    rt = runtime(ctx)
    repo, number = _pr(pr, item, list(rt.config.github.repositories))
    links = PrLinks(rt.store)
    manual = [x for x in links.of_pr(repo, number) if x.via == "manual"]
    if not manual or manual[0].item != item:
        raise OperationalError(f"{repo}#{number} has no link-pr link to {item}")
    links.remove(repo, number, "manual")
    _echo(fmt, item, repo, number, "unlinked", links)


def _echo(fmt: str, item: Any, repo: str, number: int, outcome: str, links: Any) -> None:
    remaining = links.of_pr(repo, number)
    now = remaining[0] if remaining else None
    row = {
        "ref": str(item),
        "pr": f"{repo}#{number}",
        "outcome": outcome,
        "routesTo": str(now.item) if now else None,
        "via": now.via if now else None,
    }
    if fmt == "json":
        echo_json(row)
        return
    where = f"{row['routesTo']} (via {row['via']})" if now else "no item"
    click.echo(f"{row['pr']}: {outcome} {'to' if outcome == 'linked' else 'from'} {item}")
    click.echo(f"its activity now goes to {where}")
