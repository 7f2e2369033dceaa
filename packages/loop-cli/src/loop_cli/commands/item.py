"""`the-loop item ...`: the built-in local tracker."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..lazy import SuggestingGroup
from ._common import (
    complete_ref,
    echo_json,
    loaded_config,
    output_option,
    parse_ref,
    runtime,
    table,
)

if TYPE_CHECKING:
    from ..tracker import LocalTracker


@click.group(cls=SuggestingGroup)
def item() -> None:
    """Work items of the built-in local tracker (refs look like local:PROJECT#N)."""


def _tracker(ctx: click.Context) -> LocalTracker:
    from ..tracker import LocalTracker

    return LocalTracker(runtime(ctx).store)


def _writable_tracker(ctx: click.Context) -> LocalTracker:
    """The tracker, for a command that adds activity: refused under `tracker: github`,
    where nothing polls local items (what is written would never reach an agent)."""
    from ..errors import UsageError

    loaded = loaded_config(ctx)
    trackers = loaded.config.active_trackers()
    if "local" not in trackers:
        where = loaded.path or loaded.origin
        raise UsageError(
            f"tracker is {'+'.join(trackers)} in {where}: local items are never polled; "
            "open or comment on the issue in its tracker (or set tracker: local)"
        )
    return _tracker(ctx)


def _body(text: str | None, body_file: str | None, *, what: str) -> str | None:
    """The text given inline, as `-` (standard input) or with --body-file (`-`: stdin)."""
    from ..errors import UsageError

    if text is not None and body_file is not None:
        raise UsageError(f"give the {what} once: as an argument or with --body-file, not both")
    source = body_file if body_file is not None else text
    if source is None:
        return None
    if body_file is None and source != "-":
        return source
    try:
        with click.open_file(source, encoding="utf-8") as fh:  # `-`: standard input
            return str(fh.read())
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--body-file {source}: cannot read it ({err})") from None


@item.command(
    "open", epilog="Example: the-loop item open 'Fix the login page' --body-file notes.txt"
)
@click.argument("title")
@click.option("--body", default=None, help="Longer description, sent with the title.")
@click.option(
    "--body-file",
    default=None,
    metavar="FILE",
    help="Read the description from FILE (`-`: standard input).",
)
@click.option("--project", default=None, help="Project name (default: loop).")
@click.option("--author", default=None, help="Who opens it (default: your login).")
@output_option("json")
@click.pass_context
def open_(
    ctx: click.Context,
    title: str,
    body: str | None,
    body_file: str | None,
    project: str | None,
    author: str | None,
    fmt: str,
) -> None:
    """Open an item; prints its ref. The opening is its first event.

    Refused under `tracker: github` (open the issue on GitHub).
    """
    from ..tracker import DEFAULT_PROJECT

    tracker = _writable_tracker(ctx)
    text = _body(body, body_file, what="description") or ""
    ref = tracker.open(title, text, project=project or DEFAULT_PROJECT, author=author)
    echo_json({"ref": str(ref)}) if fmt == "json" else click.echo(str(ref))


@item.command("comment", epilog="Example: the-loop item comment local:loop#1 - < review.txt")
@click.argument("ref", shell_complete=complete_ref)
@click.argument("text", required=False)
@click.option(
    "--body-file",
    default=None,
    metavar="FILE",
    help="Read the comment from FILE (`-`: standard input).",
)
@click.option("--author", default=None, help="Who writes it (default: your login).")
@output_option("json")
@click.pass_context
def comment(
    ctx: click.Context,
    ref: str,
    text: str | None,
    body_file: str | None,
    author: str | None,
    fmt: str,
) -> None:
    """Comment on an item; the poller hands it to the item's session.

    TEXT `-` reads the comment from standard input:
    `git diff | the-loop item comment local:loop#1 -`.
    """
    from ..errors import UsageError

    tracker = _writable_tracker(ctx)
    body = _body(text, body_file, what="comment")
    if body is None:
        raise UsageError("a comment needs some text: TEXT, `-` (standard input) or --body-file")
    parsed = parse_ref(ref)
    number = tracker.comment(parsed, body, author=author)
    if fmt == "json":
        echo_json({"ref": str(parsed), "comment": number})
    else:
        click.echo(f"comment {number} on {parsed}")


@item.command("reopen", epilog="Example: the-loop item reopen local:loop#1")
@click.argument("ref", shell_complete=complete_ref)
@click.option("--author", default=None, help="Who reopens it (default: your login).")
@output_option("json")
@click.pass_context
def reopen(ctx: click.Context, ref: str, author: str | None, fmt: str) -> None:
    """Reopen a closed item; the poller starts its agent again (a new opening)."""
    parsed = parse_ref(ref)
    changed = _writable_tracker(ctx).reopen(parsed, author=author)
    if fmt == "json":
        echo_json({"ref": str(parsed), "reopened": changed})
    else:
        click.echo(f"reopened {parsed}" if changed else f"{parsed} was already open")


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
                        "number": a.number,
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
        what = a.kind if a.number is None else f"comment #{a.number}"
        when = a.created_at.astimezone().isoformat(sep=" ", timespec="seconds")
        lines.append(f"--- {what} by {printable(a.author)} at {when}")
        if a.body:
            lines.append(printable(a.body, lines=True))
    click.echo("\n".join(lines))
