"""`GitHubSource`: the poller's view of GitHub, one cheap cycle at a time.

Per repository and cycle the source sends ONE conditional request when nothing
happened: the repository's issues updated since a moving window (`state=all`,
`sort=updated`). Creating a comment, labeling and closing all bump an issue's
`updated_at`, so an unchanged answer (304, free against the rate limit) proves there is
nothing new. Only when it changed (and for a settle window after, because GitHub's
listings lag) does the source list the repository's comments since its cursor with the
repository-wide endpoint.

Everything the next cycle needs (windows, ETags, the labeled and watched sets) rides
in the cursor, which dispatch stores only after recording this batch: a crash between
the two replays the same window instead of skipping it. Windows overlap by `overlap`
seconds because `since` is inclusive and listings lag; the ledger drops repeats by
delivery id.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

from loop_dispatch import Event, PollBatch, WorkItemRef

from .cibudget import CiBudget
from .client import GitHubClient, GitHubError, Listing
from .links import PrLinks
from .parse import (
    CommentInfo,
    IssueInfo,
    ParseError,
    opened_delivery_id,
    parse_comment,
    parse_issue,
    parse_time,
)
from .pulls import PullTracker
from .rules import (
    Rules,
    closed_event,
    comment_delivery,
    comment_event,
    opened_event,
)

__all__ = ["CURSOR_VERSION", "GitHubSource", "RepoCursor"]

log = logging.getLogger(__name__)

CURSOR_VERSION = 1
PER_PAGE = "100"
UTC = timezone.utc


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _parse_time(text: str | None) -> datetime | None:
    """A cursor's own timestamp; None (unknown: baseline as before) if absent or damaged."""
    if text is None:
        return None
    try:
        return parse_time(text, "cursor polled_at")
    except ParseError:
        return None


@dataclass
class RepoCursor:
    """One repository's position. Serialised into the source's cursor string."""

    issues_since: str
    comments_since: str
    issues_etag: str | None = None  # valid for exactly `issues_since`
    comments_etag: str | None = None  # valid for exactly `comments_since`
    settle_until: str | None = None  # list comments until then even on a 304
    labeled: list[int] = field(default_factory=list)  # open items carrying the label
    watched: list[int] = field(default_factory=list)  # labeled or with an active session
    pulls: dict[str, Any] = field(default_factory=dict)  # open linked PRs (github/pulls.py)
    pulls_floor: str | None = None  # PR activity before the first cycle is history
    # When the previous cycle looked: an item labeled since then carries the label from
    # some moment after it, so its comments written after it are delivered, not baselined.
    polled_at: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> RepoCursor:
        if not isinstance(obj, dict):
            raise ValueError("repository cursor is not an object")
        return cls(
            issues_since=str(obj["issues_since"]),
            comments_since=str(obj["comments_since"]),
            issues_etag=obj.get("issues_etag"),
            comments_etag=obj.get("comments_etag"),
            settle_until=obj.get("settle_until"),
            labeled=[int(n) for n in obj.get("labeled", [])],
            watched=[int(n) for n in obj.get("watched", [])],
            pulls=dict(obj.get("pulls") or {}),
            pulls_floor=obj.get("pulls_floor"),
            polled_at=obj.get("polled_at"),
        )


@dataclass
class _RepoResult:
    cursor: RepoCursor
    events: list[Event] = field(default_factory=list)
    baseline: list[str] = field(default_factory=list)


ActiveItems = Callable[[], dict[WorkItemRef, datetime]]


class GitHubSource:
    """The GitHub tracker as a dispatch `Source` (`name`, `poll(cursor)`).

    `store` is dispatch's Store: its registry says which items have an active session
    (started by `the-loop sessions start REF`), which makes them watched. `clock` gives
    the current UTC time (the fake GitHub in tests has its own).
    """

    name = "github"

    def __init__(
        self,
        repositories: list[str],
        token: str,
        api_url: str,
        trigger_label: str,
        authorized_actors: list[str],
        store: Any,
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], datetime] = _utcnow,
        overlap: float = 60.0,
        settle: float = 120.0,
        max_window: float = 600.0,
        github: GitHubClient | None = None,
        active_items: ActiveItems | None = None,
        session_per_pr: bool = False,
        ci_retries: int | None = None,
        event_log: Any = None,
        configured: list[str] | None = None,
    ) -> None:
        self.repositories = list(repositories)
        # Every repository the-loop watches (closing references route to any of them):
        # this source's own by default; `projects:` splits them over several sources.
        self._configured = frozenset(r.lower() for r in (configured or repositories))
        self.trigger_label = trigger_label
        self.authorized = {actor.lower() for actor in authorized_actors}
        self._authorized_actors = list(authorized_actors)
        self.store = store
        self.github = github or GitHubClient(token, api_url, client=client)
        self._clock = clock
        self._overlap = timedelta(seconds=overlap)
        self._settle = timedelta(seconds=settle)
        self._max_window = timedelta(seconds=max_window)
        self._active_items = active_items or (lambda: registry_active_items(store))
        self._own_login: str | None = None
        self.session_per_pr = session_per_pr
        self._ci_retries = ci_retries
        self._event_log = event_log
        self._links: PrLinks | None = None
        self._budget: CiBudget | None = None
        self._token_fp = hashlib.sha256(token.encode()).hexdigest()[:12]

    # ------------------------------------------------------------------ Source
    def poll(self, cursor: str | None) -> PollBatch:
        """One cycle over every repository; a failed repository keeps its old cursor."""
        state, errors = self._load(cursor)
        batch = PollBatch(events=[], cursor=cursor, baseline=[], errors=errors)
        try:
            own = self.own_login()
        except GitHubError as exc:
            batch.errors.append(str(exc))
            return batch
        try:
            active = self._active_items()
        except Exception as exc:  # a busy or damaged store must not kill the cycle
            batch.errors.append(f"session registry unreadable: {type(exc).__name__}")
            return batch
        for repository in self.repositories:
            previous = state.get(repository)
            mine = {ref.number: at for ref, at in active.items() if _in_repo(ref, repository)}
            try:
                if previous is None:
                    result = self._first_cycle(repository, own, mine)
                else:
                    result = self._cycle(repository, previous, own, mine)
            except (GitHubError, ParseError, ValueError) as exc:  # ValueError: a bad ref
                batch.errors.append(f"{repository}: {exc}")
                continue
            state[repository] = result.cursor
            batch.events.extend(result.events)
            batch.baseline.extend(result.baseline)
        batch.events.sort(key=lambda e: e.created_at)
        batch.cursor = self._dump(state)
        return batch

    def close(self) -> None:
        """Release the HTTP connections (a source built per cycle must be closed)."""
        self.github.close()

    def own_login(self) -> str:
        """The token's login (`GET /user`, once per source)."""
        if self._own_login is None:
            user = self.github.get_json("user")
            login = user.get("login") if isinstance(user, dict) else None
            if not isinstance(login, str):
                raise GitHubError("GitHub GET /user: no login in the answer")
            self._own_login = login.lower()
        return self._own_login

    # ------------------------------------------------------------------ cursor
    def _load(self, cursor: str | None) -> tuple[dict[str, RepoCursor], list[str]]:
        if not cursor:
            return {}, []
        try:
            obj = json.loads(cursor)
            if obj.get("v") != CURSOR_VERSION:
                raise ValueError("unknown cursor version")
            repos = {name: RepoCursor.from_json(value) for name, value in obj["repos"].items()}
            login = obj.get("login")
            if (
                self._own_login is None
                and isinstance(login, str)
                and obj.get("token") == self._token_fp
            ):
                self._own_login = login
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # A damaged cursor: start over (the ledger drops what was seen) and say so.
            return {}, [f"github cursor unreadable ({exc.__class__.__name__}); baselining again"]
        return repos, []

    def _dump(self, state: dict[str, RepoCursor]) -> str:
        repos = {name: vars(value) for name, value in sorted(state.items())}
        data: dict[str, Any] = {"v": CURSOR_VERSION, "repos": repos}
        if self._own_login is not None:
            # The login of the token with this fingerprint: a cron `poll --once` need not
            # ask `GET /user` every run; a rotated token asks again.
            data["login"] = self._own_login
            data["token"] = self._token_fp
        return json.dumps(data, sort_keys=True)

    # ------------------------------------------------------------------ cycles
    def _first_cycle(self, repository: str, own: str, active: dict[int, datetime]) -> _RepoResult:
        """Learn the labeled set; baseline everything already there (nothing is forwarded)."""
        now = self._clock()
        since = _iso(now - self._overlap)
        listing = self.github.list_all(
            f"repos/{repository}/issues",
            {"labels": self.trigger_label, "state": "open", "per_page": PER_PAGE},
        )
        labeled = sorted(parse_issue(obj, "issue").number for obj in listing.items)
        watched = sorted(set(labeled) | set(active))
        cursor = RepoCursor(
            issues_since=since,
            comments_since=since,
            settle_until=_iso(now + self._settle),
            labeled=labeled,
            watched=watched,
            pulls_floor=_iso(now),
        )
        result = _RepoResult(cursor, baseline=[opened_delivery_id(repository, n) for n in labeled])
        # Prime the activity probe (its window, ETag and newest update); closings in the
        # window are history, not events.
        self._issues(repository, cursor, RepoCursor(**vars(cursor)), _RepoResult(cursor))
        cursor.labeled = labeled
        cursor.polled_at = _iso(now)
        comments = self._comments(repository, cursor, now)
        result.baseline.extend(
            comment_delivery(repository, c.id) for c in comments if c.issue_number in watched
        )
        return result

    def _cycle(
        self, repository: str, old: RepoCursor, own: str, active: dict[int, datetime]
    ) -> _RepoResult:
        now = self._clock()
        cursor = RepoCursor(**vars(old))
        cursor.labeled = list(old.labeled)
        result = _RepoResult(cursor)
        seen = self._issues(repository, cursor, old, result)
        pulls = PullTracker(
            self.github,
            repository,
            old.pulls,
            authorized=frozenset(self.authorized),
            own=own,
            session_per_pr=self.session_per_pr,
            parse_since=_parse_iso,
            floor=old.pulls_floor,
            links=self._pr_links(),
            configured=self._configured,
            budget=self._ci_budget(),
            on_refused=self._refused,
        )
        comments_since = cursor.comments_since
        if seen:
            window = _iso(_parse_iso(old.issues_since) - self._overlap)
            window = max(window, old.pulls_floor or window)
            result.events.extend(pulls.changed(list(seen.values()), window, _iso(now)))
        # Any answer other than a 304 is news: an ETag is kept for every window we can
        # trust it for, and a comment changes its issue (updated_at, comment count).
        changed = seen is not None
        labeled = set(cursor.labeled)
        before = set(old.watched)
        listed = seen or {}
        # A close seen now ends the item's session (its close is queued): it is no longer
        # watched, so a reopen and relabel later is a new opening (issue 20). A reopened
        # item labeled again opens even while its session is still active (the close
        # may wait for the agent's idle moment): the opening queues behind the close.
        closed_now = {n for n, issue in listed.items() if issue.state == "closed"}
        reopened = {
            n
            for n, issue in listed.items()
            if issue.state == "open" and issue.state_reason == "reopened"
        }
        watched = (labeled | set(active)) - closed_now
        new_by_label = (labeled - before) - (set(active) - reopened)
        new_by_session = {
            n: at for n, at in active.items() if n not in before and n not in closed_now
        }
        cursor.watched = sorted(watched)
        if changed or new_by_session:
            cursor.settle_until = _iso(now + self._settle)
        settling = cursor.settle_until is not None and cursor.settle_until > _iso(now)
        # A newly labeled item's comments written before the label are history
        # (baselined); later ones are delivered. The label's time comes from the issue's
        # events; without it, the previous look bounds it (an extra comment of context
        # beats losing one written right after the label).
        since_look = _parse_time(old.polled_at)
        # GitHub keeps labels on a closed issue: a reopen alone (which its author may do)
        # brings it back labeled. Only a label put on after the last close opens it
        # again; a reopened item GitHub cannot date a relabel for is left alone (and
        # stays watched: a relabel seen later, after this look, opens it then). Only
        # items listed as changed are asked, so an idle cycle costs nothing more.
        relabel_check = (reopened & labeled & before) - new_by_label
        history = {n: self._label_history(repository, n) for n in new_by_label | relabel_check}
        for n in (new_by_label & reopened) | relabel_check:
            put_on, closed_last = history[n]
            relabeled = put_on is not None and (closed_last is None or put_on > closed_last)
            if put_on is not None and n in relabel_check and since_look is not None:
                relabeled = relabeled and put_on > since_look  # watched: only a new label
            if relabeled:
                new_by_label.add(n)
            else:
                new_by_label.discard(n)
                del history[n]
        label_times = {n: put_on for n, (put_on, _closed) in history.items()}
        labeled_at = {n: at or since_look for n, at in label_times.items()}
        cursor.polled_at = _iso(now)
        if changed or settling:
            for item in self._comments(repository, cursor, now):
                pr_event = pulls.conversation_comment(item)
                if pr_event is not None:
                    result.events.append(pr_event)
                    continue
                self._consider(
                    repository,
                    item,
                    own,
                    watched,
                    labeled_at,
                    new_by_session,
                    result,
                    closed=closed_now,
                )
            if pulls.targets:
                result.events.extend(pulls.review_comments(comments_since))
        result.events.extend(pulls.checks())
        cursor.pulls = pulls.pulls
        for number in sorted(new_by_label):
            issue = (seen or {}).get(number)
            if issue is not None:
                result.events.append(opened_event(repository, issue, label_times.get(number)))
        if not settling:
            cursor.settle_until = None
        return result

    def _pr_links(self) -> PrLinks | None:
        """The stored PR links (None without a store: a bare source in a test)."""
        if self._links is None and self.store is not None:
            self._links = PrLinks(self.store)
        return self._links

    def _ci_budget(self) -> CiBudget | None:
        if self._budget is None and self.store is not None and self._ci_retries is not None:
            self._budget = CiBudget(self.store, self._ci_retries)
        return self._budget

    def _refused(self, pr: WorkItemRef, number: int, refs: list[str]) -> None:
        """A PR closes issues of repositories not configured: not routed, said once per
        reading of the PR (`github.link_refused`)."""
        log.info("github: %s links to unconfigured %s; refused", pr, ", ".join(refs))
        if self._event_log is not None:
            self._event_log.emit(
                "github.link_refused",
                level="warning",
                source="poller",
                work_item=pr,
                detail={"pr": number, "refused": refs},
            )

    def _label_history(
        self, repository: str, number: int
    ) -> tuple[datetime | None, datetime | None]:
        """When the trigger label was last put on the item, and when it was last closed
        (its issue events: one call per newly labeled item); None where GitHub cannot say
        (for the label time, the previous look is then used)."""
        try:
            listing = self.github.list_all(
                f"repos/{repository}/issues/{number}/events", {"per_page": PER_PAGE}
            )
        except GitHubError as exc:
            log.info("github: issue events of %s#%d unavailable: %s", repository, number, exc)
            return None, None
        labeled: list[datetime] = []
        closed: list[datetime] = []
        for obj in listing.items:
            if not isinstance(obj, dict):
                continue
            kind = obj.get("event")
            label = obj.get("label")
            if kind == "labeled" and not (
                isinstance(label, dict) and label.get("name") == self.trigger_label
            ):
                continue
            if kind in ("labeled", "closed"):
                with contextlib.suppress(ParseError):
                    moment = parse_time(obj.get("created_at"), "issue event created_at")
                    (labeled if kind == "labeled" else closed).append(moment)
        return max(labeled, default=None), max(closed, default=None)

    def _issues(
        self, repository: str, cursor: RepoCursor, old: RepoCursor, result: _RepoResult
    ) -> dict[int, IssueInfo] | None:
        """The activity probe: the issues updated in the window, None when unchanged (304).

        Updates the labeled set and queues closings of watched items.
        """
        seen: dict[int, IssueInfo] = {}
        listing = self.github.list_all(
            f"repos/{repository}/issues",
            {
                "state": "all",
                "sort": "updated",
                "direction": "asc",
                "since": old.issues_since,
                "per_page": PER_PAGE,
            },
            etag=old.issues_etag,
        )
        if listing.not_modified:
            return None
        labeled = set(old.labeled)
        latest = None
        for obj in listing.items:
            issue = parse_issue(obj, "issue")
            seen[issue.number] = issue
            latest = issue.updated_at if latest is None else max(latest, issue.updated_at)
            carries = self.trigger_label in issue.labels
            if issue.state == "open" and carries:
                labeled.add(issue.number)
            else:
                labeled.discard(issue.number)
            if issue.state == "closed" and issue.number in old.watched:
                result.events.append(self._closed(repository, issue))
        cursor.labeled = sorted(labeled)
        full = _full(listing)
        cursor.issues_since = self._advance(old.issues_since, latest, full)
        same_window = cursor.issues_since == old.issues_since
        cursor.issues_etag = listing.etag if same_window and not full else None
        return seen

    def _comments(self, repository: str, cursor: RepoCursor, now: datetime) -> list[CommentInfo]:
        """Comments since the cursor (repository-wide, conditional); advances the cursor."""
        since = cursor.comments_since
        listing = self.github.list_all(
            f"repos/{repository}/issues/comments",
            {"since": since, "sort": "updated", "direction": "asc", "per_page": PER_PAGE},
            etag=cursor.comments_etag,
        )
        if listing.not_modified:
            return []
        comments = [parse_comment(obj, "comment") for obj in listing.items]
        latest = max((c.updated_at for c in comments), default=None)
        full = _full(listing)
        cursor.comments_since = self._advance(since, latest, full)
        same_window = cursor.comments_since == since
        cursor.comments_etag = listing.etag if same_window and not full else None
        return comments

    def _consider(
        self,
        repository: str,
        item: CommentInfo,
        own: str,
        watched: set[int],
        new_by_label: dict[int, datetime | None],
        new_by_session: dict[int, datetime],
        result: _RepoResult,
        *,
        closed: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        """A listed comment becomes an event, a baseline id, or nothing."""
        if item.issue_number not in watched:
            return
        started = new_by_session.get(item.issue_number)
        before_label = item.issue_number in new_by_label and (
            (looked := new_by_label[item.issue_number]) is None or item.created_at <= looked
        )
        if before_label or (started is not None and item.created_at < started):
            result.baseline.append(comment_delivery(repository, item.id))
            return
        rules = Rules.build(self.trigger_label, self._authorized_actors, own)
        event = comment_event(repository, item, rules, spawns=item.issue_number not in closed)
        if isinstance(event, Event):
            result.events.append(event)

    def _advance(self, since: str, latest: datetime | None, full: bool) -> str:
        """The next window start: kept while the window is short, so the ETag of this
        answer stays valid for the next request (an idle cycle after a busy one is
        already a 304); moved to `latest - overlap` (never backwards) once the answer
        filled a page or the window is older than `max_window`."""
        if latest is None:
            return since
        start = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        if not full and latest - start <= self._max_window:
            return since
        return max(since, _iso(latest - self._overlap))

    def _closed(self, repository: str, issue: IssueInfo) -> Event:
        """A watched item's closing, with who closed it: a listing does not say, the
        issue's own GET does (`closed_by`; one request per closing of a watched item).
        Unknown stays "" (and keeps the workspace, as a close by someone else)."""
        closed_by = issue.closed_by
        if not closed_by:
            try:
                closed_by = parse_issue(
                    self.github.get_json(f"repos/{repository}/issues/{issue.number}"), "issue"
                ).closed_by
            except (GitHubError, ParseError) as exc:
                log.info("github: who closed %s#%d is unknown: %s", repository, issue.number, exc)
        rules = Rules.build(self.trigger_label, self._authorized_actors)
        return closed_event(repository, issue, closed_by, rules)


def _full(listing: Listing) -> bool:
    """Did the answer fill its first page? Then its ETag proves nothing: GitHub's ETag
    covers one page, and newer rows (sorted ascending) land on a page not asked for."""
    return listing.pages > 1 or len(listing.items) >= int(PER_PAGE)


def _in_repo(ref: WorkItemRef, repository: str) -> bool:
    return ref.source == "github" and ref.project.lower() == repository.lower()


def registry_active_items(store: Any) -> dict[WorkItemRef, datetime]:
    """Active sessions in dispatch's registry, with when each started."""
    if store is None:
        return {}
    records: Iterable[Any] = store.registry.list()
    active: dict[WorkItemRef, datetime] = {}
    for record in records:
        status = getattr(record.status, "value", record.status)
        if status in ("active", "hibernated"):  # a hibernated item still hears comments
            active[record.work_item] = record.created_at
    return active
