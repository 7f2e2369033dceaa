"""The fake GitHub: a Starlette app on a real uvicorn loopback port, in a thread."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .serving import served

UTC = timezone.utc


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass
class FakeIssue:
    number: int
    title: str
    body: str
    user: str
    labels: set[str]
    state: str
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = None
    pull: FakePull | None = None  # set: this issue is a pull request
    state_reason: str | None = None  # "completed" when closed, "reopened" after a reopen
    closed_by: str | None = None


@dataclass
class FakePull:
    head_ref: str
    head_sha: str
    merged: bool = False
    fork: str | None = None  # OWNER/REPO of the fork its head is in; None: this repository
    # Issues linked in the Development sidebar: (OWNER/REPO, number).
    sidebar: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class FakeReview:
    id: int
    pr_number: int
    user: str
    body: str
    state: str
    submitted_at: datetime


@dataclass
class FakeReviewComment:
    id: int
    pr_number: int
    user: str
    body: str
    path: str
    line: int | None
    created_at: datetime
    updated_at: datetime


@dataclass
class FakeCheckRun:
    id: int
    head_sha: str
    head_branch: str
    name: str
    conclusion: str
    completed_at: datetime


@dataclass
class FakeStatus:
    id: int
    sha: str
    context: str
    state: str  # error | failure | pending | success
    created_at: datetime


@dataclass
class FakeCheckSuite:
    id: int
    head_sha: str
    head_branch: str
    app: str
    conclusion: str
    updated_at: datetime


@dataclass
class FakeComment:
    id: int
    issue_number: int
    user: str
    body: str
    created_at: datetime
    updated_at: datetime


@dataclass
class FakeRepo:
    owner: str
    name: str
    issues: dict[int, FakeIssue] = field(default_factory=dict)
    comments: list[FakeComment] = field(default_factory=list)
    reviews: list[FakeReview] = field(default_factory=list)
    review_comments: list[FakeReviewComment] = field(default_factory=list)
    check_runs: list[FakeCheckRun] = field(default_factory=list)
    statuses: list[FakeStatus] = field(default_factory=list)
    check_suites: list[FakeCheckSuite] = field(default_factory=list)
    # (subject kind "issues"|"pulls", comment id, content, user) in the order posted
    reactions: list[tuple[str, int, str, str]] = field(default_factory=list)
    # Issue events (GET /repos/o/r/issues/N/events): (number, event, label, created_at).
    issue_events: list[tuple[int, str, str | None, datetime]] = field(default_factory=list)


class FakeGitHub:
    """State plus a server. Use as a context manager; `api_url` is the root to point at.

    Time is the fake's own clock (`now`, advanced by `tick`), so `since` windows and
    lag are deterministic; every write bumps the clock by one second like real traffic.
    """

    def __init__(self, token: str = "test-token", login: str = "the-loop-bot") -> None:
        self.token = token
        self.login = login
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
        self.repos: dict[str, FakeRepo] = {}
        self.lag_seconds = 0
        self.rate_limit = 5000
        self.rate_remaining = 5000
        self.rate_reset = int(time.time()) + 3600
        self.retry_after: int | None = None
        self.limited_status = 403
        self.faults: list[tuple[str, float]] = []  # ("status", 502) | ("delay", seconds)
        self.requests: list[tuple[str, str, int]] = []  # (path, query, status)
        self.calls: list[tuple[str, str, str]] = []  # (method, path, query), every request
        self.graphql_documents: list[str] = []  # every GraphQL query received, as sent
        self.graphql_faults: list[list[dict[str, Any]]] = []  # next answers' `errors`
        self._lock = threading.Lock()
        self._next_id = 1000
        self._serving: Any = None
        self.port = 0

    # ------------------------------------------------------------------ model
    def tick(self, seconds: float = 1) -> datetime:
        with self._lock:
            self.now += timedelta(seconds=seconds)
            return self.now

    def repo(self, full_name: str) -> FakeRepo:
        with self._lock:
            if full_name not in self.repos:
                owner, name = full_name.split("/")
                self.repos[full_name] = FakeRepo(owner, name)
            return self.repos[full_name]

    def open_issue(
        self,
        full_name: str,
        title: str = "a ticket",
        body: str = "please do it",
        user: str = "alice",
        labels: tuple[str, ...] = (),
    ) -> FakeIssue:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            number = len(repo.issues) + 1
            issue = FakeIssue(number, title, body, user, set(labels), "open", at, at)
            repo.issues[number] = issue
            return issue

    def comment(self, full_name: str, number: int, body: str, user: str = "alice") -> FakeComment:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            self._next_id += 1
            item = FakeComment(self._next_id, number, user, body, at, at)
            repo.comments.append(item)
            repo.issues[number].updated_at = at
            return item

    def open_pull(
        self,
        full_name: str,
        title: str = "a change",
        body: str = "",
        head_ref: str = "feature",
        user: str = "alice",
        fork: str | None = None,
    ) -> FakeIssue:
        """A pull request: an issue (same number space, listed by the issues API) with
        a head branch and commit; `fork`: the head is in that fork, as anyone's can be."""
        issue = self.open_issue(full_name, title, body, user)
        with self._lock:
            sha = hashlib.sha1(f"{full_name}#{issue.number}".encode()).hexdigest()
            issue.pull = FakePull(head_ref, sha, fork=fork)
            return issue

    def close_pull(
        self, full_name: str, number: int, merged: bool = True, by: str = "alice"
    ) -> None:
        self.close(full_name, number, by=by)
        with self._lock:
            pull = self.repos[full_name].issues[number].pull
            assert pull is not None
            pull.merged = merged

    def review(
        self,
        full_name: str,
        number: int,
        body: str,
        state: str = "CHANGES_REQUESTED",
        user: str = "alice",
    ) -> FakeReview:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            self._next_id += 1
            item = FakeReview(self._next_id, number, user, body, state, at)
            repo.reviews.append(item)
            repo.issues[number].updated_at = at  # a review bumps the PR, as on GitHub
            return item

    def review_comment(
        self,
        full_name: str,
        number: int,
        body: str,
        path: str = "src/app.py",
        line: int | None = 40,
        user: str = "alice",
    ) -> FakeReviewComment:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            self._next_id += 1
            item = FakeReviewComment(self._next_id, number, user, body, path, line, at, at)
            repo.review_comments.append(item)
            repo.issues[number].updated_at = at
            return item

    def check_run(
        self, full_name: str, number: int, conclusion: str = "failure", name: str = "tests"
    ) -> FakeCheckRun:
        """A completed check run on the PR's head commit. Like GitHub, it does not
        touch the PR's `updated_at`."""
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            pull = repo.issues[number].pull
            assert pull is not None
            self._next_id += 1
            item = FakeCheckRun(self._next_id, pull.head_sha, pull.head_ref, name, conclusion, at)
            repo.check_runs.append(item)
            return item

    def status(
        self, full_name: str, number: int, state: str = "failure", context: str = "ci/lint"
    ) -> FakeStatus:
        """A commit status on the PR's head (`POST /repos/o/r/statuses/SHA`); like a
        check it does not touch the PR."""
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            pull = repo.issues[number].pull
            assert pull is not None
            self._next_id += 1
            item = FakeStatus(self._next_id, pull.head_sha, context, state, at)
            repo.statuses.append(item)
            return item

    def check_suite(
        self, full_name: str, number: int, conclusion: str = "failure", app: str = "Buildkite"
    ) -> FakeCheckSuite:
        """A completed check suite (an app's whole CI run) on the PR's head."""
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            pull = repo.issues[number].pull
            assert pull is not None
            self._next_id += 1
            item = FakeCheckSuite(self._next_id, pull.head_sha, pull.head_ref, app, conclusion, at)
            repo.check_suites.append(item)
            return item

    def push(self, full_name: str, number: int) -> str:
        """A new head commit on the PR (bumps it, as a push does)."""
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            issue = repo.issues[number]
            assert issue.pull is not None
            issue.pull.head_sha = hashlib.sha1(f"{issue.pull.head_sha}+".encode()).hexdigest()
            issue.updated_at = at
            return issue.pull.head_sha

    def link_sidebar(self, full_name: str, number: int, target: str, issue: int) -> None:
        """Link the PR to `target#issue` in the Development sidebar. GitHub records a
        `connected` event on the PR, which bumps its `updated_at`."""
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            pr = repo.issues[number]
            assert pr.pull is not None
            pr.pull.sidebar.append((target, issue))
            pr.updated_at = at

    def unlink_sidebar(self, full_name: str, number: int, target: str, issue: int) -> None:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            pr = repo.issues[number]
            assert pr.pull is not None
            pr.pull.sidebar.remove((target, issue))
            pr.updated_at = at

    def fail_graphql(self, errors: list[dict[str, Any]]) -> None:
        """The next GraphQL answer is 200 with this `errors` array and `data: null`."""
        with self._lock:
            self.graphql_faults.append(errors)

    def label(self, full_name: str, number: int, label: str) -> None:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            issue = repo.issues[number]
            issue.labels.add(label)
            issue.updated_at = at
            repo.issue_events.append((number, "labeled", label, at))

    def close(self, full_name: str, number: int, by: str = "alice") -> None:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            issue = repo.issues[number]
            issue.state = "closed"
            issue.closed_at = at
            issue.updated_at = at
            issue.state_reason = "completed"
            issue.closed_by = by
            repo.issue_events.append((number, "closed", None, at))

    def reopen(self, full_name: str, number: int) -> None:
        """Like GitHub: open again, `closed_at` cleared, `state_reason` "reopened"."""
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            issue = repo.issues[number]
            issue.state = "open"
            issue.closed_at = None
            issue.updated_at = at
            issue.state_reason = "reopened"
            repo.issue_events.append((number, "reopened", None, at))

    def unlabel(self, full_name: str, number: int, label: str) -> None:
        repo = self.repo(full_name)
        at = self.tick()
        with self._lock:
            issue = repo.issues[number]
            issue.labels.discard(label)
            issue.updated_at = at
            repo.issue_events.append((number, "unlabeled", label, at))

    def fail_next(self, status: int = 502, count: int = 1) -> None:
        with self._lock:
            self.faults.extend([("status", float(status))] * count)

    def delay_next(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self.faults.extend([("delay", seconds)] * count)

    def exhaust(
        self, retry_after: int | None = None, reset_in: int = 3600, status: int = 403
    ) -> None:
        """Spend the rate limit: the next counted request gets a 403 (or 429) like GitHub."""
        with self._lock:
            self.limited_status = status
            self.rate_remaining = 0
            self.rate_reset = int(time.time()) + reset_in
            self.retry_after = retry_after

    def count(self, path_prefix: str = "") -> int:
        with self._lock:
            return sum(1 for path, _, _ in self.requests if path.startswith(path_prefix))

    def statuses(self) -> Counter[int]:
        with self._lock:
            return Counter(status for _, _, status in self.requests)

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # ------------------------------------------------------------------ JSON
    def _issue_json(self, repo: FakeRepo, issue: FakeIssue) -> dict[str, Any]:
        base = f"https://github.com/{repo.owner}/{repo.name}"
        return {
            "id": 10_000_000 + issue.number,
            "number": issue.number,
            "title": issue.title,
            "body": issue.body,
            "user": {"login": issue.user},
            "labels": [{"name": name} for name in sorted(issue.labels)],
            "state": issue.state,
            "comments": sum(1 for c in repo.comments if c.issue_number == issue.number),
            "html_url": f"{base}/issues/{issue.number}",
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at) if issue.closed_at else None,
            "state_reason": issue.state_reason,
            **({"pull_request": {"url": "pulls"}} if issue.pull else {}),
        }

    def _single_issue_json(self, repo: FakeRepo, issue: FakeIssue) -> dict[str, Any]:
        """`GET /repos/o/r/issues/N`: as listed, plus `closed_by` (listings omit it)."""
        out = self._issue_json(repo, issue)
        out["closed_by"] = {"login": issue.closed_by} if issue.closed_by else None
        return out

    def _repo_ref(self, full_name: str) -> dict[str, Any]:
        """A repository as a PR's head/base and a check's PR entries name it."""
        ident = int(hashlib.sha1(full_name.lower().encode()).hexdigest()[:8], 16)
        return {
            "id": ident,
            "url": f"https://api.github.com/repos/{full_name}",
            "name": full_name.split("/")[1],
            "full_name": full_name,
        }

    def _pull_json(self, repo: FakeRepo, issue: FakeIssue) -> dict[str, Any]:
        assert issue.pull is not None
        out = self._issue_json(repo, issue)
        out.pop("pull_request", None)
        out["html_url"] = f"https://github.com/{repo.owner}/{repo.name}/pull/{issue.number}"
        here = f"{repo.owner}/{repo.name}"
        out["head"] = {
            "ref": issue.pull.head_ref,
            "sha": issue.pull.head_sha,
            "repo": self._repo_ref(issue.pull.fork or here),
        }
        out["base"] = {"ref": "main", "repo": self._repo_ref(here)}
        out["merged"] = issue.pull.merged
        out["merged_at"] = out["closed_at"] if issue.pull.merged else None
        return out

    def _review_json(self, repo: FakeRepo, item: FakeReview) -> dict[str, Any]:
        return {
            "id": item.id,
            "user": {"login": item.user},
            "body": item.body,
            "state": item.state,
            "html_url": f"https://github.com/{repo.owner}/{repo.name}/pull/{item.pr_number}"
            f"#pullrequestreview-{item.id}",
            "submitted_at": iso(item.submitted_at),
        }

    def _review_comment_json(self, repo: FakeRepo, item: FakeReviewComment) -> dict[str, Any]:
        api = f"http://127.0.0.1:{self.port}/repos/{repo.owner}/{repo.name}"
        return {
            "id": item.id,
            "user": {"login": item.user},
            "body": item.body,
            "path": item.path,
            "line": item.line,
            "original_line": item.line,
            "html_url": f"https://github.com/{repo.owner}/{repo.name}/pull/{item.pr_number}"
            f"#discussion_r{item.id}",
            "pull_request_url": f"{api}/pulls/{item.pr_number}",
            "created_at": iso(item.created_at),
            "updated_at": iso(item.updated_at),
        }

    def _check_run_json(self, repo: FakeRepo, item: FakeCheckRun) -> dict[str, Any]:
        return {
            "id": item.id,
            "name": item.name,
            "status": "completed",
            "conclusion": item.conclusion,
            "head_sha": item.head_sha,
            "html_url": f"https://github.com/{repo.owner}/{repo.name}/runs/{item.id}",
            "completed_at": iso(item.completed_at),
            "check_suite": {"id": item.id + 1, "head_branch": item.head_branch},
            "pull_requests": self._check_prs(repo, item),
        }

    def _check_prs(self, repo: FakeRepo, item: FakeCheckRun) -> list[dict[str, Any]]:
        """The PRs GitHub lists on a check: those of this repository whose head is the
        check's commit; a fork's PR is not listed (GitHub leaves the list empty)."""
        here = f"{repo.owner}/{repo.name}"
        return [
            {
                "number": issue.number,
                "head": {
                    "ref": issue.pull.head_ref,
                    "sha": issue.pull.head_sha,
                    "repo": self._repo_ref(here),
                },
                "base": {"ref": "main", "repo": self._repo_ref(here)},
            }
            for issue in repo.issues.values()
            if issue.pull is not None
            and issue.pull.head_sha == item.head_sha
            and issue.pull.fork is None
        ]

    def _status_json(self, repo: FakeRepo, item: FakeStatus) -> dict[str, Any]:
        return {
            "id": item.id,
            "context": item.context,
            "state": item.state,
            "description": f"{item.context} {item.state}",
            "target_url": f"https://ci.example/{repo.owner}/{repo.name}/{item.id}",
            "created_at": iso(item.created_at),
            "updated_at": iso(item.created_at),
        }

    def _check_suite_json(self, repo: FakeRepo, item: FakeCheckSuite) -> dict[str, Any]:
        run = FakeCheckRun(item.id, item.head_sha, item.head_branch, "", "", item.updated_at)
        return {
            "id": item.id,
            "head_branch": item.head_branch,
            "head_sha": item.head_sha,
            "status": "completed",
            "conclusion": item.conclusion,
            "app": {"name": item.app, "slug": item.app.lower()},
            "created_at": iso(item.updated_at),
            "updated_at": iso(item.updated_at),
            "pull_requests": self._check_prs(repo, run),
        }

    async def _graphql(self, request: Request) -> Response:
        """`POST /graphql` for what the poller asks: `repository(owner:, name:)` with
        aliased `pullRequest(number:)` fields selecting `closingIssuesReferences` (the
        body's closing keywords and the sidebar's links, as GitHub merges them). Like
        GitHub: a query that fails is 200 with an `errors` array; an unknown PR is a
        null field plus a NOT_FOUND error; an unparsable document is a 200 error too.
        Every document is kept (`graphql_documents`) for the schema test."""
        from graphql import FieldNode, GraphQLError, OperationDefinitionNode, parse

        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"message": "Problems parsing JSON"}, 400)
        document = body.get("query") if isinstance(body, dict) else None
        variables = body.get("variables") or {} if isinstance(body, dict) else {}
        if not isinstance(document, str):
            return JSONResponse({"message": "A query attribute must be specified"}, 400)
        with self._lock:
            self.graphql_documents.append(document)
            fault = self.graphql_faults.pop(0) if self.graphql_faults else None
            self.rate_remaining -= 1
        if fault is not None:
            return JSONResponse({"data": None, "errors": fault})
        try:
            tree = parse(document)
        except GraphQLError as exc:
            return JSONResponse({"errors": [{"message": exc.message}]})
        operation = next(d for d in tree.definitions if isinstance(d, OperationDefinitionNode))
        fragments = {d.name.value: d for d in tree.definitions if hasattr(d, "type_condition")}
        data: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        for top in operation.selection_set.selections:
            assert isinstance(top, FieldNode)
            assert top.name.value == "repository"
            args = {a.name.value: _value(a.value, variables) for a in top.arguments}
            full = f"{args['owner']}/{args['name']}"
            with self._lock:
                repo = next((r for n, r in self.repos.items() if n.lower() == full.lower()), None)
            key = top.alias.value if top.alias else "repository"
            if repo is None:
                data[key] = None
                errors.append(
                    _not_found([key], f"Could not resolve to a Repository with the name '{full}'.")
                )
                continue
            data[key] = self._graphql_pulls(repo, top, fragments, variables, errors, key)
        return JSONResponse({"data": data, **({"errors": errors} if errors else {})})

    def _graphql_pulls(
        self,
        repo: FakeRepo,
        top: Any,
        fragments: dict[str, Any],
        variables: dict[str, Any],
        errors: list[dict[str, Any]],
        key: str,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field_node in top.selection_set.selections:
            assert field_node.name.value == "pullRequest"
            alias = field_node.alias.value if field_node.alias else "pullRequest"
            args = {a.name.value: _value(a.value, variables) for a in field_node.arguments}
            number = int(args["number"])
            with self._lock:
                issue = repo.issues.get(number)
                if issue is None or issue.pull is None:
                    out[alias] = None
                    errors.append(
                        _not_found(
                            [key, alias],
                            f"Could not resolve to a PullRequest with the number of {number}.",
                        )
                    )
                    continue
                here = f"{repo.owner}/{repo.name}"
                refs = _body_refs(issue.body, here) + [
                    r for r in issue.pull.sidebar if r not in _body_refs(issue.body, here)
                ]
            out[alias] = {
                "number": number,
                "closingIssuesReferences": {
                    "nodes": [{"number": n, "repository": {"nameWithOwner": r}} for r, n in refs]
                },
            }
        return out

    def _comment_json(self, repo: FakeRepo, item: FakeComment) -> dict[str, Any]:
        api = f"http://127.0.0.1:{self.port}/repos/{repo.owner}/{repo.name}"
        return {
            "id": item.id,
            "user": {"login": item.user},
            "body": item.body,
            "created_at": iso(item.created_at),
            "updated_at": iso(item.updated_at),
            "html_url": f"https://github.com/{repo.owner}/{repo.name}/issues/"
            f"{item.issue_number}#issuecomment-{item.id}",
            "issue_url": f"{api}/issues/{item.issue_number}",
        }

    # ------------------------------------------------------------------ HTTP
    async def _endpoint(self, request: Request) -> Response:
        path = request.url.path
        query = request.url.query
        with self._lock:
            self.calls.append((request.method, path, query))
        fault = None
        with self._lock:
            if self.faults:
                fault = self.faults.pop(0)
        if fault is not None and fault[0] == "delay":
            import anyio

            await anyio.sleep(fault[1])
        if fault is not None and fault[0] == "status":
            return self._log(path, query, JSONResponse({"message": "boom"}, int(fault[1])))
        auth = request.headers.get("authorization", "")
        if auth not in (f"Bearer {self.token}", f"token {self.token}"):
            return self._log(path, query, JSONResponse({"message": "Bad credentials"}, 401))
        with self._lock:
            limited = self.rate_remaining <= 0
        if limited:
            headers = self._rate_headers()
            if self.retry_after is not None:
                headers["Retry-After"] = str(self.retry_after)
            body = {"message": "API rate limit exceeded"}
            status = self.limited_status
            return self._log(path, query, JSONResponse(body, status, headers=headers))
        if request.method == "POST" and path == "/graphql":
            return self._log(path, query, await self._graphql(request))
        if request.method == "POST":
            return self._log(path, query, await self._post(request))
        try:
            payload, link = self._route(request)
        except LookupError:
            return self._log(path, query, JSONResponse({"message": "Not Found"}, 404))
        except ValueError as exc:
            return self._log(path, query, JSONResponse({"message": str(exc)}, 422))
        raw = json.dumps(payload, separators=(",", ":")).encode()
        etag = 'W/"' + hashlib.sha256(raw).hexdigest()[:32] + '"'
        if etag in _etags(request.headers.get("if-none-match", "")):
            # Like GitHub: a 304 is free (no decrement) and carries the ETag.
            return self._log(path, query, Response(status_code=304, headers={"ETag": etag}))
        with self._lock:
            self.rate_remaining -= 1
        headers = self._rate_headers()
        headers["ETag"] = etag
        if link:
            headers["Link"] = link
        return self._log(
            path, query, Response(raw, 200, headers=headers, media_type="application/json")
        )

    def _rate_headers(self) -> dict[str, str]:
        with self._lock:
            return {
                "X-RateLimit-Limit": str(self.rate_limit),
                "X-RateLimit-Remaining": str(max(0, self.rate_remaining)),
                "X-RateLimit-Reset": str(self.rate_reset),
                "X-RateLimit-Used": str(self.rate_limit - max(0, self.rate_remaining)),
            }

    def _log(self, path: str, query: str, response: Response) -> Response:
        with self._lock:
            self.requests.append((path, query, response.status_code))
        return response

    def _route(self, request: Request) -> tuple[Any, str | None]:
        parts = [p for p in request.url.path.split("/") if p]
        params = request.query_params
        if parts == ["user"]:
            return {"login": self.login, "id": 1}, None
        if len(parts) >= 4 and parts[0] == "repos" and parts[3] in ("pulls", "commits"):
            return self._route_pulls(request, parts)
        if len(parts) < 4 or parts[0] != "repos" or parts[3] != "issues":
            raise LookupError(request.url.path)
        full = f"{parts[1]}/{parts[2]}".lower()  # GitHub routes ignore case
        with self._lock:
            repo = next((r for n, r in self.repos.items() if n.lower() == full), None)
            if repo is None:
                raise LookupError(full)
            visible_before = self.now - timedelta(seconds=self.lag_seconds)
            if parts[4:] == []:
                rows = self._list_issues(repo, params)
            elif parts[4:] == ["comments"]:
                rows = self._list_comments(repo, params, None, visible_before)
            elif len(parts) == 5 and parts[4].isdigit():
                number = int(parts[4])
                if number not in repo.issues:
                    raise LookupError(number)
                return self._single_issue_json(repo, repo.issues[number]), None
            elif len(parts) == 6 and parts[5] == "events":
                number = int(parts[4])
                if number not in repo.issues:
                    raise LookupError(number)
                rows = [
                    {
                        "id": k + 1,
                        "event": kind,
                        "created_at": iso(at),
                        "actor": {"login": "someone"},
                        # like GitHub: only (un)labeled events carry the label
                        **({"label": {"name": label}} if label is not None else {}),
                    }
                    for k, (n, kind, label, at) in enumerate(repo.issue_events)
                    if n == number
                ]
            elif len(parts) == 6 and parts[5] == "comments":
                number = int(parts[4])
                if number not in repo.issues:
                    raise LookupError(number)
                rows = self._list_comments(repo, params, number, visible_before)
            else:
                raise LookupError(request.url.path)
        return self._paginate(request, rows)

    async def _post(self, request: Request) -> Response:
        """Reactions on issue and review comments, and comments on issues (as the
        token's login). 404 for what does not exist, 422 for a bad body, like GitHub."""
        parts = [p for p in request.url.path.split("/") if p]
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"message": "Problems parsing JSON"}, 400)
        if len(parts) < 4 or parts[0] != "repos" or not isinstance(body, dict):
            return JSONResponse({"message": "Not Found"}, 404)
        full = f"{parts[1]}/{parts[2]}"
        with self._lock:
            repo = self.repos.get(full)
            if repo is None:
                return JSONResponse({"message": "Not Found"}, 404)
            rest = parts[3:]
            if len(rest) == 4 and rest[1] == "comments" and rest[3] == "reactions":
                content = body.get("content")
                if content not in {
                    "+1",
                    "-1",
                    "laugh",
                    "confused",
                    "heart",
                    "hooray",
                    "rocket",
                    "eyes",
                }:
                    return JSONResponse({"message": "Validation Failed"}, 422)
                cid = int(rest[2]) if rest[2].isdigit() else -1
                pool = repo.comments if rest[0] == "issues" else repo.review_comments
                if not any(c.id == cid for c in pool):
                    return JSONResponse({"message": "Not Found"}, 404)
                repo.reactions.append((rest[0], cid, content, self.login))
                self.rate_remaining -= 1
                return JSONResponse({"id": len(repo.reactions), "content": content}, 201)
            if len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
                number = int(rest[1]) if rest[1].isdigit() else -1
                if number not in repo.issues or not isinstance(body.get("body"), str):
                    return JSONResponse({"message": "Not Found"}, 404)
                self._next_id += 1
                self.now += timedelta(seconds=1)
                made = FakeComment(
                    self._next_id, number, self.login, body["body"], self.now, self.now
                )
                repo.comments.append(made)
                repo.issues[number].updated_at = self.now
                self.rate_remaining -= 1
                return JSONResponse(self._comment_json(repo, made), 201)
        return JSONResponse({"message": "Not Found"}, 404)

    def _route_pulls(self, request: Request, parts: list[str]) -> tuple[Any, str | None]:
        """`pulls/N`, `pulls/N/reviews`, `pulls/comments`, `commits/SHA/check-runs`."""
        params = request.query_params
        full = f"{parts[1]}/{parts[2]}"
        with self._lock:
            repo = self.repos.get(full)
            if repo is None:
                raise LookupError(full)
            rest = parts[3:]
            if rest[0] == "commits" and len(rest) == 3 and rest[2] == "status":
                latest: dict[str, FakeStatus] = {}
                for st in repo.statuses:
                    if st.sha == rest[1]:
                        latest[st.context] = st  # newest per context, as GitHub combines
                rows = [self._status_json(repo, st) for st in latest.values()]
                rows.sort(key=lambda row: -int(row["id"]))
                return {
                    "state": _combined(row["state"] for row in rows),
                    "sha": rest[1],
                    "total_count": len(rows),
                    "statuses": rows,
                }, None
            if rest[0] == "commits" and len(rest) == 3 and rest[2] == "check-suites":
                suites = [x for x in repo.check_suites if x.head_sha == rest[1]]
                found = [self._check_suite_json(repo, x) for x in suites]
                return {"total_count": len(found), "check_suites": found}, None
            if rest[0] == "commits" and len(rest) == 3 and rest[2] == "check-runs":
                runs = [r for r in repo.check_runs if r.head_sha == rest[1]]
                rows = [self._check_run_json(repo, r) for r in runs]
                return {"total_count": len(rows), "check_runs": rows}, None
            if rest == ["pulls", "comments"]:
                since = parse_iso(params["since"]) if "since" in params else None
                found = [c for c in repo.review_comments if since is None or c.updated_at >= since]
                found.sort(key=lambda c: (c.updated_at, c.id))
                rows = [self._review_comment_json(repo, c) for c in found]
            elif len(rest) >= 2 and rest[0] == "pulls" and rest[1].isdigit():
                issue = repo.issues.get(int(rest[1]))
                if issue is None or issue.pull is None:
                    raise LookupError(rest[1])
                if len(rest) == 2:
                    return self._pull_json(repo, issue), None
                if rest[2:] != ["reviews"]:
                    raise LookupError(request.url.path)
                rows = [
                    self._review_json(repo, r) for r in repo.reviews if r.pr_number == issue.number
                ]
            else:
                raise LookupError(request.url.path)
        return self._paginate(request, rows)

    def _list_issues(self, repo: FakeRepo, params: Any) -> list[dict[str, Any]]:
        state = params.get("state", "open")
        wanted = {x for x in params.get("labels", "").split(",") if x}
        since = parse_iso(params["since"]) if "since" in params else None
        issues = [
            i
            for i in repo.issues.values()
            if (state == "all" or i.state == state)
            and wanted <= i.labels
            and (since is None or i.updated_at >= since)
        ]
        key = "updated_at" if params.get("sort") == "updated" else "created_at"
        issues.sort(key=lambda i: (getattr(i, key), i.number))
        if params.get("direction", "desc") == "desc":
            issues.reverse()
        return [self._issue_json(repo, i) for i in issues]

    def _list_comments(
        self, repo: FakeRepo, params: Any, number: int | None, visible_before: datetime
    ) -> list[dict[str, Any]]:
        since = parse_iso(params["since"]) if "since" in params else None
        rows = [
            c
            for c in repo.comments
            if (number is None or c.issue_number == number)
            and (since is None or c.updated_at >= since)
            and (self.lag_seconds == 0 or c.created_at <= visible_before)
        ]
        key = "updated_at" if params.get("sort") == "updated" else "created_at"
        rows.sort(key=lambda c: (getattr(c, key), c.id))
        if params.get("direction", "asc") == "desc":
            rows.reverse()
        return [self._comment_json(repo, c) for c in rows]

    def _paginate(self, request: Request, rows: list[dict[str, Any]]) -> tuple[Any, str | None]:
        params = dict(request.query_params)
        per_page = min(100, max(1, int(params.get("per_page", "30"))))
        page = max(1, int(params.get("page", "1")))
        start = (page - 1) * per_page
        chunk = rows[start : start + per_page]
        last = max(1, -(-len(rows) // per_page))
        links = []
        base = f"http://127.0.0.1:{self.port}{request.url.path}"
        if page < last:
            links.append(f'<{base}?{urlencode({**params, "page": page + 1})}>; rel="next"')
            links.append(f'<{base}?{urlencode({**params, "page": last})}>; rel="last"')
        return chunk, ", ".join(links) or None

    def app(self) -> Starlette:
        return Starlette(
            routes=[Route("/{path:path}", self._endpoint, methods=["GET", "POST"])],
        )

    # ------------------------------------------------------------------ server
    def __enter__(self) -> FakeGitHub:
        self._serving = served(self.app(), lifespan="off")
        url = self._serving.__enter__()
        self.port = int(url.rsplit(":", 1)[1])
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(None, None, None)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _combined(states: Any) -> str:
    """The combined state GitHub reports: failure if any failed or errored, pending if
    any is pending (or none exist), else success."""
    seen = set(states)
    if seen & {"failure", "error"}:
        return "failure"
    if not seen or "pending" in seen:
        return "pending"
    return "success"


def _value(node: Any, variables: dict[str, Any]) -> Any:
    """A GraphQL argument: a variable's value or a literal."""
    if node.kind == "variable":
        return variables[node.name.value]
    return node.value


def _not_found(path: list[str], message: str) -> dict[str, Any]:
    return {"type": "NOT_FOUND", "path": path, "locations": [], "message": message}


_BODY_REF = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s+(?:([\w.-]+/[\w.-]+))?#(\d+)", re.IGNORECASE
)


def _body_refs(body: str, here: str) -> list[tuple[str, int]]:
    """The closing references GitHub reads in a PR body (its own simple reading here)."""
    out: list[tuple[str, int]] = []
    for m in _BODY_REF.finditer(body or ""):
        ref = (m.group(1) or here, int(m.group(2)))
        if ref not in out:
            out.append(ref)
    return out


def _etags(header: str) -> set[str]:
    return {part.strip() for part in header.split(",") if part.strip()}
