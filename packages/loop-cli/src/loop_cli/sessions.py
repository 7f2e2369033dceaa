"""Session operations behind `the-loop sessions ...`: rows and plans, never printing.

Every fleet-wide answer comes from one `Tmux.panes()` read (see fleet.py).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .envnames import shown
from .errors import ConfigError, OperationalError, UsageError
from .fleet import ABSENT, DEAD, LIVE, read_fleet

if TYPE_CHECKING:
    from loop_dispatch import Event, WorkItemRef
    from loop_dispatch.registry import SessionRecord

    from .runtime import Runtime

START_PROMPT = "Session started by {actor} with `the-loop sessions start`."


def display_ref(ref: WorkItemRef, repositories: list[str]) -> str:
    """The ref as the operator wrote its repository in `github.repositories` (refs are
    canonical lower case; what a human reads keeps the configured spelling)."""
    if ref.source == "github":
        for name in repositories:
            if name.lower() == ref.project:
                return f"github:{name}#{ref.number}"
    return str(ref)


def list_rows(rt: Runtime) -> list[dict[str, Any]]:
    """One row per registered session, with its presence from one fleet read and its
    activity (idle, busy, blocked, unknown; None without a live pane) from one batched
    read of the live panes."""
    from .activity import activities, live_views
    from .workspaces import kept_reason

    fleet = read_fleet(rt.tmux)
    rows = []
    repositories = list(rt.config.github.repositories)
    placement = _placements(rt)
    prs = _pull_requests(rt)
    records = rt.store.registry.list() if rt.has_state else []
    from .capacity_view import session_memory

    memory = session_memory(records, fleet)  # one pass over the process table for all
    holds = rt.store.controls.all() if rt.has_state else {}
    active = [r for r in records if r.active]
    views = live_views(rt.tmux, active, fleet, capture=rt.adapter.reads_screen) if active else {}
    doing = activities(rt.adapter_of, active, views)
    for rec in records:
        hold = holds.get(str(rec.work_item))
        kept = "" if rec.active else kept_reason(rt, rec.work_item, fleet.presence(rec.tmux_name))
        row: dict[str, Any] = (
            {} if placement is None else {"host": placement.get(str(rec.work_item))}
        )
        rows.append(
            row
            | {
                "ref": str(rec.work_item),
                "displayRef": display_ref(rec.work_item, repositories),
                "tmuxName": rec.tmux_name,
                "status": rec.status,
                "presence": fleet.presence(rec.tmux_name),
                "pids": fleet.live_pids(rec.tmux_name),
                "rssBytes": memory.get(rec.tmux_name),
                "activity": doing.get(str(rec.work_item)),
                "harness": rec.harness,
                "harnessName": _harness_name(rt, rec.work_item),
                "conversationId": rec.conversation_id,
                "cwd": str(rec.cwd),
                "createdAt": rec.created_at.isoformat(),
                "updatedAt": rec.updated_at.isoformat(),
                "startedAt": (rec.started_at or rec.created_at).isoformat(),
                "workspaceKept": kept,
                "pullRequests": prs.get(str(rec.work_item), []),
                # issue 24: paused/stopped (None: not held) and its events waiting
                "hold": None if hold is None else hold.value,
                "held": rt.store.inbox.count(("paused",), work_item=str(rec.work_item))
                if hold is not None
                else 0,
            }
        )
        if placement is not None and row["host"] != rt.config.host.effective_name():
            # Another host's tmux holds it: this host cannot see its presence.
            rows[-1]["presence"] = "on another host"
            rows[-1]["pids"] = []
            rows[-1]["rssBytes"] = None
            rows[-1]["activity"] = None
    return rows


def attention_rows(rt: Runtime, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`sessions list --attention`: the rows the detector flagged, each with its
    `attention` entries (why, since, remedy) from the same list `status` shows."""
    from .attention import attention_list

    if not rt.has_state:
        return []
    flagged: dict[str, list[dict[str, Any]]] = {}
    for entry in attention_list(rt.store):
        flagged.setdefault(entry["item"], []).append(
            {k: entry[k] for k in ("why", "reason", "since", "remedy")}
        )
    return [r | {"attention": flagged[r["ref"]]} for r in rows if r["ref"] in flagged]


def _pull_requests(rt: Runtime) -> dict[str, list[dict[str, Any]]]:
    """Each item's linked PRs (issue 27: `repository`, `pr`, `via`), from the store."""
    if not rt.has_state:
        return {}
    from .github.links import PrLinks

    return PrLinks(rt.store).by_item()


def _harness_name(rt: Runtime, ref: WorkItemRef) -> str:
    """The named harness recorded for the item's session (`harnesses:`; "default":
    `harness:`, also for a session from before names were recorded)."""
    from .config import DEFAULT_HARNESS
    from .harness_choice import read

    choice = read(rt.store, ref)
    return choice.harness if choice is not None else DEFAULT_HARNESS


def quarantine_lines(rt: Runtime) -> list[str]:
    """One line per stored session row that does not load, naming it and the remedy."""
    if not rt.has_state:
        return []
    return [q.line() for q in rt.store.registry.quarantined()]


def reset_quarantined(rt: Runtime, keys: list[str]) -> list[str]:
    """Remove quarantined rows by their raw text (no tmux target is derived from them)."""
    known = {q.key for q in rt.store.registry.quarantined()} if rt.has_state else set()
    done = []
    for key in keys:
        if key not in known:
            raise UsageError(f"{key!r} is neither a work item ref nor a quarantined row")
        if rt.store.registry.reset_key(key):
            done.append(key)
    return done


def _placements(rt: Runtime) -> dict[str, str] | None:
    """Item -> host on a fleet's shared store; None on the single-host store."""
    if not (rt.fleet and rt.has_state):
        return None
    from loop_dispatch.hosts import HOSTS_MIGRATIONS, Hosts

    if Hosts(rt.store).version < len(HOSTS_MIGRATIONS):
        return {}  # a reader on a store no worker has used yet: nothing is placed
    rows = rt.store.query("SELECT work_item, host FROM placements")
    return {r[0]: r[1] for r in rows}


def start(rt: Runtime, ref: WorkItemRef) -> dict[str, Any]:
    """Start (or confirm) the item's session; a GitHub item becomes watched by it.

    Refused (exit 2) for a ref of a tracker this config does not read, and for a closed
    item. An active, live session is left as it is. A session never started begins
    with the item's opening when it still waits in the inbox (same delivery id: the
    drain then settles that row as a duplicate, never a second copy); a stopped one
    resumes its recorded conversation; otherwise a MANUAL event goes through the
    dispatcher's decision tree.
    """
    _require_tracker(rt, ref)
    _require_open(rt, ref)
    from .console import release_for_start

    released = release_for_start(rt, ref)  # a paused or stopped item goes on (issue 24)
    record = rt.store.registry.get(ref)
    if record is not None and record.active and rt.tmux.probe(record.tmux_name).value == "live":
        row = {"ref": str(ref), "outcome": "already-running", "tmuxName": record.tmux_name}
        return row | ({"released": released} if released else {})
    # Under github.requireStartCommand the opening waits for a start: a manual start
    # spawns, and the released opening follows it (never held a second time).
    awaits = rt.config.github.require_start_command and rt.config.tracker == "github"
    opening = _waiting_opening(rt, ref) if record is None and not awaits else None
    if opening is not None:
        outcome = rt.item_dispatcher(ref).dispatch(opening)
    else:
        actor = operator_name()
        outcome = rt.item_dispatcher(ref).start(ref, START_PROMPT.format(actor=actor), actor=actor)
    record = rt.store.registry.get(ref)
    row = {
        "ref": str(ref),
        "outcome": outcome.kind.value,
        "reason": outcome.reason,
        "detail": outcome.detail,
        "tmuxName": record.tmux_name if record else ref.tmux_name(),
    }
    if outcome.kind.value not in ("processed", "duplicate"):
        raise OperationalError(f"could not start {ref}: {outcome.detail or outcome.reason}")
    return row


def _require_tracker(rt: Runtime, ref: WorkItemRef) -> None:
    """A ref of the tracker this config reads; another's could never be updated."""
    trackers = rt.config.active_trackers()
    if ref.source not in trackers:
        where = rt.loaded.path or "the embedded defaults"
        raise UsageError(
            f"{ref} is a {ref.source} item, but this config's tracker is "
            f"{'+'.join(trackers)} (key tracker/trackers in {where})"
        )
    if ref.source == "jira" and ref.jira_site != (rt.config.jira.site or "").lower():
        raise UsageError(f"{ref} is not on this config's Jira site jira.site={rt.config.jira.site}")


def _require_open(rt: Runtime, ref: WorkItemRef) -> None:
    """An item that exists and is open: the local tracker's row, or GitHub's answer."""
    if ref.source == "github":
        _require_open_on_github(rt, ref)
        return
    if ref.source == "jira":
        _require_open_on_jira(rt, ref)
        return
    from .tracker import LocalTracker

    item = LocalTracker(rt.store).get(ref)
    if item is None:
        raise UsageError(f"no local item {ref}; open one with `the-loop item open`")
    if item.state == "closed":
        raise UsageError(
            f"{ref} is closed; a closed item gets no session (the-loop item reopen {ref})"
        )


def _require_open_on_github(rt: Runtime, ref: WorkItemRef) -> None:
    """Ask GitHub for the issue (or pull request): closed or missing is refused (exit 2);
    GitHub not answering is an operational failure (exit 1), nothing started."""
    import os

    from .github.client import GitHubClient, GitHubError, PermanentError

    gh = rt.config.github
    token = os.environ.get(gh.token_env)
    if not token:
        raise UsageError(
            f"cannot check {ref} on GitHub: the token variable github.tokenEnv="
            f"{shown(gh.token_env)} is not set in this environment"
        )
    client = GitHubClient(token, gh.api_url)
    path = f"/repos/{ref.project}/issues/{ref.number}"
    try:
        issue = client.get_json(path)
    except GitHubError as exc:
        if isinstance(exc, PermanentError) and exc.status == 404:
            raise UsageError(f"no GitHub issue or pull request {ref}") from None
        raise OperationalError(f"cannot read {ref} from GitHub: {exc}") from None
    finally:
        client.close()
    if isinstance(issue, dict) and issue.get("state") == "closed":
        raise UsageError(f"{ref} is closed on GitHub; a closed item gets no session")


def _require_open_on_jira(rt: Runtime, ref: WorkItemRef) -> None:
    """Ask Jira for the issue: Done or missing is refused (exit 2); Jira not answering
    is an operational failure (exit 1), nothing started."""
    from .jira.client import JiraError, NotFound
    from .jira.parse import ISSUE_FIELDS, ParseError, parse_issue
    from .runtime import jira_client

    try:
        client = jira_client(rt.config)
    except ConfigError as exc:
        raise UsageError(f"cannot check {ref} on Jira: {exc}") from None
    try:
        issue = parse_issue(
            client.get(f"issue/{ref.jira_key}", {"fields": ISSUE_FIELDS}), ref.jira_site
        )
    except NotFound:
        raise UsageError(f"no Jira issue {ref}") from None
    except (JiraError, ParseError) as exc:
        raise OperationalError(f"cannot read {ref} from Jira: {exc}") from None
    finally:
        client.close()
    if issue.done:
        raise UsageError(f"{ref} is done on Jira; a closed item gets no session")


def _waiting_opening(rt: Runtime, ref: WorkItemRef) -> Event | None:
    """The item's opening event while it still waits in the inbox, undelivered."""
    from loop_dispatch import EventKind

    for entry in rt.store.inbox.entries(("pending",), work_item=str(ref)):
        if entry.event is not None and entry.event.kind is EventKind.OPENED:
            return entry.event
    return None


def stop(rt: Runtime, ref: WorkItemRef) -> dict[str, Any]:
    """Terminate the harness (the pane and its scrollback stay) and close the record;
    later events wait in the inbox until `sessions start` (issue 24)."""
    from .console import hold_for_stop

    record = rt.store.registry.get(ref)
    if record is None:
        raise OperationalError(f"no session registered for {ref}; see `the-loop sessions list`")
    hold_for_stop(rt, ref, operator_name())
    if not record.active:
        return {"ref": str(ref), "outcome": "already-closed", "tmuxName": record.tmux_name}
    if not rt.config.sessions.kill_harness_on_close:
        # The dispatcher keeps harnesses on close with this setting; an explicit stop
        # still ends this one (under the item's lock, released before close takes it).
        from loop_dispatch.lock import item_lock

        with item_lock(rt.lock_dir, ref, timeout=30):
            rt.tmux.terminate(record.tmux_name, grace=5.0)
    outcome = rt.item_dispatcher(ref).close(ref)
    if outcome.kind.value == "failed":
        raise OperationalError(f"could not stop {ref}: {outcome.detail or outcome.reason}")
    return {
        "ref": str(ref),
        "outcome": "stopped",
        "tmuxName": record.tmux_name,
        "detail": outcome.detail,
    }


@dataclass(frozen=True)
class ResetPlan:
    ref: WorkItemRef
    tmux_name: str
    registered: bool
    presence: str

    def actions(self) -> list[str]:
        out = []
        if self.presence == LIVE:
            out.append(f"terminate the harness in {self.tmux_name}")
        if self.presence in (LIVE, DEAD):
            out.append(f"kill tmux session {self.tmux_name}")
        if self.registered:
            out.append("forget the registry record")
        return out or ["nothing to do"]


def reset_plans(rt: Runtime, refs: list[WorkItemRef], all_: bool) -> list[ResetPlan]:
    """What `sessions reset` would do, from one fleet read."""
    if all_ == bool(refs):
        raise UsageError("sessions reset needs either REF... or --all (not both, not neither)")
    fleet = read_fleet(rt.tmux)
    if fleet.error is not None:
        raise OperationalError(f"tmux did not answer ({fleet.error}); nothing was reset")
    records: list[SessionRecord]
    if all_:
        records = rt.store.registry.list()
        return [
            ResetPlan(r.work_item, r.tmux_name, True, fleet.presence(r.tmux_name)) for r in records
        ]
    plans = []
    from loop_dispatch.store import StoreError

    for ref in refs:
        try:
            rec = rt.store.registry.get(ref)
        except StoreError:
            # A row the store refuses (hand-edited): reset is its remedy. Delete it, and
            # act only on the item's own session name, never on the one the row holds.
            plans.append(ResetPlan(ref, ref.tmux_name(), True, fleet.presence(ref.tmux_name())))
            continue
        # An unregistered item: its name is the one the registry would have stored.
        name = rec.tmux_name if rec else ref.tmux_name()
        plans.append(ResetPlan(ref, name, rec is not None, fleet.presence(name)))
    return plans


def apply_reset(rt: Runtime, plan: ResetPlan) -> dict[str, Any]:
    """Forget this machine's state for one item: its tmux session and registry record.

    The poll ledger is kept, so comments already handled are never re-forwarded.
    """
    from loop_dispatch.lock import item_lock

    done = []
    with item_lock(rt.lock_dir, plan.ref, timeout=30):
        if plan.presence == LIVE:
            rt.tmux.terminate(plan.tmux_name, grace=5.0)
            done.append("terminated")
        if plan.presence in (LIVE, DEAD):
            if not rt.tmux.kill(plan.tmux_name):
                raise OperationalError(f"could not kill tmux session {plan.tmux_name}")
            done.append("killed")
        if plan.registered and rt.store.registry.reset(plan.ref):
            done.append("forgotten")
    return {"ref": str(plan.ref), "tmuxName": plan.tmux_name, "done": done}


def attach_argv(rt: Runtime, ref: WorkItemRef, *, read_only: bool = False) -> list[str]:
    """`tmux [-L socket] attach-session [-r] -t =NAME` for the item's session. `-r`:
    the client only watches; no key it sends reaches the agent."""
    record = rt.store.registry.get(ref)
    if record is None:
        raise OperationalError(f"no session registered for {ref}; see `the-loop sessions list`")
    presence = rt.tmux.probe(record.tmux_name).value
    if presence == ABSENT:
        raise OperationalError(f"tmux session {record.tmux_name} does not exist")
    if presence == "unknown":
        raise OperationalError(f"tmux did not answer about {record.tmux_name}")
    argv = ["tmux"]
    if rt.config.routing.tmux_socket:
        argv += ["-L", rt.config.routing.tmux_socket]
    return [*argv, "attach-session", *(["-r"] if read_only else []), "-t", f"={record.tmux_name}"]


def operator_name() -> str:
    """Who runs this command (the login name), as events and framing name them."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"
