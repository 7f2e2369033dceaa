"""The REST client against the fake GitHub on loopback (and a few modelled transports)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import FakeGitHub

from loop_cli.github.client import (
    GitHubClient,
    PermanentError,
    RateLimited,
    TransientError,
)

TOKEN = "ghp_SECRETtoken0123456789"


@pytest.fixture
def fake():
    with FakeGitHub(token=TOKEN) as server:
        yield server


def client(fake: FakeGitHub, **kw) -> GitHubClient:
    sleeps: list[float] = []
    kw.setdefault("sleep", sleeps.append)
    c = GitHubClient(TOKEN, fake.api_url, timeout=kw.pop("timeout", 5.0), **kw)
    c.sleeps = sleeps  # type: ignore[attr-defined]
    return c


def test_listing_follows_link_pagination_in_order(fake: FakeGitHub) -> None:
    fake.open_issue("o/r")
    ids = [fake.comment("o/r", 1, f"c{n}").id for n in range(250)]
    gh = client(fake)
    listing = gh.list_all("repos/o/r/issues/comments", {"per_page": "100"})
    assert [c["id"] for c in listing.items] == ids
    assert listing.pages == 3
    assert fake.count("/repos/o/r/issues/comments") == 3


def test_conditional_request_answered_304_costs_no_rate_limit(fake: FakeGitHub) -> None:
    fake.open_issue("o/r")
    fake.comment("o/r", 1, "hello")
    gh = client(fake)
    first = gh.list_all("repos/o/r/issues/comments")
    remaining = fake.rate_remaining
    again = gh.list_all("repos/o/r/issues/comments", etag=first.etag)
    assert again.not_modified
    assert again.items == []
    assert fake.rate_remaining == remaining
    fake.comment("o/r", 1, "news")
    changed = gh.list_all("repos/o/r/issues/comments", etag=first.etag)
    assert not changed.not_modified
    assert len(changed.items) == 2
    assert fake.statuses()[304] == 1


def test_5xx_is_retried_with_backoff_then_succeeds(fake: FakeGitHub) -> None:
    gh = client(fake, retries=2)
    fake.fail_next(502, count=2)
    assert gh.get_json("user")["login"] == fake.login
    assert gh.sleeps == [0.5, 1.0]  # type: ignore[attr-defined]
    assert fake.count("/user") == 3


def test_persistent_5xx_is_transient_and_bounded(fake: FakeGitHub) -> None:
    gh = client(fake, retries=1)
    fake.fail_next(503, count=5)
    with pytest.raises(TransientError, match="server error 503"):
        gh.get_json("user")
    assert fake.count("/user") == 2


def test_slow_response_times_out_as_transient(fake: FakeGitHub) -> None:
    gh = client(fake, retries=0, timeout=0.3)
    fake.delay_next(2.0)
    with pytest.raises(TransientError, match="timed out"):
        gh.get_json("user")


def test_short_retry_after_is_waited_then_retried(fake: FakeGitHub) -> None:
    gh = client(fake)
    fake.exhaust(retry_after=2)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        fake.rate_remaining = 100  # the limit is lifted while we wait

    gh._sleep = sleep
    assert gh.get_json("user")["login"] == fake.login
    assert len(sleeps) == 1
    assert 1.0 <= sleeps[0] <= 2.0


def test_secondary_limit_429_with_retry_after_is_honoured(fake: FakeGitHub) -> None:
    gh = client(fake, max_wait=10.0)
    fake.exhaust(retry_after=120, status=429)
    with pytest.raises(RateLimited) as err:
        gh.get_json("user")
    assert 110 <= err.value.until - time.time() <= 121
    assert fake.statuses()[429] == 1
    fake.rate_remaining = 100  # lifted on GitHub's side, but we were told to wait
    with pytest.raises(RateLimited):
        gh.get_json("user")
    assert fake.statuses()[429] == 1
    assert fake.count() == 1


def test_long_rate_limit_fails_fast_without_sending_more(fake: FakeGitHub) -> None:
    gh = client(fake, max_wait=10.0)
    fake.exhaust(reset_in=3600)
    with pytest.raises(RateLimited) as err:
        gh.get_json("user")
    sent = fake.count()
    with pytest.raises(RateLimited):
        gh.get_json("user")
    assert fake.count() == sent  # blocked locally until the reset
    assert err.value.until > 0


def test_bad_token_is_permanent_and_never_echoed(fake: FakeGitHub) -> None:
    gh = GitHubClient("ghp_WRONGtoken999", fake.api_url, sleep=lambda s: None)
    with pytest.raises(PermanentError) as err:
        gh.get_json("user")
    assert err.value.status == 401
    assert "ghp_" not in str(err.value)


def test_errors_never_contain_the_token() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach, header was {request.headers['authorization']}")

    transport = httpx.MockTransport(refuse)
    gh = GitHubClient(
        TOKEN,
        "https://api.example.test",
        client=httpx.Client(transport=transport),
        sleep=lambda s: None,
    )
    with pytest.raises(TransientError) as err:
        gh.get_json("user")
    assert TOKEN not in str(err.value)
    assert "ConnectError" in str(err.value)


def test_pagination_never_leaves_the_api_host() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        link = '<https://evil.example.test/steal?page=2>; rel="next"'
        return httpx.Response(200, json=[{"id": 1}], headers={"Link": link})

    gh = GitHubClient(
        TOKEN,
        "https://api.example.test",
        client=httpx.Client(transport=httpx.MockTransport(answer)),
    )
    with pytest.raises(PermanentError, match="left the API host"):
        gh.list_all("repos/o/r/issues/comments")
    assert all(url.startswith("https://api.example.test/") for url in seen)


def test_non_json_answer_is_transient(fake: FakeGitHub) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>"))
    gh = GitHubClient(TOKEN, "https://api.example.test", client=httpx.Client(transport=transport))
    with pytest.raises(TransientError, match="not JSON"):
        gh.get_json("user")
