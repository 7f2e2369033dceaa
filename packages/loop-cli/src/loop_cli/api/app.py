"""The read-only API as a Starlette (ASGI) app.

Only GET and HEAD exist: any other method is 405 on every path, so nothing here can
change state. Every answer carries a strict Content-Security-Policy (scripts and styles
from this origin only, no inline code, nothing remote), `nosniff`, no referrer and no
framing. With a `token` (the TCP listener) every path but `/login` needs it: as
`Authorization: Bearer TOKEN`, or as the cookie `/login?token=TOKEN` sets (a value
derived from the token, HttpOnly, SameSite=Strict), the way Jupyter hands a browser
its token. Nothing logs a request line, so the token in a login URL is never written.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from .client import CONFIG_HEADER, OK_HEADER, RENDERS, VERSION_HEADER, build, config_id
from .follow import LogFollower
from .metrics import CONTENT_TYPE, Metrics
from .views import Views

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "the_loop_api"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
READ_METHODS = ("GET", "HEAD")
DEFAULT_EVENTS = 100
MAX_EVENTS = 1000
MAX_INBOX = 1000
STREAM_POLL_SECONDS = 0.2
KEEPALIVE_SECONDS = 15.0
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
}


def cookie_value(token: str) -> str:
    """What the login cookie holds: derived from the token, so the cookie is not it."""
    return hmac.new(token.encode(), b"the-loop dashboard cookie", hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


class Guard:
    """Methods, security headers and (with a token) the bearer/cookie check."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token
        self.cookie = cookie_value(token) if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if scope["method"] not in READ_METHODS:
            answer = _error(405, "read-only API: only GET and HEAD", {"allow": "GET, HEAD"})
            await answer(scope, receive, with_headers)
            return
        if self.token is not None and scope["path"] != "/login" and not self._allowed(scope):
            answer = _error(401, "a bearer token is needed", {"www-authenticate": "Bearer"})
            await answer(scope, receive, with_headers)
            return
        await self.app(scope, receive, with_headers)

    def _allowed(self, scope: Scope) -> bool:
        request = Request(scope)
        auth = request.headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() == "bearer" and self.token and _same(given.strip(), self.token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie and self.cookie and _same(cookie, self.cookie))


class Rendered:
    """`status` as the CLI prints it, rendered once per snapshot and format: a watch
    loop's requests between two refreshes share one rendering."""

    def __init__(self) -> None:
        self._last: tuple[dict[str, Any], str, bytes] | None = None

    def of(self, status: dict[str, Any], render: str) -> bytes:
        last = self._last
        if last is not None and last[0] is status and last[1] == render:
            return last[2]
        from ..status_text import render_output

        body = render_output(status, render).encode("utf-8", "surrogateescape")
        self._last = (status, render, body)
        return body


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": reason}, status_code=status, headers=headers)


def _limit(request: Request, default: int, most: int) -> int:
    text = request.query_params.get("limit", "")
    if not text:
        return default
    if not text.isdigit():
        raise ValueError("limit must be a whole number")
    return min(int(text), most)


def create_app(
    views: Views, metrics: Metrics, stop: threading.Event, *, token: str | None = None
) -> ASGIApp:
    """The API; `stop` ends the live streams (the daemon is stopping)."""

    # Which config computed it: `status` uses the answer only for its own config.
    loaded_from = views.rt.loaded.path
    config_header = {
        CONFIG_HEADER: config_id(loaded_from),
        VERSION_HEADER: build(),  # another build's data may not fit a client's renderer
    }

    rendered = Rendered()

    async def status(request: Request) -> Response:
        render = request.query_params.get("render")
        if render is not None and render not in RENDERS:
            return _error(400, f"render must be one of {', '.join(RENDERS)}")
        fresh = views.snapshot.peek()  # the common case in a watch loop: no thread hop
        found = fresh if fresh is not None else await run_in_threadpool(views.status)
        if render is None:
            return JSONResponse(found, headers=config_header)
        headers = {**config_header, OK_HEADER: "1" if found.get("ok") else "0"}
        body = rendered.of(found, render)
        return Response(body, media_type="text/plain; charset=utf-8", headers=headers)

    async def sessions(_: Request) -> Response:
        return JSONResponse(await run_in_threadpool(views.sessions))

    async def inbox(request: Request) -> Response:
        try:
            limit = _limit(request, 200, MAX_INBOX)
        except ValueError as exc:
            return _error(400, str(exc))
        return JSONResponse(await run_in_threadpool(views.inbox, limit))

    async def attention(_: Request) -> Response:
        return JSONResponse(await run_in_threadpool(views.attention))

    async def events(request: Request) -> Response:
        try:
            limit = _limit(request, DEFAULT_EVENTS, MAX_EVENTS)
        except ValueError as exc:
            return _error(400, str(exc))
        return JSONResponse(await run_in_threadpool(views.events, limit))

    async def stream(_: Request) -> Response:
        follower = LogFollower(views.rt.config.event_log_path())
        return StreamingResponse(
            _sse(follower, stop),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    async def metrics_page(_: Request) -> Response:
        body = await run_in_threadpool(metrics.render)
        return Response(body, media_type=CONTENT_TYPE)

    async def login(request: Request) -> Response:
        given = request.query_params.get("token", "")
        if token is None:
            return RedirectResponse("/", status_code=303)
        if not given or not _same(given, token):
            return _error(401, "wrong or missing token")
        answer = RedirectResponse("/", status_code=303)
        answer.set_cookie(COOKIE, cookie_value(token), httponly=True, samesite="strict")
        return answer

    async def static(request: Request) -> Response:
        name, media = STATIC[request.url.path]
        body = resources.files("loop_cli.api").joinpath("static").joinpath(name).read_bytes()
        return Response(body, media_type=media)

    routes = [
        Route("/api/status", status, methods=list(READ_METHODS)),
        Route("/api/sessions", sessions, methods=list(READ_METHODS)),
        Route("/api/inbox", inbox, methods=list(READ_METHODS)),
        Route("/api/attention", attention, methods=list(READ_METHODS)),
        Route("/api/events", events, methods=list(READ_METHODS)),
        Route("/api/events/stream", stream, methods=list(READ_METHODS)),
        Route("/metrics", metrics_page, methods=list(READ_METHODS)),
        Route("/login", login, methods=list(READ_METHODS)),
        *(Route(path, static, methods=list(READ_METHODS)) for path in STATIC),
    ]
    return Guard(Starlette(routes=routes), token)


async def _sse(follower: LogFollower, stop: threading.Event) -> AsyncIterator[bytes]:
    """New event-log records as Server-Sent Events, until the client goes or the daemon
    stops; a comment line now and then keeps proxies from closing an idle stream."""
    quiet = 0.0
    try:
        yield b"retry: 2000\n: the-loop event stream\n\n"
        while not stop.is_set():
            records = follower.read()
            for record in records:
                data = json.dumps(record, separators=(",", ":"), default=str)
                yield f"event: record\ndata: {data}\n\n".encode()
            quiet = 0.0 if records else quiet + STREAM_POLL_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield b": keep-alive\n\n"
            await asyncio.sleep(STREAM_POLL_SECONDS)
    finally:
        follower.close()
