"""A small GitHub REST client: conditional GETs, Link pagination, rate-limit discipline.

Why not a general SDK: the poller needs exactly three things an SDK hides — the ETag
of every listing (so an idle cycle is a 304 that costs nothing against the rate limit),
the raw rate-limit headers, and a strict rule that the token never leaves the API host
(a `Link: next` URL pointing elsewhere is refused). The token lives only in the
Authorization header; no message this module builds contains it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from .ratelimit import backoff_delay, blocked_until, read_state

__all__ = [
    "GitHubClient",
    "GitHubError",
    "Listing",
    "PermanentError",
    "RateLimited",
    "TransientError",
]

USER_AGENT = "the-loop"
API_VERSION = "2022-11-28"


class GitHubError(Exception):
    """A request that did not produce an answer. `str(err)` is one line, token-free."""


class TransientError(GitHubError):
    """Network failure, timeout, 5xx: the same request may succeed later."""


class RateLimited(TransientError):
    """GitHub asked us to wait (or we are waiting for a reset we were told of)."""

    def __init__(self, message: str, until: float) -> None:
        super().__init__(message)
        self.until = until


class PermanentError(GitHubError):
    """4xx other than a rate limit: bad token, missing repository, no permission."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Listing:
    """Every page of one listing, or `not_modified` when GitHub answered 304.

    `etag` is the first page's ETag, usable for the next conditional request only when
    the listing fit on one page (`pages == 1`): a later page can change while page one
    does not, so a 304 on page one proves nothing about the rest.
    """

    not_modified: bool
    items: list[dict[str, Any]] = field(default_factory=list)
    etag: str | None = None
    pages: int = 0


class GitHubClient:
    """GETs against one API root with one token.

    `max_wait` bounds how long one call may sleep for a rate limit or a retry; a longer
    wait raises `RateLimited` instead, and further calls fail fast (no request sent)
    until the wait is over, so a daemon's cycle never hangs for an hour.
    """

    def __init__(
        self,
        token: str,
        api_url: str = "https://api.github.com",
        *,
        client: httpx.Client | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        max_wait: float = 10.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._api = api_url.rstrip("/")
        self._origin = _origin(self._api)
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": USER_AGENT,
        }
        self._http = client if client is not None else httpx.Client(timeout=timeout)
        self._owns_http = client is None
        self._retries = retries
        self._max_wait = max_wait
        self._clock = clock
        self._sleep = sleep
        self._blocked_until = 0.0
        self.requests_sent = 0
        self.not_modified = 0
        self.rate_limit = read_state({})

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def url(self, path: str) -> str:
        return f"{self._api}/{path.lstrip('/')}"

    def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """One unconditional GET; the decoded JSON body."""
        response = self._send(self.url(path), params, None)
        return _json(response, path)

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """One POST, never retried here (the caller decides: a reaction is worth a few
        tries at most). Raises TransientError, RateLimited or PermanentError."""
        self._wait_for_block(path)
        url = self.url(path)
        try:
            self.requests_sent += 1
            response = self._http.post(url, json=dict(body), headers=self._headers)
        except httpx.TimeoutException:
            raise TransientError(f"GitHub POST {path}: timed out") from None
        except httpx.HTTPError as exc:
            raise TransientError(f"GitHub POST {path}: {type(exc).__name__}") from None
        failure = self._judge(response, path, verb="POST")
        if failure is not None:
            raise failure
        return _json(response, path) if response.content else None

    def graphql(self, document: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        """One GraphQL query (POST `/graphql`), not retried here: the poller asks again
        next cycle. GitHub answers a failed query 200 with an `errors` array: that is a
        PermanentError (RateLimited for `RATE_LIMITED`) unless `data` came back too,
        when the fields that failed are null and the rest is usable."""
        path = "graphql"
        self._wait_for_block(path)
        url = graphql_url(self._api)
        try:
            self.requests_sent += 1
            response = self._http.post(
                url, json={"query": document, "variables": dict(variables)}, headers=self._headers
            )
        except httpx.TimeoutException:
            raise TransientError("GitHub POST /graphql: timed out") from None
        except httpx.HTTPError as exc:
            raise TransientError(f"GitHub POST /graphql: {type(exc).__name__}") from None
        failure = self._judge(response, "/graphql", verb="POST")
        if failure is not None:
            raise failure
        body = _json(response, "/graphql")
        if not isinstance(body, dict):
            raise PermanentError("GitHub POST /graphql: expected a JSON object", 200)
        errors = body.get("errors")
        data = body.get("data")
        if errors:
            kinds = sorted(
                {str(e.get("type") or "ERROR") for e in errors if isinstance(e, dict)}
            ) or ["ERROR"]
            if "RATE_LIMITED" in kinds:  # GraphQL's own budget: REST calls may go on
                until = self._clock() + 60.0
                raise RateLimited("GitHub POST /graphql: rate limited (RATE_LIMITED)", until)
            if not isinstance(data, dict):
                raise PermanentError(f"GitHub POST /graphql: {', '.join(kinds)}", 200)
        if not isinstance(data, dict):
            raise PermanentError("GitHub POST /graphql: no data in the answer", 200)
        return data

    def list_all(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        etag: str | None = None,
        max_pages: int = 100,
        items_key: str | None = None,
    ) -> Listing:
        """All pages of a listing, following `Link: rel="next"` on the same host.

        `items_key`: the listing is an object holding the list under that key (as
        `GET .../check-runs` answers `{"total_count": N, "check_runs": [...]}`)."""
        response = self._send(self.url(path), params, etag)
        if response.status_code == 304:
            return Listing(not_modified=True, etag=etag, pages=1)
        listing = Listing(not_modified=False, etag=response.headers.get("etag"))
        while True:
            listing.pages += 1
            body = _json(response, path)
            if items_key is not None and isinstance(body, dict):
                body = body.get(items_key)
            if not isinstance(body, list):
                raise PermanentError(f"GitHub GET {path}: expected a JSON list", 200)
            listing.items.extend(item for item in body if isinstance(item, dict))
            next_url = response.links.get("next", {}).get("url")
            if not next_url:
                return listing
            if _origin(next_url) != self._origin:
                raise PermanentError(f"GitHub GET {path}: pagination left the API host", 200)
            if listing.pages >= max_pages:
                raise TransientError(f"GitHub GET {path}: more than {max_pages} pages")
            response = self._send(next_url, None, None)

    def _send(self, url: str, params: Mapping[str, str] | None, etag: str | None) -> httpx.Response:
        """One GET with retries for transient failures and waits GitHub asked for."""
        path = urlsplit(url).path
        headers = dict(self._headers)
        if etag:
            headers["If-None-Match"] = etag
        attempt = 0
        while True:
            self._wait_for_block(path)
            attempt += 1
            try:
                self.requests_sent += 1
                response = self._http.get(url, params=params, headers=headers)
            except httpx.TimeoutException:
                failure: GitHubError = TransientError(f"GitHub GET {path}: timed out")
            except httpx.HTTPError as exc:
                failure = TransientError(f"GitHub GET {path}: {type(exc).__name__}")
            else:
                judged = self._judge(response, path)
                if judged is None:
                    return response
                if isinstance(judged, PermanentError):
                    raise judged
                failure = judged
            if attempt > self._retries:
                raise failure
            if isinstance(failure, RateLimited):
                continue  # _wait_for_block sleeps, or raises when the wait is too long
            self._sleep(backoff_delay(attempt))

    def _judge(self, response: httpx.Response, path: str, verb: str = "GET") -> GitHubError | None:
        """None for an answer we can use (2xx, 304); else the error it amounts to."""
        status = response.status_code
        headers = response.headers
        now = self._clock()
        if status != 304:  # a 304 does not count against the limit, nor report it reliably
            self.rate_limit = read_state(headers)
        until = blocked_until(status, headers, now)
        if until is not None:
            self._blocked_until = max(self._blocked_until, until)
        if status == 304:
            self.not_modified += 1
            return None
        if 200 <= status < 300:
            return None
        if until is not None and status in (403, 429):
            return RateLimited(
                f"GitHub {verb} {path}: rate limited ({status}) for {until - now:.0f}s",
                until,
            )
        if status >= 500:
            return TransientError(f"GitHub {verb} {path}: server error {status}")
        return PermanentError(f"GitHub {verb} {path}: HTTP {status}", status)

    def _wait_for_block(self, path: str) -> None:
        wait = self._blocked_until - self._clock()
        if wait <= 0:
            return
        if wait > self._max_wait:
            raise RateLimited(
                f"GitHub GET {path}: rate limited, waiting {wait:.0f}s for the reset",
                self._blocked_until,
            )
        self._sleep(wait)


def graphql_url(api: str) -> str:
    """GitHub's GraphQL endpoint next to a REST root: `https://api.github.com/graphql`;
    GitHub Enterprise Server's REST root `https://HOST/api/v3` has `/api/graphql`."""
    if api.endswith("/api/v3"):
        return api[: -len("/v3")] + "/graphql"
    return f"{api}/graphql"


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def _json(response: httpx.Response, path: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise TransientError(f"GitHub GET {path}: response is not JSON") from None
