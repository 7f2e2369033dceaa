"""The fake Jira: a Starlette app on a real uvicorn loopback port, in a thread.

It models what the-loop relies on, as Jira Cloud's REST API v3 does it (or Data
Center's v2 with `deployment="data-center"`): basic auth with an account's e-mail and
API token (Cloud) or a bearer personal access token (Data Center), 401 for a bad
credential; `GET myself` with the account's time zone; JQL search with the shapes
the-loop sends (`project in`, `labels =`, `key in`, `statusCategory != Done`,
`updated >= "yyyy/MM/dd HH:mm"` read in the account's zone, `ORDER BY updated`),
paged with `nextPageToken`/`isLast` (Cloud's `search/jql`) or `startAt`/`total`
(Data Center's `search`); a JQL naming a project the account cannot see is a 400 with
Jira's message, and `GET project/KEY` a 404 (or 403); comments paged by `startAt`,
`orderBy=-created`, bodies in ADF (Cloud) or wiki text (Data Center); creating a
comment; 429 with Retry-After on demand. Every request is checked against Atlassian's
OpenAPI description (openapi_check.py) and logged.
"""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from fakegithub.serving import served
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .openapi_check import violations

UTC = timezone.utc


def jira_time(moment: datetime) -> str:
    """Jira's spelling: `2026-12-03T23:10:00.123+0000`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}+0000"
    )


class RawJSON(str):
    """A comment body given as JSON text, sent as it is: a document nested deeper than
    Python's JSON encoder goes (which Jira, in Java, serves without trouble)."""


def _with_raw(data: Any, comments: list[Comment]) -> Response:
    """`data` as JSON, each RawJSON body spliced in where its placeholder stands."""
    import json

    text = json.dumps(data)
    for c in comments:
        if isinstance(c.body, RawJSON):
            text = text.replace(json.dumps(f"\x00raw{c.id}"), str(c.body))
    return Response(text, media_type="application/json")


def adf(text: str) -> dict[str, Any]:
    paragraphs = [
        {"type": "paragraph", "content": [{"type": "text", "text": p}]} for p in text.split("\n\n")
    ]
    return {"type": "doc", "version": 1, "content": paragraphs}


@dataclass
class Account:
    account_id: str
    email: str
    token: str
    name: str
    zone: str = "UTC"


@dataclass
class Issue:
    key: str
    summary: str
    description: str
    labels: set[str]
    category: str  # "new" | "indeterminate" | "done"
    reporter: str
    created: datetime
    updated: datetime


@dataclass
class Comment:
    id: int
    key: str
    author: str
    body: Any  # ADF (cloud) or text (data center)
    created: datetime
    updated: datetime
    editor: str = ""  # who last edited it (Jira's updateAuthor); "" = the author


@dataclass
class FakeJira:
    deployment: str = "cloud"
    zone: str = "UTC"
    page_size: int = 2  # small, so paging is exercised
    accounts: list[Account] = field(default_factory=list)
    projects: dict[str, str] = field(default_factory=dict)  # KEY -> "ok" | "404" | "403"
    issues: dict[str, Issue] = field(default_factory=dict)
    comments: list[Comment] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    jql_seen: list[str] = field(default_factory=list)
    # Status changes: (key, who, from category, to category, when): the changelog.
    history: list[tuple[str, str, str, str, datetime]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _limited: list[str] = field(default_factory=list)  # Retry-After values to answer
    _next_comment: int = 10000
    base_url: str = ""

    def __post_init__(self) -> None:
        self.api = "/rest/api/3" if self.deployment == "cloud" else "/rest/api/2"
        self.bot = self.account("loop-bot", "bot@example.test", "bot-token-SECRET", "the-loop")

    # ------------------------------------------------------------------ state
    def account(self, account_id: str, email: str, token: str, name: str) -> Account:
        acct = Account(account_id, email, token, name, self.zone)
        self.accounts.append(acct)
        return acct

    def project(self, key: str, state: str = "ok") -> None:
        self.projects[key] = state

    def now(self) -> datetime:
        """Wall time to the millisecond (Jira's precision); each write a later one."""
        moment = datetime.now(UTC)
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
        last = getattr(self, "_last", None)
        if last is not None and moment <= last:
            moment = last + timedelta(milliseconds=1)
        self._last = moment
        return moment

    def open_issue(
        self,
        project: str,
        summary: str,
        description: str = "",
        labels: tuple[str, ...] = (),
        reporter: str = "712020:alice",
    ) -> str:
        with self._lock:
            n = 1 + sum(1 for k in self.issues if k.startswith(project + "-"))
            key = f"{project}-{n}"
            now = self.now()
            self.issues[key] = Issue(
                key, summary, description, set(labels), "new", reporter, now, now
            )
        return key

    def label(self, key: str, label: str) -> None:
        with self._lock:
            self.issues[key].labels.add(label)
            self.issues[key].updated = self.now()

    def set_status(self, key: str, category: str, by: str = "712020:alice") -> None:
        with self._lock:
            issue = self.issues[key]
            now = self.now()
            self.history.append((key, by, issue.category, category, now))
            issue.category = category
            issue.updated = now

    def comment(self, key: str, text: str, author: str = "712020:alice", body: Any = None) -> int:
        """A comment of `text` (as ADF on Cloud), or of the given `body` as it is."""
        with self._lock:
            self._next_comment += 1
            now = self.now()
            if body is None:
                body = adf(text) if self.deployment == "cloud" else text
            self.comments.append(Comment(self._next_comment, key, author, body, now, now))
            self.issues[key].updated = now
            return self._next_comment

    def edit_comment(self, comment_id: int, text: str, by: str) -> None:
        """Someone with Jira's *Edit All Comments* permission rewrites a comment: the
        author stays, `updateAuthor` names the editor."""
        with self._lock:
            (c,) = [c for c in self.comments if c.id == comment_id]
            c.body = adf(text) if self.deployment == "cloud" else text
            c.updated = self.now()
            c.editor = by
            self.issues[c.key].updated = c.updated

    def rate_limit_next(self, *retry_after: str) -> None:
        with self._lock:
            self._limited.extend(retry_after)

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()
            self.jql_seen.clear()

    def count(self, suffix: str) -> int:
        return sum(1 for _, path, _, _ in self.requests if path.endswith(suffix))

    # ------------------------------------------------------------------ views
    def _user(self, account_id: str) -> dict[str, Any]:
        if self.deployment == "cloud":
            return {"accountId": account_id, "displayName": account_id, "active": True}
        return {"key": account_id, "name": account_id, "displayName": account_id, "active": True}

    def _issue_json(self, issue: Issue) -> dict[str, Any]:
        names = {"new": "To Do", "indeterminate": "In Progress", "done": "Done"}
        description = issue.description or None
        if description and self.deployment == "cloud":
            description = adf(description)
        return {
            "id": str(10000 + list(self.issues).index(issue.key)),
            "key": issue.key,
            "self": f"{self.base_url}{self.api}/issue/{issue.key}",
            "fields": {
                "summary": issue.summary,
                "description": description,
                "labels": sorted(issue.labels),
                "status": {
                    "name": names[issue.category],
                    "statusCategory": {"key": issue.category, "name": names[issue.category]},
                },
                "created": jira_time(issue.created),
                "updated": jira_time(issue.updated),
                "reporter": self._user(issue.reporter),
            },
        }

    def _changelog(self, key: str) -> dict[str, Any]:
        names = {"new": "To Do", "indeterminate": "In Progress", "done": "Done"}
        histories = [
            {
                "id": str(n),
                "author": self._user(who),
                "created": jira_time(when),
                "items": [
                    {
                        "field": "status",
                        "fieldtype": "jira",
                        "fromString": names[old],
                        "toString": names[new],
                    }
                ],
            }
            for n, (k, who, old, new, when) in enumerate(self.history)
            if k == key
        ]
        return {
            "startAt": 0,
            "maxResults": len(histories),
            "total": len(histories),
            "histories": histories,
        }

    def _comment_json(self, c: Comment) -> dict[str, Any]:
        return {
            "id": str(c.id),
            "self": f"{self.base_url}{self.api}/issue/{c.key}/comment/{c.id}",
            "author": self._user(c.author),
            "updateAuthor": self._user(c.editor or c.author),
            "body": f"\x00raw{c.id}" if isinstance(c.body, RawJSON) else c.body,
            "created": jira_time(c.created),
            "updated": jira_time(c.updated),
        }

    # ------------------------------------------------------------------ HTTP
    def _auth(self, request: Request) -> Account | None:
        header = request.headers.get("authorization", "")
        for acct in self.accounts:
            if self.deployment == "cloud":
                pair = base64.b64encode(f"{acct.email}:{acct.token}".encode()).decode()
                if header == f"Basic {pair}":
                    return acct
            elif header == f"Bearer {acct.token}":
                return acct
        return None

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        query = dict(request.query_params)
        body = await request.body()
        with self._lock:
            self.problems.extend(violations(request.method, path, query, body))
            response = self._answer(request, path, query, body)
            self.requests.append((request.method, path, query, response.status_code))
        return response

    def _answer(self, request: Request, path: str, query: dict[str, str], body: bytes) -> Response:
        if self._limited:
            return JSONResponse(
                {"errorMessages": ["Rate limit exceeded."]},
                status_code=429,
                headers={"Retry-After": self._limited.pop(0)},
            )
        acct = self._auth(request)
        if acct is None:
            return JSONResponse(
                {"errorMessages": ["You are not authenticated."]},
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="protected-area"'},
            )
        if not path.startswith(self.api + "/"):
            return JSONResponse({"errorMessages": ["Not found"]}, status_code=404)
        rest = path[len(self.api) + 1 :]
        if rest == "myself" and request.method == "GET":
            user = self._user(acct.account_id) | {"emailAddress": acct.email, "timeZone": acct.zone}
            return JSONResponse(user)
        if rest == ("search/jql" if self.deployment == "cloud" else "search"):
            return self._search(acct, query)
        m = re.fullmatch(r"project/([^/]+)", rest)
        if m:
            state = self.projects.get(m.group(1), "404")
            if state == "ok":
                return JSONResponse({"key": m.group(1), "id": "1", "name": m.group(1)})
            if state == "403":
                return JSONResponse({"errorMessages": ["No permission."]}, status_code=403)
            return JSONResponse(
                {"errorMessages": [f"No project could be found with key '{m.group(1)}'."]},
                status_code=404,
            )
        m = re.fullmatch(r"issue/([A-Z][A-Z0-9_]*-[0-9]+)(/comment(?:/([0-9]+))?)?", rest)
        if m:
            return self._issue(request, acct, m.group(1), m.group(2), m.group(3), query, body)
        return JSONResponse({"errorMessages": ["Not found"]}, status_code=404)

    def _visible(self, key: str) -> bool:
        return self.projects.get(key.rpartition("-")[0]) == "ok"

    def _issue(
        self,
        request: Request,
        acct: Account,
        key: str,
        comment_part: str | None,
        comment_id: str | None,
        query: dict[str, str],
        body: bytes,
    ) -> Response:
        issue = self.issues.get(key)
        if issue is None or not self._visible(key):
            return JSONResponse(
                {
                    "errorMessages": [
                        "Issue does not exist or you do not have permission to see it."
                    ]
                },
                status_code=404,
            )
        if comment_part is None:
            data = self._issue_json(issue)
            if "changelog" in query.get("expand", ""):
                data["changelog"] = self._changelog(key)
            return JSONResponse(data)
        if comment_id is not None:
            for c in self.comments:
                if c.key == key and str(c.id) == comment_id:
                    return _with_raw(self._comment_json(c), [c])
            return JSONResponse({"errorMessages": ["Can not find a comment."]}, status_code=404)
        if request.method == "POST":
            import json

            data = json.loads(body)
            self._next_comment += 1
            now = self.now()
            c = Comment(self._next_comment, key, acct.account_id, data["body"], now, now)
            self.comments.append(c)
            issue.updated = now
            return JSONResponse(self._comment_json(c), status_code=201)
        mine = [c for c in self.comments if c.key == key]
        mine.sort(key=lambda c: c.created, reverse=query.get("orderBy") == "-created")
        start = int(query.get("startAt", "0"))
        size = min(int(query.get("maxResults", "50")), self.page_size)
        page = mine[start : start + size]
        return _with_raw(
            {
                "startAt": start,
                "maxResults": size,
                "total": len(mine),
                "comments": [self._comment_json(c) for c in page],
            },
            page,
        )

    def _search(self, acct: Account, query: dict[str, str]) -> Response:
        jql = query.get("jql", "")
        self.jql_seen.append(jql)
        try:
            match = self._jql(jql, ZoneInfo(acct.zone))
        except ValueError as exc:
            return JSONResponse({"errorMessages": [str(exc)]}, status_code=400)
        found = sorted(
            (i for i in self.issues.values() if match(i)), key=lambda i: (i.updated, i.key)
        )
        size = min(int(query.get("maxResults", "50")), self.page_size)
        if self.deployment == "cloud":
            start = int(query.get("nextPageToken", "0") or "0")
            page = found[start : start + size]
            last = start + size >= len(found)
            out: dict[str, Any] = {"issues": [self._issue_json(i) for i in page], "isLast": last}
            if not last:
                out["nextPageToken"] = str(start + size)
            return JSONResponse(out)
        start = int(query.get("startAt", "0"))
        page = found[start : start + size]
        return JSONResponse(
            {
                "startAt": start,
                "maxResults": size,
                "total": len(found),
                "issues": [self._issue_json(i) for i in page],
            }
        )

    def _jql(self, jql: str, zone: ZoneInfo) -> Any:
        """A predicate for the JQL shapes the-loop sends; anything else is a 400."""
        m = re.fullmatch(
            r"project in \(([A-Z0-9_, ]+)\) AND "
            r"(?:\(labels = \"([^\"]*)\" OR key in \(([A-Z0-9_, -]+)\)\)"
            r"|labels = \"([^\"]*)\")( AND statusCategory != Done)?"
            r"(?: AND updated >= \"(\d{4}/\d{2}/\d{2} \d{2}:\d{2})\")? ORDER BY updated ASC",
            jql,
        )
        if m is None:
            raise ValueError(f"Error in the JQL Query: unexpected {jql[:80]!r}")
        projects = [p.strip() for p in m.group(1).split(",")]
        for p in projects:
            if self.projects.get(p) != "ok":
                raise ValueError(f"The value '{p}' does not exist for the field 'project'.")
        label = m.group(2) if m.group(2) is not None else m.group(4)
        keys = {k.strip() for k in (m.group(3) or "").split(",") if k.strip()}
        open_only = bool(m.group(5))
        since = None
        if m.group(6):
            local = datetime.strptime(m.group(6), "%Y/%m/%d %H:%M").replace(tzinfo=zone)
            since = local.astimezone(UTC)

        def match(issue: Issue) -> bool:
            return (
                issue.key.rpartition("-")[0] in projects
                and (label in issue.labels or issue.key in keys)
                and not (open_only and issue.category == "done")
                and (since is None or issue.updated >= since)
            )

        return match

    # ------------------------------------------------------------------ serving
    def app(self) -> Starlette:
        return Starlette(
            routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])],
        )

    def __enter__(self) -> FakeJira:
        self._served = served(self.app())
        self.base_url = self._served.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.__exit__(*exc)
