"""`the-loop gh-webhook start`: the GitHub webhook receiver, in the foreground."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click

from ..envnames import shown
from ..errors import OperationalError, UsageError
from ..lazy import SuggestingGroup
from ._common import log_options, preflight, runtime

if TYPE_CHECKING:
    from loop_dispatch import Event

    from ..config import Config, LoadedConfig
    from ..runtime import Runtime

SERVICE = "webhook"
HEARTBEAT_SECONDS = 15.0


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_secret(
    env_name: str, insecure: bool, host: str, key: str = "webhook.secretEnv"
) -> bytes | None:
    """The secret's bytes from the variable named by `key`, or a refusal."""
    if insecure:
        if not is_loopback(host):
            raise UsageError(
                f"--insecure-no-signature is allowed only on a loopback host, not {host!r}"
            )
        return None
    value = os.environ.get(env_name, "")
    if not value:
        raise UsageError(
            f"webhook secret: the variable {key}={shown(env_name)} is not set or "
            "empty; set it to the webhook's secret (or pass --insecure-no-signature on a "
            "loopback host)"
        )
    return value.encode("utf-8")


def _own_login(rt: Runtime) -> str | None:
    """The token's login, so the receiver ignores the agent's own comments (best effort)."""
    cfg = rt.config
    token = os.environ.get(cfg.github.token_env)
    if not token:
        return None
    from ..github.client import GitHubClient, GitHubError

    client = GitHubClient(token, cfg.github.api_url, timeout=5.0, retries=0)
    try:
        user = client.get_json("user")
    except GitHubError:
        return None
    finally:
        client.close()
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) else None


def _jira_route(rt: Runtime, insecure: bool, host: str, route: bool) -> Any:
    """`/jira-webhook` when Jira is one of the trackers and its webhook secret is set
    (docs/jira.md), else None. Its secret is Jira's own (`jira.webhookSecretEnv`)."""
    cfg = rt.config
    if "jira" not in cfg.active_trackers():
        return None
    from ..jira.webhook import JiraRefetch
    from ..runtime import jira_client
    from ..webhook.app import JiraRoute

    if not insecure and not os.environ.get(cfg.jira.webhook_secret_env):
        return None  # optional: no Jira secret, no Jira route (Jira's own is never reused)
    secret = resolve_secret(cfg.jira.webhook_secret_env, insecure, host, "jira.webhookSecretEnv")
    client = jira_client(cfg)
    rt.keep_until_closed(client)
    refetch = JiraRefetch(
        client,
        cfg.jira.site or "",
        list(cfg.jira.projects),
        cfg.jira.trigger_label,
        list(cfg.authorized_actors),
        has_session=_has_session(rt.store) if route else None,
    )
    return JiraRoute(secret, refetch)


def _pr_links(store: Any) -> Any:
    """A PR's stored links by way (github/links.py), for routing its events."""
    from ..github.links import PrLinks

    links = PrLinks(store)

    def stored(repository: str, number: int) -> dict[str, Any]:
        return {link.via: link.item for link in links.of_pr(repository, number)}

    return stored


def _has_session(store: Any) -> Any:
    """Whether an item has an active session (an unlinked PR with its own session keeps
    hearing its activity); a store that cannot say answers no."""

    def check(ref: Any) -> bool:
        try:
            record = store.registry.get(ref)
        except Exception:
            return False
        return record is not None and record.active

    return check


def _log_event(rt: Runtime) -> Any:
    def record(event: Event) -> object:
        return rt.event_log.emit(
            "webhook.received",
            source="gh-webhook",
            work_item=event.work_item,
            delivery_id=event.delivery_id,
            detail={"kind": event.kind.value, "actor": event.actor, "routed": False},
        )

    return record


def _rejections(rt: Runtime) -> Any:
    """`on_reject` / `on_limit` as `webhook.rejected` events: one per cause per minute,
    with how many were folded into it (a flood never floods the event log)."""
    import threading
    import time

    last: dict[tuple[int, str], float] = {}
    folded: dict[tuple[int, str], int] = {}
    lock = threading.Lock()

    def record(status: int, reason: str) -> None:
        cause = (status, reason[:200])
        now = time.monotonic()
        with lock:
            if cause in last and now - last[cause] < 60.0:
                folded[cause] = folded.get(cause, 0) + 1
                return
            last[cause] = now
            more = folded.pop(cause, 0)
        rt.event_log.emit(
            "webhook.rejected",
            level="warning",
            source="gh-webhook",
            detail={"status": status, "reason": cause[1], "folded": more},
        )

    return record


def _no_worker_warning(store: Any) -> str | None:
    """On a fleet a receiver only commits: without a live worker nothing is delivered,
    which the operator must hear at once rather than find in a growing inbox."""
    from loop_dispatch.hosts import Hosts

    if any(h.live for h in Hosts(store).list()):
        return None
    return (
        "gh-webhook: no live host worker on this fleet's store; accepted events "
        "wait in the shared inbox until a host runs `the-loop poll start`"
    )


def _drain_lifespan(rt: Runtime, drain: Any) -> Any:
    """Run the inbox drain beside the server; stop it (within its grace) on shutdown.

    The drain watches the state directory: deleted or replaced, it stops the server."""
    import contextlib
    import signal
    import threading

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        stop = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                drain.run(stop)
            except BaseException as exc:  # GroundLost or a store gone for good
                failure.append(exc)
                os.kill(os.getpid(), signal.SIGTERM)

        thread = threading.Thread(target=run, name="the-loop-drain", daemon=True)
        thread.start()
        app.state.drain_failure = failure
        try:
            yield
        finally:
            stop.set()
            thread.join(drain.stop_grace + 15)

    return lifespan


def apply_rules(app: Any, cfg: Config) -> None:
    """The receiver's routing rules from a config: global, and per project."""
    from ..webhook.app import set_rules

    projects = {}
    for repository in cfg.github.repositories:
        eff = cfg.for_project(repository)
        if eff is not cfg:
            projects[repository] = (
                eff.github.trigger_label,
                list(eff.authorized_actors),
                eff.github.session_per_pr,
            )
    set_rules(
        app,
        trigger_label=cfg.github.trigger_label,
        authorized_actors=list(cfg.authorized_actors),
        repositories=list(cfg.github.repositories) or None,
        session_per_pr=cfg.github.session_per_pr,
        projects=projects,
    )


@contextlib.contextmanager
def _reloading(rt: Runtime, app: Any, hangup: threading.Event) -> Iterator[None]:
    """Re-read the config every heartbeat interval and at once on SIGHUP, on a thread
    of its own: a changed file's rules are swapped in whole between deliveries, and the
    drain (with --route) takes its delivery and harness settings at its next attempt."""
    from ..live_config import LiveConfig

    def apply(loaded: LoadedConfig) -> None:
        rt.apply_config(loaded)
        apply_rules(app, loaded.config)

    live = LiveConfig(rt.loaded, apply, rt.event_log, "webhook")
    app.state.live = live
    done = threading.Event()

    def run() -> None:
        while not done.is_set():
            hangup.wait(HEARTBEAT_SECONDS)
            if done.is_set():
                return
            hangup.clear()
            try:
                live.check()
            except Exception as exc:  # noted; the receiver goes on with what it has
                rt.event_log.emit(
                    "config.reload_failed",
                    level="error",
                    source="webhook",
                    detail={"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"},
                )

    thread = threading.Thread(target=run, name="gh-webhook-reload", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        hangup.set()
        thread.join(timeout=5)


@click.group("gh-webhook", cls=SuggestingGroup)
def gh_webhook() -> None:
    """The GitHub webhook receiver."""


@gh_webhook.command("start", epilog="Example: the-loop gh-webhook start --route --log-format json")
@click.option("--route", is_flag=True, help="Hand events to the dispatcher (else only log them).")
@click.option("--host", default=None, help="Address to listen on (default: webhook.host).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=None, help="Port (default: webhook.port)."
)
@click.option(
    "--insecure-no-signature",
    is_flag=True,
    help="Accept unsigned deliveries (loopback host only; for local testing).",
)
@log_options
@click.pass_context
def start(
    ctx: click.Context,
    route: bool,
    host: str | None,
    port: int | None,
    insecure_no_signature: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Receive GitHub deliveries until SIGTERM/SIGINT (foreground, systemd-friendly).

    Logs one line per decision (accepted, rejected; with --route the drain's spawns,
    deliveries and failures) to stderr."""
    from ..daemonlog import configured

    with configured(log_level, log_format):
        _start(ctx, route, host, port, insecure_no_signature)


def _start(
    ctx: click.Context, route: bool, host: str | None, port: int | None, insecure: bool
) -> None:
    from ..daemonlog import daemon_logger

    log = daemon_logger()
    insecure_no_signature = insecure
    rt = runtime(ctx)
    cfg = rt.config
    host = host or cfg.webhook.host
    port = cfg.webhook.port if port is None else port
    secret = resolve_secret(cfg.webhook.secret_env, insecure_no_signature, host)
    # On a fleet's shared store a receiver only commits: the hosts' `poll start` workers
    # deliver (each its own items), so a receiver may run beside this host's worker, under
    # the same host name, or on a machine with no harness at all.
    deliver_here = route and not rt.fleet
    if deliver_here:
        preflight(rt)  # no tmux, or a harness that cannot start, would use up every delivery

    from ..github.cibudget import CiBudget
    from ..heartbeat import beat, stopped
    from ..webhook.app import create_app
    from ..webhook.guard import Limits
    from ..webhook.seen import InboxAccept, LogAccept
    from ..webhook.server import serve
    from ..webhook.statewatch import StateWatch

    store = rt.store
    lifespan = None
    if deliver_here:
        ground = rt.ground()
        drain = rt.drain(watch=ground.check)
        accept: Any = InboxAccept(store, on_accepted=drain.wake, watch=ground.check)
        lifespan = _drain_lifespan(rt, drain)
    elif route:
        accept = InboxAccept(store)
        warning = _no_worker_warning(store)
        if warning:
            log.warning(warning)
    else:
        accept = LogAccept(store, _log_event(rt))
    app = create_app(
        secret,
        accept,
        max_body=cfg.webhook.max_body_bytes,
        authorized_actors=list(cfg.authorized_actors),
        trigger_label=cfg.github.trigger_label,
        own_login=_own_login(rt),
        insecure=insecure_no_signature,
        repositories=list(cfg.github.repositories) or None,
        session_per_pr=cfg.github.session_per_pr,
        has_session=_has_session(store) if route else None,
        pr_links=_pr_links(store) if route else None,
        ci_budget=CiBudget(store, cfg.github.ci_retries) if route else None,
        lifespan=lifespan,
        on_reject=(rejected := _rejections(rt)),
        jira=_jira_route(rt, insecure_no_signature, host, route),
    )
    apply_rules(app, cfg)  # per-project rules (`projects:`) beside the global ones
    limits = Limits(
        header_timeout=cfg.webhook.header_timeout_seconds,
        body_timeout=cfg.webhook.body_timeout_seconds,
        keep_alive=cfg.webhook.keep_alive_seconds,
        max_connections=cfg.webhook.max_connections,
    )
    started = datetime.now(timezone.utc)
    stats = app.state.stats

    def write_heartbeat() -> None:
        detail = {"host": host, "port": port, "route": route, **dict(stats)}
        live = getattr(app.state, "live", None)
        if live is not None:
            detail["config"] = live.state()
        beat(
            store,
            SERVICE,
            stale_after=HEARTBEAT_SECONDS * 3,
            started=started,
            detail=detail,
            host=rt.host_name,
        )

    # Lost state (ground gone, database dropped, store silent past the stale window)
    # stops the receiver like the poller: exit 1 with `daemon.state_lost`.
    watch = StateWatch(
        write_heartbeat,
        ground=None if rt.fleet else rt.ground().check,
        stale_after=HEARTBEAT_SECONDS * 3,
    )

    running: list[int] = []

    def announce(bound: int) -> None:
        running.append(bound)
        mode = (
            "routing to the dispatcher"
            if deliver_here
            else "committing to the fleet's shared inbox; the hosts' workers deliver"
            if route
            else "logging only (no --route)"
        )
        signed = "UNSIGNED (insecure)" if secret is None else "signature required"
        log.info("gh-webhook listening on http://%s:%d (%s; %s)", host, bound, mode, signed)

    from ..daemon_signals import hangup_reloads

    lost: str | None = None
    try:
        with hangup_reloads("gh-webhook") as hangup, _reloading(rt, app, hangup):
            lost = serve(
                app,
                host,
                port,
                heartbeat=watch.beat,
                interval=HEARTBEAT_SECONDS,
                on_started=announce,
                limits=limits,
                on_limit=lambda cause: rejected(503 if cause == "connections" else 408, cause),
            )
    except OSError as exc:
        raise OperationalError(
            f"gh-webhook: cannot listen on {host}:{port}: {exc.strerror}"
        ) from None
    finally:
        failure = getattr(app.state, "drain_failure", None)
        # A receiver that never listened must not overwrite; one whose store does not
        # answer would only wait out another connect timeout.
        if running and not failure and not lost and not watch.failing:
            stopped(store, SERVICE, started=started, detail=dict(stats), host=rt.host_name)
    if lost:
        rt.event_log.emit(
            "daemon.state_lost", level="error", source="webhook", detail={"problem": lost}
        )
        raise OperationalError(f"gh-webhook: stopping: {lost}")
    if failure:
        raise OperationalError(f"gh-webhook: stopping: {failure[0]}")
    log.info("gh-webhook stopped")
