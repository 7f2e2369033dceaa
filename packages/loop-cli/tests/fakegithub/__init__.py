"""A fake GitHub REST API served on 127.0.0.1 for tests and benchmarks.

It models what the poller relies on: issues with labels and state, comments, `since`
(inclusive, on updated_at), `sort`/`direction`, `per_page`/`page` pagination with Link
headers, weak ETags and 304s (which, as on GitHub, do not count against the rate limit),
`X-RateLimit-*` headers and a 403 with Retry-After when the budget is spent, listing
lag, injectable 5xx and slow responses, `GET /user`, and a request log; commit statuses
and check suites, and `POST /graphql` for PRs' `closingIssuesReferences` (the sidebar),
with GitHub's 200-with-`errors` failures (issue 27).
"""

from . import payloads
from .server import FakeComment, FakeGitHub, FakeIssue, FakePull
from .serving import served

__all__ = ["FakeComment", "FakeGitHub", "FakeIssue", "FakePull", "payloads", "served"]
