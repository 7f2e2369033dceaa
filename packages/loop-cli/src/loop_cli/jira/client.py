"""A small Jira REST client: one site, one credential, Retry-After discipline.

Cloud speaks REST API v3 (`/rest/api/3`, basic auth with an account's e-mail and API
token, comment bodies in ADF); Data Center speaks v2 (`/rest/api/2`, a personal
access token as bearer, bodies as wiki-markup strings). The credential lives only in
the Authorization header of requests to the configured API root; no message this
module builds contains it.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

__all__ = [
    "AuthError",
    "JiraClient",
    "JiraError",
    "NotFound",
    "RateLimited",
    "retry_after_seconds",
]

USER_AGENT = "the-loop"
# Deeper than anything adf.to_text renders (MAX_DEPTH ADF levels, two JSON levels
# each, inside a page's envelope), well within what Python's JSON reader takes.
MAX_NESTING = 300
_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
Deployment = Literal["cloud", "data-center"]


class JiraError(Exception):
    """A request that did not produce an answer. `str(err)` is one line, secret-free."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AuthError(JiraError):
    """401 (bad credential) or 403 (no permission)."""


class NotFound(JiraError):
    """404: the project, issue or comment does not exist, or is not visible to us."""


class RateLimited(JiraError):
    """429: Jira asked us to wait; `until` is when (monotonic seconds)."""

    def __init__(self, message: str, until: float) -> None:
        super().__init__(message, 429)
        self.until = until


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: a number of seconds or an HTTP date; None if absent or
    unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    wall = time.time() if now is None else now
    return max(0.0, moment.timestamp() - wall)


class JiraClient:
    """GETs and POSTs against one Jira site's REST API.

    A 429 whose Retry-After is at most `max_wait` is slept through and the request sent
    again (once); a longer one raises RateLimited, and every call fails fast (no request
    sent) until the wait is over, so a cycle never hangs and Jira is not hammered.
    """

    def __init__(
        self,
        base_url: str,
        deployment: Deployment,
        token: str,
        email: str | None = None,
        *,
        client: httpx.Client | None = None,
        timeout: float = 30.0,
        max_wait: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.deployment = deployment
        self.api = "/rest/api/3" if deployment == "cloud" else "/rest/api/2"
        if deployment == "cloud":
            pair = f"{email or ''}:{token}".encode()
            auth = "Basic " + base64.b64encode(pair).decode()
        else:
            auth = f"Bearer {token}"
        self._headers = {
            "Authorization": auth,
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self._http = client or httpx.Client(timeout=timeout)
        self._own_http = client is None
        self.max_wait = max_wait
        self._sleep = sleep
        self._clock = clock
        self.blocked_until = 0.0
        self.requests = 0  # sent, for the idle-cycle cost check

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET `{api}/{path}`; the decoded JSON answer."""
        return self._send("GET", path, params=params)

    def post(self, path: str, body: Any) -> Any:
        """POST JSON to `{api}/{path}`; the decoded JSON answer."""
        return self._send("POST", path, body=body)

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        what = f"Jira {method} {self.api}/{path}"
        for attempt in (1, 2):
            wait = self.blocked_until - self._clock()
            if wait > 0:
                raise RateLimited(
                    f"{what}: rate limited by Jira; waiting {wait:.0f}s more (Retry-After)",
                    self.blocked_until,
                )
            response = self._request(method, path, params, body, what)
            if response.status_code == 429:
                delay = retry_after_seconds(response.headers.get("Retry-After"))
                delay = 60.0 if delay is None else delay
                self.blocked_until = self._clock() + delay
                if attempt == 1 and delay <= self.max_wait:
                    self._sleep(delay)
                    continue
                raise RateLimited(
                    f"{what}: 429 rate limited; Retry-After {delay:.0f}s honoured",
                    self.blocked_until,
                )
            return self._answer(response, what)
        raise JiraError(f"{what}: rate limited twice")  # pragma: no cover (loop returns)

    def _request(
        self, method: str, path: str, params: Mapping[str, str] | None, body: Any, what: str
    ) -> httpx.Response:
        url = f"{self.base_url}{self.api}/{path}"
        try:
            self.requests += 1
            if method == "GET":
                return self._http.get(url, params=dict(params or {}), headers=self._headers)
            return self._http.post(url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise JiraError(f"{what}: {type(exc).__name__} (Jira unreachable)") from None

    @staticmethod
    def _answer(response: httpx.Response, what: str) -> Any:
        status = response.status_code
        if status in (401, 403):
            why = "bad credentials" if status == 401 else "no permission"
            raise AuthError(f"{what}: {status} {why}", status)
        if status == 404:
            raise NotFound(f"{what}: 404 not found (or not visible to this account)", status)
        if status >= 400:
            raise JiraError(f"{what}: HTTP {status}{_messages(response)}", status)
        if status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise JiraError(f"{what}: the answer is not JSON", status) from None
        except RecursionError:  # a body anyone can write, nested past Python's reader
            try:
                return json.loads(pruned(response.content))
            except (ValueError, RecursionError):
                raise JiraError(f"{what}: the answer nests too deep", status) from None


def pruned(raw: bytes, limit: int = MAX_NESTING) -> bytes:
    """The JSON text with each value nested deeper than `limit` replaced by null: a
    comment nested 1,000 lists deep must not make a whole search page unreadable (the
    text down there is past what adf.to_text renders anyway). Unbalanced text is
    returned as it is, for the reader to refuse."""
    out: list[bytes] = []
    depth = 0
    pos = 0
    for m in _STRING_OR_BRACKET.finditer(raw):
        token = m.group()
        if token.startswith(b'"'):
            continue
        if token in (b"[", b"{"):
            depth += 1
            if depth == limit + 1:
                out.append(raw[pos : m.start()])
        else:
            if depth == limit + 1:
                out.append(b"null")
                pos = m.end()
            depth -= 1
    if depth != 0:
        return raw
    out.append(raw[pos:])
    return b"".join(out)


def _messages(response: httpx.Response) -> str:
    """Jira's own errorMessages, one line (they name fields and values, never secrets)."""
    try:
        data = response.json()
    except ValueError:
        return ""
    messages = data.get("errorMessages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not messages:
        return ""
    text = "; ".join(str(m) for m in messages[:3])
    return ": " + " ".join(text.split())[:200]
