"""`JiraSource`: the poller's view of one Jira site, one JQL query per cycle.

Each cycle asks ONE search: `project in (...) AND (labels = "L" OR key in (active))
AND updated >= "<cursor minus a margin>" ORDER BY updated ASC`, paging through the
answer. An issue whose `updated` is what the previous cycle saw is skipped, so an idle
cycle costs that one request (Jira's search has no ETags; the cursor is the
condition). Only an issue that changed has its comments listed, newest first, back
to the window's start.

JQL compares dates in the account's own time zone at minute precision, so the
window start is written in the zone `GET /myself` reports, a minute early, minus the
margin (the search index lags a little); repeats are dropped by delivery id.

A project Jira refuses (401/403/404) is named in the cycle's errors and falls behind
with its own window, asked separately until it answers again: the others go on, and
nothing of the lagging one is skipped. Everything rides in the cursor, which dispatch
stores in the same transaction as the events.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loop_dispatch import Event, EventKind, PollBatch, WorkItemRef

from .client import AuthError, JiraClient, JiraError, NotFound, RateLimited
from .parse import (
    ISSUE_FIELDS,
    MARKER,
    JiraComment,
    JiraIssue,
    ParseError,
    actor_of,
    carries_marker,
    closed_delivery_id,
    comment_delivery,
    opened_delivery_id,
    parse_comment,
    parse_issue,
    parse_time,
)

__all__ = ["CURSOR_VERSION", "JiraRules", "JiraSource", "comment_event"]

CURSOR_VERSION = 1
PAGE = 100
UTC = timezone.utc
ActiveItems = Callable[[], dict[WorkItemRef, datetime]]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class JiraRules:
    """Whose Jira text reaches an agent: never the-loop's own account or a comment
    carrying its marker; only `authorizedActors` entries `jira:<accountId>`."""

    trigger_label: str
    authorized: frozenset[str]
    own: str | None = None

    @classmethod
    def build(cls, label: str, actors: list[str], own: str | None = None) -> JiraRules:
        return cls(label, frozenset(a for a in actors if a.startswith("jira:")), own)

    def ignored(self, comment: JiraComment) -> str:
        """ "" when the comment counts, else why not."""
        if self.own and comment.author == self.own:
            return "written by the-loop's own account"
        if carries_marker(comment.body):
            return "carries the-loop's marker"
        if comment.author not in self.authorized:
            return "not an authorized actor"
        # Jira keeps the author when another account (Edit All Comments) rewrites the
        # text: the words are the editor's, so the editor must be authorized too.
        if comment.editor and comment.editor not in self.authorized:
            return "edited by an account that is not an authorized actor"
        return ""


def counted_event(
    site: str, issue: JiraIssue, comment: JiraComment, base_url: str, rules: JiraRules
) -> tuple[Event | None, str]:
    """The comment's event, or None and why it is ignored. A control word by an account
    that is not authorized is an event still, refused (`not_authorized`), so it is
    answered on the issue as on GitHub (issue 24); the-loop's own text never is."""
    from loop_dispatch.control import parse_control

    why = rules.ignored(comment)
    if not why:
        return comment_event(site, issue, comment, base_url), ""
    outsider = why.startswith(("not an authorized actor", "edited by an account"))
    if outsider and parse_control(comment.body) is not None:
        return comment_event(site, issue, comment, base_url, refused="not_authorized"), ""
    return None, why


def comment_event(
    site: str, issue: JiraIssue, comment: JiraComment, base_url: str, *, refused: str = ""
) -> Event:
    from loop_dispatch.control import parse_control

    # A control word (issue 24): run and answered on the issue, never pasted.
    control = parse_control(comment.body) is not None
    return Event(
        delivery_id=comment_delivery(site, comment.id),
        work_item=issue.ref,
        kind=EventKind.CONTROL if control else EventKind.COMMENT,
        refused=refused,
        actor=comment.author,
        body=comment.body,
        url=f"{base_url}/browse/{issue.key}?focusedCommentId={comment.id}",
        created_at=comment.created,
        comment_id=comment.id,
        spawns=not issue.done,
    )


@dataclass
class _State:
    since: str | None = None  # newest `updated` seen (UTC ISO), the next window's base
    polled_at: str | None = None
    seen: dict[str, str] = field(default_factory=dict)  # KEY-N -> updated as Jira spelt it
    watched: dict[str, str] = field(default_factory=dict)  # KEY-N -> comments count after
    behind: dict[str, str] = field(default_factory=dict)  # project -> its own window base
    account: str | None = None
    zone: str | None = None
    token: str | None = None
    blocked_until: str | None = None  # wall time Jira's Retry-After ends

    @classmethod
    def load(cls, text: str) -> _State:
        obj = json.loads(text)
        if not isinstance(obj, dict) or obj.get("v") != CURSOR_VERSION:
            raise ValueError("unknown cursor version")
        times = [obj.get("since"), obj.get("polledAt"), obj.get("blockedUntil")]
        times += list(dict(obj.get("watched") or {}).values())
        times += [v for v in dict(obj.get("behind") or {}).values() if v]
        for value in times:
            # A damaged cursor (ValueError): every time is a string with its zone, else
            # each later cycle would fail comparing it with Jira's and never move on.
            if value is not None and (
                not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is None
            ):
                raise ValueError("a cursor time is not an ISO time with a zone")
        return cls(
            since=obj.get("since"),
            polled_at=obj.get("polledAt"),
            seen={str(k): str(v) for k, v in dict(obj.get("seen") or {}).items()},
            watched={str(k): str(v) for k, v in dict(obj.get("watched") or {}).items()},
            behind={str(k): str(v) for k, v in dict(obj.get("behind") or {}).items()},
            account=obj.get("account"),
            zone=obj.get("zone"),
            token=obj.get("token"),
            blocked_until=obj.get("blockedUntil"),
        )

    def dump(self) -> str:
        return json.dumps(
            {
                "v": CURSOR_VERSION,
                "since": self.since,
                "polledAt": self.polled_at,
                "seen": self.seen,
                "watched": self.watched,
                "behind": self.behind,
                "account": self.account,
                "zone": self.zone,
                "token": self.token,
                "blockedUntil": self.blocked_until,
            },
            sort_keys=True,
        )


class JiraSource:
    """One Jira site as a dispatch `Source` (`name`, `poll(cursor)`)."""

    name = "jira"

    def __init__(
        self,
        client: JiraClient,
        site: str,
        projects: list[str],
        trigger_label: str,
        authorized_actors: list[str],
        *,
        token_fingerprint: str = "",
        active_items: ActiveItems | None = None,
        margin: float = 120.0,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.client = client
        self.site = site.lower()
        self.projects = [p.upper() for p in projects]
        self.trigger_label = trigger_label
        self.authorized_actors = list(authorized_actors)
        self._fp = token_fingerprint
        self._active = active_items or (lambda: {})
        self._margin = timedelta(seconds=margin)
        self._clock = clock

    # ------------------------------------------------------------------ Source
    def poll(self, cursor: str | None) -> PollBatch:
        try:
            state = _State.load(cursor) if cursor else None
        except (ValueError, TypeError, AttributeError) as exc:
            error = f"jira cursor unreadable ({type(exc).__name__}); baselining again"
            return self._guarded(None, cursor, [error])
        return self._guarded(state, cursor, [])

    def close(self) -> None:
        self.client.close()

    def account(self, state: _State) -> tuple[str, ZoneInfo]:
        """The-loop's own account and its time zone (`GET /myself`, once per token)."""
        if state.account is None or state.token != self._fp:
            me = self.client.get("myself")
            account = me.get("accountId") or me.get("key") if isinstance(me, dict) else None
            if not isinstance(account, str) or not account:
                raise ParseError("jira GET myself: Jira left out 'accountId'")
            state.account, state.token = f"jira:{account}", self._fp
            zone = me.get("timeZone")
            state.zone = zone if isinstance(zone, str) else "UTC"
        try:
            return state.account, ZoneInfo(state.zone or "UTC")
        except (ZoneInfoNotFoundError, ValueError):
            return state.account, ZoneInfo("UTC")

    def post_comment(self, ref: WorkItemRef, text: str) -> str:
        """An acknowledgement on the issue: a short comment starting with the-loop's
        marker (Jira has no reactions), so the poller never takes it for a prompt.
        Returns the new comment's id."""
        body_text = f"{MARKER} {text}"
        body: Any
        if self.client.deployment == "cloud":
            paragraph = {"type": "paragraph", "content": [{"type": "text", "text": body_text}]}
            body = {"type": "doc", "version": 1, "content": [paragraph]}
        else:
            body = body_text
        answer = self.client.post(f"issue/{ref.jira_key}/comment", {"body": body})
        comment_id = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(comment_id, str):
            raise ParseError(f"jira comment on {ref.jira_key}: Jira left out 'id'")
        return comment_id

    # ------------------------------------------------------------------ cycles
    def _guarded(self, state: _State | None, cursor: str | None, errors: list[str]) -> PollBatch:
        now = self._clock()
        if state is not None and state.blocked_until and state.blocked_until > _iso(now):
            errors.append(f"jira: rate limited; Retry-After honoured until {state.blocked_until}")
            return PollBatch([], cursor, errors=errors)
        fresh = state or _State()
        try:
            own, zone = self.account(fresh)
            if state is None:
                batch = self._first(fresh, own, zone, now)
            else:
                batch = self._cycle(fresh, own, zone, now)
        except RateLimited as exc:
            if state is not None:
                wait = max(0.0, exc.until - _monotonic())
                state.blocked_until = _iso(now + timedelta(seconds=wait))
                return PollBatch([], state.dump(), errors=[*errors, str(exc)])
            return PollBatch([], cursor, errors=[*errors, str(exc)])
        except (JiraError, ParseError) as exc:
            return PollBatch([], cursor, errors=[*errors, str(exc)])
        batch.errors[:0] = errors
        return batch

    def _first(self, state: _State, own: str, zone: ZoneInfo, now: datetime) -> PollBatch:
        """Learn what is labeled now; its opening and comments so far are history."""
        issues, errors, _ = self._search(state, None, zone, open_only=True)
        state.since = _iso(now)
        state.polled_at = _iso(now)
        baseline = []
        for issue in issues:
            # Jira's clock, not ours, dates its comments: whatever it wrote up to this
            # issue's last update is history, however the two clocks differ.
            state.watched[issue.key] = _iso(max(now, issue.updated))
            state.seen[issue.key] = issue.updated_raw
            baseline.append(opened_delivery_id(issue.ref, issue.updated))
        return PollBatch([], state.dump(), baseline=baseline, errors=errors)

    def _cycle(self, state: _State, own: str, zone: ZoneInfo, now: datetime) -> PollBatch:
        since = datetime.fromisoformat(state.since or _iso(now))
        window = since - self._margin
        issues, errors, first_look = self._search(state, window, zone)
        rules = JiraRules.build(self.trigger_label, self.authorized_actors, own)
        active = {ref.jira_key: at for ref, at in self._active().items() if _mine(ref, self)}
        events: list[Event] = []
        baseline: list[str] = []
        looked = datetime.fromisoformat(state.polled_at) if state.polled_at else window
        newest = since
        for issue in issues:
            newest = max(newest, issue.updated)
            if state.seen.get(issue.key) == issue.updated_raw:
                continue  # unchanged since the previous look
            if issue.key in first_look:  # a project refused since the first cycle
                state.watched[issue.key] = _iso(max(now, issue.updated))
                state.seen[issue.key] = issue.updated_raw
                baseline.append(opened_delivery_id(issue.ref, issue.updated))
                continue
            was = issue.key in state.watched
            started = active.get(issue.key)
            labeled = self.trigger_label in issue.labels or started is not None
            if issue.done and was:
                events.append(self._closed(issue, rules))
            if not issue.done and labeled and not was:
                # A session started by hand already began with its own prompt: no opening.
                if started is None:
                    events.append(self._opened(issue))
                state.watched[issue.key] = _iso(started if started else looked)
            if was or (labeled and not issue.done):
                after = datetime.fromisoformat(state.watched[issue.key])
                for comment in self._comments(issue, window):
                    if comment.created <= after:
                        baseline.append(comment_delivery(self.site, comment.id))
                    else:
                        event, _ = counted_event(self.site, issue, comment, self._base(), rules)
                        if event is not None:
                            events.append(event)
            if issue.done or not labeled:
                state.watched.pop(issue.key, None)
            state.seen[issue.key] = issue.updated_raw
        state.since = _iso(newest)
        state.polled_at = _iso(now)
        floor = newest - 2 * self._margin
        state.seen = {k: v for k, v in state.seen.items() if k in state.watched or _after(v, floor)}
        events.sort(key=lambda e: e.created_at)
        return PollBatch(events, state.dump(), baseline=baseline, errors=errors)

    # ------------------------------------------------------------------ reads
    def _search(
        self, state: _State, window: datetime | None, zone: ZoneInfo, *, open_only: bool = False
    ) -> tuple[list[JiraIssue], list[str], set[str]]:
        """The cycle's search (and a lagging project's own, while one lags). The set:
        issues of a project refused since the first cycle, seen for the first time now
        (what they hold is history, as on a first cycle)."""
        errors: list[str] = []
        lagging = [p for p in self.projects if p in state.behind]
        current = [p for p in self.projects if p not in state.behind]
        found: dict[str, JiraIssue] = {}
        first_look: set[str] = set()
        if current:
            try:
                for issue in self._query(current, window, zone, open_only):
                    found[issue.key] = issue
            except JiraError as exc:
                if not _refused(exc):
                    raise
                bad = self._refusing(current, exc)
                good = [p for p in current if p not in bad]
                errors.extend(bad.values())
                for project in bad:
                    state.behind[project] = _iso(window) if window else ""
                if good:
                    for issue in self._query(good, window, zone, open_only):
                        found[issue.key] = issue
        for project in lagging:
            base = state.behind[project]
            own_window = datetime.fromisoformat(base) if base else None
            try:
                issues = self._query([project], own_window, zone, open_only or own_window is None)
            except JiraError as exc:
                if not _refused(exc):
                    raise
                errors.append(f"jira project {project}: {_short(exc)}")
                continue
            del state.behind[project]
            for issue in issues:
                found.setdefault(issue.key, issue)
                if own_window is None:
                    first_look.add(issue.key)
        ordered = sorted(found.values(), key=lambda i: (i.updated, i.key))
        return ordered, errors, first_look

    def _refusing(self, projects: list[str], exc: JiraError) -> dict[str, str]:
        """Which projects Jira refuses, each named (one `GET project/KEY` each, asked
        only when the search itself was refused). A 401 is the credential: all."""
        if exc.status == 401:
            raise AuthError(f"{exc} (projects {', '.join(projects)})", 401)
        bad: dict[str, str] = {}
        for project in projects:
            try:
                self.client.get(f"project/{project}")
            except (AuthError, NotFound) as err:
                bad[project] = f"jira project {project}: {_short(err)}"
        if not bad:
            raise exc  # the search failed for another reason: the cycle fails whole
        return bad

    def _query(
        self, projects: list[str], window: datetime | None, zone: ZoneInfo, open_only: bool
    ) -> list[JiraIssue]:
        jql = self._jql(projects, window, zone, open_only)
        issues: list[JiraIssue] = []
        token: str | None = None
        start = 0
        while True:
            params = {"jql": jql, "fields": ISSUE_FIELDS, "maxResults": str(PAGE)}
            if self.client.deployment == "cloud":
                if token:
                    params["nextPageToken"] = token
                answer = self.client.get("search/jql", params)
            else:
                params["startAt"] = str(start)
                answer = self.client.get("search", params)
            page = _list(answer, "issues", "jira search")
            issues.extend(parse_issue(obj, self.site) for obj in page)
            if self.client.deployment == "cloud":
                token = answer.get("nextPageToken")
                if answer.get("isLast", True) or not isinstance(token, str) or not token:
                    return issues
            else:
                start += len(page)
                total = answer.get("total")
                if not page or not isinstance(total, int) or start >= total:
                    return issues

    def _jql(
        self, projects: list[str], window: datetime | None, zone: ZoneInfo, open_only: bool
    ) -> str:
        keys = ", ".join(projects)  # validated project keys: letters, digits, '_'
        label = self.trigger_label.replace("\\", "\\\\").replace('"', '\\"')
        active = sorted(r.jira_key for r in self._active() if _mine(r, self))
        mine = [k for k in active if k.rpartition("-")[0] in projects]
        watch = f'labels = "{label}"'
        if mine:
            watch = f"({watch} OR key in ({', '.join(mine)}))"
        jql = f"project in ({keys}) AND {watch}"
        if open_only:
            jql += " AND statusCategory != Done"
        if window is not None:
            # JQL dates are minutes in the account's zone: floor to the minute.
            local = window.astimezone(zone).replace(second=0, microsecond=0)
            jql += f' AND updated >= "{local.strftime("%Y/%m/%d %H:%M")}"'
        return jql + " ORDER BY updated ASC"

    def _comments(self, issue: JiraIssue, window: datetime) -> list[JiraComment]:
        """The issue's comments written since the window, newest first, paged."""
        out: list[JiraComment] = []
        start = 0
        while True:
            answer = self.client.get(
                f"issue/{issue.key}/comment",
                {"orderBy": "-created", "startAt": str(start), "maxResults": str(PAGE)},
            )
            page = _list(answer, "comments", f"jira comments of {issue.key}")
            for obj in page:
                comment = parse_comment(obj, issue.key)
                if comment.created < window:
                    return out
                out.append(comment)
            start += len(page)
            total = answer.get("total")
            if not page or not isinstance(total, int) or start >= total:
                return out

    # ------------------------------------------------------------------ events
    def _base(self) -> str:
        return self.client.base_url

    def _opened(self, issue: JiraIssue) -> Event:
        body = issue.summary if not issue.description else f"{issue.summary}\n\n{issue.description}"
        return Event(
            delivery_id=opened_delivery_id(issue.ref, issue.updated),
            work_item=issue.ref,
            kind=EventKind.OPENED,
            actor=issue.reporter,
            body=body,
            url=f"{self._base()}/browse/{issue.key}",
            created_at=issue.updated,
        )

    def _closed(self, issue: JiraIssue, rules: JiraRules) -> Event:
        """A watched issue moved to Done, with who moved it: the search does not say,
        the issue's changelog does (one request per closing of a watched item). A close
        by someone who is not an authorized actor, or unknown, keeps the workspace, so a
        reopen resumes where the agent was (as on GitHub)."""
        closer = self._closer(issue)
        return Event(
            delivery_id=closed_delivery_id(issue.ref, issue.updated),
            work_item=issue.ref,
            kind=EventKind.CLOSED,
            actor=closer,
            body="",
            url=f"{self._base()}/browse/{issue.key}",
            created_at=issue.updated,
            keep_workspace=closer not in rules.authorized,
        )

    def _closer(self, issue: JiraIssue) -> str:
        """Who last changed the issue's status (`expand=changelog`), "" when Jira does
        not say or does not answer (the closing is queued either way)."""
        try:
            answer = self.client.get(
                f"issue/{issue.key}", {"fields": "status", "expand": "changelog"}
            )
        except JiraError:
            return ""
        changelog = answer.get("changelog") if isinstance(answer, dict) else None
        histories = changelog.get("histories") if isinstance(changelog, dict) else None
        if not isinstance(histories, list):
            return ""
        moves = [
            h
            for h in histories
            if isinstance(h, dict)
            and isinstance(h.get("created"), str)
            and any(
                isinstance(i, dict) and i.get("field") == "status" for i in h.get("items") or []
            )
        ]
        if not moves:
            return ""
        try:
            last = max(moves, key=lambda h: parse_time(h["created"], "changelog created"))
        except ParseError:
            return ""
        return actor_of(last.get("author"))


def token_fingerprint(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _monotonic() -> float:
    import time

    return time.monotonic()


def _mine(ref: WorkItemRef, source: JiraSource) -> bool:
    return ref.source == "jira" and ref.jira_site == source.site


def _after(updated_raw: str, floor: datetime) -> bool:
    """Is this `updated` recent enough that a window may list the issue again?"""
    try:
        return parse_time(updated_raw, "seen") >= floor
    except ParseError:
        return False


def _list(answer: Any, key: str, what: str) -> list[Any]:
    items = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(items, list):
        raise ParseError(f"{what}: Jira left out {key!r}")
    return items


def _refused(exc: JiraError) -> bool:
    """Jira refusing a project: 401/403/404, or the 400 JQL answers for a project the
    account cannot see ("The value 'X' does not exist for the field 'project'")."""
    return not isinstance(exc, RateLimited) and exc.status in (400, 401, 403, 404)


def _short(exc: JiraError) -> str:
    return {401: "401 bad credentials", 403: "403 no permission", 404: "404 not found"}.get(
        exc.status or 0, str(exc)
    )
