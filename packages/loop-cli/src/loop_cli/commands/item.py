"""`the-loop item ...`: the built-in local tracker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..lazy import SuggestingGroup
from ._common import complete_ref, echo_json, output_option, parse_ref, runtime, table

if TYPE_CHECKING:
    from ..tracker import LocalTracker


@click.group(cls=SuggestingGroup)
def item() -> None:
    """Work items of the built-in local tracker (refs look like local:PROJECT#N)."""


def _tracker(ctx: click.Context) -> LocalTracker:
    from ..tracker import LocalTracker

    return LocalTracker(runtime(ctx).store)


@item.command("open", epilog="Example: the-loop item open 'Fix the login page' --body 'It 500s'")
@click.argument("title")
@click.option("--body", default="", help="Longer description, sent with the title.")
@click.option("--project", default=None, help="Project name (default: loop).")
@click.option("--author", default=None, help="Who opens it (default: your login).")
@output_option("json")
@click.pass_context
def open_(
    ctx: click.Context, title: str, body: str, project: str | None, author: str | None, fmt: str
) -> None:
    """Open an item; prints its ref. The opening is its first event."""
    from ..tracker import DEFAULT_PROJECT

    ref = _tracker(ctx).open(title, body, project=project or DEFAULT_PROJECT, author=author)
    echo_json({"ref": str(ref)}) if fmt == "json" else click.echo(str(ref))


@item.command("comment", epilog="Example: the-loop item comment local:loop#1 'Check logout too'")
@click.argument("ref", shell_complete=complete_ref)
@click.argument("text")
@click.option("--author", default=None, help="Who writes it (default: your login).")
@output_option("json")
@click.pass_context
def comment(ctx: click.Context, ref: str, text: str, author: str | None, fmt: str) -> None:
    """Comment on an item; the poller hands it to the item's session."""
    seq = _tracker(ctx).comment(parse_ref(ref), text, author=author)
    if fmt == "json":
        echo_json({"ref": str(parse_ref(ref)), "comment": seq})
    else:
        click.echo(f"comment {seq} on {ref}")


@item.command("close", epilog="Example: the-loop item close local:loop#1")
@click.argument("ref", shell_complete=complete_ref)
@output_option("json")
@click.pass_context
def close(ctx: click.Context, ref: str, fmt: str) -> None:
    """Close an item; the poller then closes its session."""
    parsed = parse_ref(ref)
    changed = _tracker(ctx).close(parsed)
    if fmt == "json":
        echo_json({"ref": str(parsed), "closed": changed})
    else:
        click.echo(f"closed {parsed}" if changed else f"{parsed} was already closed")


@item.command("list", epilog="Example: the-loop item list --state open -o json")
@output_option("json", table_alias=True)
@click.option(
    "--state",
    type=click.Choice(["open", "closed"]),
    default=None,
    help="Only open or closed items.",
)
@click.pass_context
def list_(ctx: click.Context, fmt: str, state: str | None) -> None:
    """List the local tracker's items, oldest first."""
    rt = runtime(ctx)
    items = _tracker(ctx).list(state) if rt.has_state else []  # type: ignore[arg-type]
    if fmt == "json":
        echo_json(
            [
                {
                    "ref": str(i.ref),
                    "title": i.title,
                    "state": i.state,
                    "author": i.author,
                    "createdAt": i.created_at.isoformat(),
                    "comments": i.comments,
                }
                for i in items
            ]
        )
        return
    if not items:
        click.echo("no items; open one with: the-loop item open TITLE")
        return
    rows = [[str(i.ref), i.state, str(i.comments), i.author, i.title[:60]] for i in items]
    click.echo(table(rows, ["REF", "STATE", "COMMENTS", "AUTHOR", "TITLE"]))


@item.command("show", epilog="Example: the-loop item show local:loop#1")
@click.argument("ref", shell_complete=complete_ref)
@output_option("json")
@click.pass_context
def show(ctx: click.Context, ref: str, fmt: str) -> None:
    """Show an item with every comment, whole (a cut prompt points here)."""
    from ..errors import UsageError
    from ..terminal import printable

    parsed = parse_ref(ref)
    rt = runtime(ctx)
    if not rt.has_state:
        raise UsageError(f"no local item {parsed}; see `the-loop item list`")
    tracker = _tracker(ctx)
    found = tracker.get(parsed) if parsed.source == "local" else None
    activity = tracker.activity(parsed)  # refuses a non-local or unknown ref
    assert found is not None
    if fmt == "json":
        echo_json(
            {
                "ref": str(found.ref),
                "title": found.title,
                "state": found.state,
                "author": found.author,
                "createdAt": found.created_at.isoformat(),
                "activity": [
                    {
                        "seq": a.seq,
                        "kind": a.kind,
                        "author": a.author,
                        "body": a.body,
                        "createdAt": a.created_at.isoformat(),
                    }
                    for a in activity
                ],
            }
        )
        return
    lines = [
        f"{found.ref}  {found.state}  by {printable(found.author)}",
        f"title: {printable(found.title)}",
    ]
    for a in activity:
        lines.append(
            f"--- #{a.seq} {a.kind} by {printable(a.author)} at {a.created_at:%Y-%m-%d %H:%M:%S}"
        )
        if a.body:
            lines.append(printable(a.body, lines=True))
    click.echo("\n".join(lines))
