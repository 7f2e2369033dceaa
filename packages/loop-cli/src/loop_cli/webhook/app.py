"""The GitHub webhook receiver as a Starlette (ASGI) app.

Order of checks, cheapest and least trusting first: the declared size (413, before a
byte of body is read), the content type (415), the body read under a hard cap (413),
the signature over the raw bytes (401), then the headers and JSON (400). Only then is
the delivery id recorded (duplicate -> 200) and the event queued for the worker
(202). The handler never raises to the server: bad input is an answer, not a crash.

Accepted means durable: `accept(guid, kind, event)` commits the delivery GUID and the
event (the inbox, with --route) in one transaction before 202 is sent, so a receiver
killed at any instant has either answered nothing (GitHub may redeliver, the GUID is
not recorded) or committed the event (the drain delivers it). A store that cannot
commit answers 503: nothing was accepted.

The answer never waits past `answer_within` (5 s; GitHub gives up at 10 s and would
count a timeout, not retry at once): the accept's own store wait is bounded below it
(webhook/seen.py), and should anything else hold the accept, the receiver still answers
503 (`Retry-After`) at the deadline. An accept that commits after such a 503 makes
GitHub's redelivery a duplicate (200): the event is kept once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from loop_dispatch import Event
from loop_dispatch.errors import StoreBusy

from .payload import Ignored, PayloadError, Rules, to_event
from .seen import GroundChanged
from .verify import verify_signature

__all__ = [
    "ANSWER_WITHIN_SECONDS",
    "DEFAULT_MAX_BODY",
    "MAX_JSON_DEPTH",
    "RETRY_AFTER_SECONDS",
    "Accept",
    "JiraRoute",
    "OnReject",
    "create_app",
    "json_depth",
]

# accept(guid, github_event_name, event) -> "accepted" | "duplicate"; commits first.
Accept = Callable[[str, str, Event], str]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 1024 * 1024  # issue and comment payloads are far below this
_GUID_MAX = 200
MAX_JSON_DEPTH = 64  # GitHub's payloads nest under 10 deep
ANSWER_WITHIN_SECONDS = 5.0  # a commit not done by then is answered 503 (GitHub waits 10 s)
RETRY_AFTER_SECONDS = 10  # what a 503 asks a redelivery to wait
ACCEPT_THREADS = 8  # accepts that may wait on the store at once
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_NESTING = re.compile(rb"[\[\]{}]")

# on_reject(status, reason): every refused delivery, for the `webhook.rejected` event.
OnReject = Callable[[int, str], None]


def json_depth(body: bytes) -> int:
    """How deep the JSON text nests (brackets outside strings), without parsing it:
    a body nested 200,000 deep must be refused before the parser recurses."""
    depth = deepest = 0
    for match in _JSON_NESTING.finditer(_JSON_STRING.sub(b'""', body)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class _TooLarge(Exception):
    pass


@dataclass(frozen=True)
class JiraRoute:
    """The optional `/jira-webhook` route (docs/jira.md): Jira's webhook secret (None:
    unsigned, loopback only) and the re-fetch that turns (issue key, comment id) into
    the poller's event (jira/webhook.py `JiraRefetch`)."""

    secret: bytes | None
    refetch: Callable[[str, str], Any]


def _respond(status: int, outcome: str, stats: Counter[str], **extra: Any) -> JSONResponse:
    stats[outcome] += 1
    return JSONResponse({"status": outcome, **extra}, status_code=status)


async def _read_capped(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    secret: bytes | None,
    accept: Accept,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    authorized_actors: list[str],
    trigger_label: str,
    own_login: str | None = None,
    insecure: bool = False,
    repositories: list[str] | None = None,
    session_per_pr: bool = False,
    has_session: Callable[[Any], bool] | None = None,
    pr_links: Callable[[str, int], Any] | None = None,
    ci_budget: Any = None,
    lifespan: Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]] | None = None,
    on_reject: OnReject | None = None,
    answer_within: float = ANSWER_WITHIN_SECONDS,
    jira: JiraRoute | None = None,
) -> Starlette:
    """The receiver. `accept` runs in a worker thread, never on the event loop.

    `secret=None` is refused unless `insecure` (the command allows that on loopback
    only). `lifespan` runs beside the server (the command starts the drain there).
    """
    if not secret and not insecure:
        raise ValueError("a webhook secret is required (or insecure=True)")
    rules = Rules.build(
        trigger_label,
        authorized_actors,
        own_login,
        repositories,
        session_per_pr,
        has_session,
        pr_links=pr_links,
        ci_budget=ci_budget,
    )
    stats: Counter[str] = Counter()
    # Accepts run here, not in Starlette's pool: an accept still waiting at the deadline
    # is left to finish on its own while the request is answered.
    accepts = ThreadPoolExecutor(max_workers=ACCEPT_THREADS, thread_name_prefix="webhook-accept")

    def _answer(status: int, outcome: str, stats: Counter[str], **extra: Any) -> JSONResponse:
        if status >= 400 and on_reject is not None:
            try:
                on_reject(status, str(extra.get("reason", outcome)))
            except Exception as exc:  # recording a refusal must never change the answer
                log.warning("webhook: could not record a rejection: %s", type(exc).__name__)
        return _respond(status, outcome, stats, **extra)

    def _busy(reason: str) -> JSONResponse:
        answer = _answer(503, "busy", stats, reason=reason)
        answer.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return answer

    async def receive(request: Request) -> JSONResponse:
        try:
            return await _receive(request)
        except ClientDisconnect:
            return _answer(400, "rejected", stats, reason="client went away")
        except Exception as exc:  # never die on input; say what kind of failure it was
            log.error("webhook: unexpected %s", type(exc).__name__)
            return _answer(500, "error", stats, reason=type(exc).__name__)

    async def _receive(request: Request) -> JSONResponse:
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                return _answer(400, "rejected", stats, reason="Content-Length is not a number")
            if int(declared) > max_body:
                return _answer(413, "rejected", stats, reason=f"body over {max_body} bytes")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return _answer(415, "rejected", stats, reason="content type must be application/json")
        try:
            body = await _read_capped(request, max_body)
        except _TooLarge:
            return _answer(413, "rejected", stats, reason=f"body over {max_body} bytes")
        if secret:
            signature = request.headers.get("x-hub-signature-256")
            if not signature:
                return _answer(401, "rejected", stats, reason="X-Hub-Signature-256 missing")
            if not verify_signature(secret, body, signature):
                return _answer(401, "rejected", stats, reason="signature does not match")
        kind = request.headers.get("x-github-event", "").strip()
        guid = request.headers.get("x-github-delivery", "").strip()
        if not kind:
            return _answer(400, "rejected", stats, reason="X-GitHub-Event missing")
        if not guid or len(guid) > _GUID_MAX:
            return _answer(400, "rejected", stats, reason="X-GitHub-Delivery missing or too long")
        if json_depth(body) > MAX_JSON_DEPTH:
            return _answer(
                400, "rejected", stats, reason=f"JSON nested deeper than {MAX_JSON_DEPTH}"
            )
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return _answer(400, "rejected", stats, reason="body is not valid JSON")
        if kind == "ping":
            return _answer(200, "pong", stats)
        try:
            # The rules in force for this whole delivery (a config reload swaps them).
            result = to_event(kind, payload, _rules_for(app, payload))
        except PayloadError as exc:
            return _answer(400, "rejected", stats, reason=str(exc))
        if isinstance(result, Ignored):
            return _answer(202, "ignored", stats, reason=result.reason)
        loop = asyncio.get_running_loop()
        pending = loop.run_in_executor(accepts, accept, guid, kind, result)
        try:
            verdict = await asyncio.wait_for(pending, answer_within)
        except asyncio.TimeoutError:
            log.warning("webhook: %s not committed within %gs; answered 503", guid, answer_within)
            reason = f"the state store did not commit within {answer_within:g}s"
            return _busy(reason)
        except Exception as exc:  # nothing kept: GitHub (or the operator) redelivers
            log.warning("webhook: could not commit %s: %s", guid, type(exc).__name__)
            if isinstance(exc, GroundChanged):
                reason = "the state directory was deleted or replaced under the receiver"
            elif isinstance(exc, StoreBusy):
                reason = "the state store is busy (another process holds its write lock)"
            else:
                reason = "the state store could not commit"
            return _busy(reason)
        if verdict != "accepted":
            return _answer(200, "duplicate", stats, delivery=guid)
        return _answer(202, "accepted", stats, deliveryId=result.delivery_id)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", **stats})

    async def receive_jira(request: Request) -> JSONResponse:
        try:
            return await _receive_jira(request)
        except ClientDisconnect:
            return _answer(400, "rejected", stats, reason="client went away")
        except Exception as exc:  # never die on input; say what kind of failure it was
            log.error("jira-webhook: unexpected %s", type(exc).__name__)
            return _answer(500, "error", stats, reason=type(exc).__name__)

    async def _receive_jira(request: Request) -> JSONResponse:
        """Jira's delivery: signed body, then only the issue key and comment id are read;
        the rest is fetched again from Jira and committed before the answer."""
        from ..jira.webhook import HookError, hook_ids

        if jira is None:  # the route exists only with it
            return _answer(404, "rejected", stats, reason="no Jira route")
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > max_body):
            return _answer(413, "rejected", stats, reason=f"body over {max_body} bytes")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return _answer(415, "rejected", stats, reason="content type must be application/json")
        try:
            body = await _read_capped(request, max_body)
        except _TooLarge:
            return _answer(413, "rejected", stats, reason=f"body over {max_body} bytes")
        if jira.secret:
            signature = request.headers.get("x-hub-signature")
            if not signature:
                return _answer(401, "rejected", stats, reason="X-Hub-Signature missing")
            if not verify_signature(jira.secret, body, signature):
                return _answer(401, "rejected", stats, reason="signature does not match")
        if json_depth(body) > MAX_JSON_DEPTH:
            return _answer(
                400, "rejected", stats, reason=f"JSON nested deeper than {MAX_JSON_DEPTH}"
            )
        try:
            ids = hook_ids(json.loads(body))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            reason = str(exc) if isinstance(exc, HookError) else "body is not valid JSON"
            return _answer(400, "rejected", stats, reason=reason)
        if ids is None:
            return _answer(202, "ignored", stats, reason="not a comment_created event")
        key, comment_id = ids
        identifier = request.headers.get("x-atlassian-webhook-identifier", "").strip()
        guid = f"jira:{identifier[:_GUID_MAX]}" if identifier else f"jira:{key}:{comment_id}"

        def refetch_and_accept() -> tuple[str, str]:
            found = jira.refetch(key, comment_id)
            if found.event is None:
                return "ignored", found.reason
            return accept(guid, "jira:comment", found.event), found.event.delivery_id

        loop = asyncio.get_running_loop()
        pending = loop.run_in_executor(accepts, refetch_and_accept)
        try:
            verdict, detail = await asyncio.wait_for(pending, answer_within)
        except asyncio.TimeoutError:
            return _busy(f"Jira or the state store did not answer within {answer_within:g}s")
        except HookError as exc:  # the body's fault: a redelivery would not help
            return _answer(400, "rejected", stats, reason=str(exc))
        except Exception as exc:  # nothing kept: Jira redelivers
            log.warning("jira-webhook: %s: %s", guid, " ".join(str(exc).split())[:200])
            if isinstance(exc, (GroundChanged, StoreBusy)):
                return _busy("the state store could not commit")
            return _busy(f"the re-fetch from Jira failed ({type(exc).__name__})")
        if verdict == "ignored":
            return _answer(202, "ignored", stats, reason=detail)
        if verdict != "accepted":
            return _answer(200, "duplicate", stats, delivery=guid)
        return _answer(202, "accepted", stats, deliveryId=detail)

    app = Starlette(
        routes=[
            Route("/", receive, methods=["POST"]),
            Route("/webhook", receive, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
            *([Route("/jira-webhook", receive_jira, methods=["POST"])] if jira else []),
        ],
        lifespan=lifespan,
    )
    app.state.stats = stats
    app.state.accepts = accepts
    app.state.rules = rules
    app.state.project_rules = {}
    return app


ProjectRules = dict[str, tuple[str, list[str], bool]]  # repo -> label, actors, sessionPerPr


def _rules_for(app: Starlette, payload: Any) -> Rules:
    """The rules of the delivery's repository (`projects:` overrides), else the global
    ones. Both are read from one snapshot, taken once per delivery."""
    rules: Rules = app.state.rules
    overrides: dict[str, Rules] = app.state.project_rules
    repository = payload.get("repository") if isinstance(payload, dict) else None
    name = repository.get("full_name") if isinstance(repository, dict) else None
    if isinstance(name, str) and overrides:
        return overrides.get(name.lower(), rules)
    return rules


def set_rules(
    app: Starlette,
    *,
    trigger_label: str,
    authorized_actors: list[str],
    repositories: list[str] | None,
    session_per_pr: bool,
    projects: ProjectRules | None = None,
) -> None:
    """Swap the receiver's routing rules (start, or a config reload): new frozen
    objects, taken by each delivery after this; the login and session check stay.
    `projects`: repositories read under their own label, actors and sessionPerPr."""
    old: Rules = app.state.rules

    def build(label: str, actors: list[str], per_pr: bool) -> Rules:
        return Rules.build(label, actors, old.own_login, repositories, per_pr, old.has_session)

    overrides = {repo.lower(): build(*settings) for repo, settings in (projects or {}).items()}
    app.state.rules = build(trigger_label, authorized_actors, session_per_pr)
    app.state.project_rules = overrides
