"""The Jira client's pure parts: Retry-After in both of HTTP's forms, and which
credential goes where (Cloud: basic e-mail + token; Data Center: bearer PAT)."""

from __future__ import annotations

import base64

import httpx
import pytest

from loop_cli.jira.client import JiraClient, JiraError, retry_after_seconds


def test_retry_after_as_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("30") == 30.0
    now = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    assert retry_after_seconds("Thu, 01 Jan 2026 00:00:45 GMT", now=now) == 45.0
    assert retry_after_seconds("Wed, 31 Dec 2025 23:00:00 GMT", now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def _seen(deployment: str, email: str | None) -> httpx.Request:
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"accountId": "x"})

    http = httpx.Client(transport=httpx.MockTransport(answer))
    client = JiraClient("https://jira.test/", deployment, "tok-SECRET", email, client=http)  # type: ignore[arg-type]
    client.get("myself")
    return requests[0]


def test_cloud_sends_basic_auth_to_v3_and_data_center_a_bearer_to_v2() -> None:
    cloud = _seen("cloud", "bot@example.test")
    assert cloud.url.path == "/rest/api/3/myself"
    pair = base64.b64encode(b"bot@example.test:tok-SECRET").decode()
    assert cloud.headers["Authorization"] == f"Basic {pair}"
    dc = _seen("data-center", None)
    assert dc.url.path == "/rest/api/2/myself"
    assert dc.headers["Authorization"] == "Bearer tok-SECRET"


def test_errors_are_one_line_with_jiras_message_and_never_the_credential() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"errorMessages": ["Internal\nserver error"]})

    http = httpx.Client(transport=httpx.MockTransport(answer))
    client = JiraClient("https://jira.test", "data-center", "tok-SECRET", client=http)
    with pytest.raises(JiraError) as info:
        client.get("issue/ABC-1")
    text = str(info.value)
    assert text == "Jira GET /rest/api/2/issue/ABC-1: HTTP 500: Internal server error"
    assert "tok-SECRET" not in text
