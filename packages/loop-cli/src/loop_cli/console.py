"""The operator's control verbs on the command line (issue 24, point 4):
`sessions pause|resume REF` run the same control word a ticket comment would (the same
decision rows, under the item's lock); `sessions stop|start` set and lift the hold
around their own work. `--comment` also posts the control word on the ticket, marked
as the-loop's own so no ingress reads it back and runs it a second time.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from loop_dispatch import Event, EventKind, WorkItemRef
from loop_dispatch.control import Hold

from .errors import OperationalError, UsageError

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["hold_for_stop", "post_control_word", "release_for_start", "run_control"]

MARKER = "<!-- the-loop -->"


_DONE = {
    "pause": "paused",
    "resume": "resumed",
    "stop": "stopped",
    "start": "started",
    "restart": "restarted",
}


def run_control(rt: Runtime, ref: WorkItemRef, verb: str, actor: str) -> dict[str, Any]:
    """Run `the-loop VERB` for `ref` as the operator; refused: exit 1 with the reason."""
    event = Event(
        delivery_id=f"control:operator:{uuid.uuid4()}",
        work_item=ref,
        kind=EventKind.CONTROL,
        actor=actor,
        body=f"the-loop {verb}",
        url=str(ref),
        created_at=datetime.now(timezone.utc),
    )
    outcome = rt.dispatcher.dispatch(event)
    if outcome.reason == "control_rejected":
        raise OperationalError(f"{ref}: {verb} {outcome.detail[0].lower()}{outcome.detail[1:]}")
    if outcome.kind.value == "failed":
        raise OperationalError(f"could not {verb} {ref}: {outcome.detail or outcome.reason}")
    return {"ref": str(ref), "outcome": _DONE.get(verb, verb), "detail": outcome.detail}


def hold_for_stop(rt: Runtime, ref: WorkItemRef, actor: str) -> None:
    """`sessions stop`: later events wait until start or resume (never respawned)."""
    rt.store.controls.set(ref, Hold.STOPPED, actor)


def release_for_start(rt: Runtime, ref: WorkItemRef) -> int:
    """`sessions start`: the hold is lifted; held events go back, in arrival order."""
    rt.store.controls.clear(ref)
    return rt.store.inbox.release_held(str(ref))


def post_control_word(rt: Runtime, ref: WorkItemRef, verb: str, actor: str) -> None:
    """`--comment`: the control word on the ticket, so the ticket stays the record."""
    text = f"the-loop {verb}\n\n(by {actor} from the command line)\n{MARKER}"
    if ref.source == "local":
        from .tracker import LocalTracker

        LocalTracker(rt.store).comment(ref, text, author=actor)
        return
    if ref.source != "github":
        raise UsageError(f"--comment: {ref.source} items take no comment from here")
    import os

    from .github.client import GitHubClient, GitHubError

    gh = rt.config.github
    token = os.environ.get(gh.token_env)
    if not token:
        raise OperationalError(
            f"--comment: the token variable github.tokenEnv is not set; {verb} was done, "
            "the comment not posted"
        )
    client = GitHubClient(token, gh.api_url)
    try:
        client.post_json(f"repos/{ref.project}/issues/{ref.number}/comments", {"body": text})
    except GitHubError as exc:
        raise OperationalError(
            f"--comment: {verb} was done; GitHub refused the comment: {exc}"
        ) from None
    finally:
        client.close()
