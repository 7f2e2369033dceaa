"""Everything a command needs, built from the config once and lazily.

A command touches only what it uses: `status` opens the store and asks tmux once;
`item open` opens the store only. The dispatcher and its launcher are built here and
nowhere else, so the env-file launcher (env rotation) has exactly one seam:
`build_launcher`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .config import Config, HarnessConfig, LoadedConfig
from .envnames import shown
from .errors import ConfigError, OperationalError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from loop_dispatch import Event, HarnessAdapter, SessionRecord, Source, WorkItemRef
    from loop_dispatch.dispatcher import Dispatcher, Outcome
    from loop_dispatch.drain import Drain, Settlement
    from loop_dispatch.eventlog import EventLog
    from loop_dispatch.fence import LeaseFence
    from loop_dispatch.fencekeeper import FenceKeeper
    from loop_dispatch.hibernation import Hibernator
    from loop_dispatch.launch import Launcher
    from loop_dispatch.pastegate import PasteGate
    from loop_dispatch.store import Store
    from loop_tmux import Tmux

    from .ground import Ground
    from .harness_state import HarnessState
    from .rotation.restart import ActivityReader, RestartDeps

EVENT_SOURCE = "loop-cli"
RESTART_LOCK_TIMEOUT = 10.0  # sessions restart waits this long for a busy item
STATE_FILE = "state.db"  # loop_dispatch.store keeps its SQLite file under this name


def build_adapter(harness: HarnessConfig, state: HarnessState | None = None) -> HarnessAdapter:
    """The harness adapter the config describes (generic without argv = the demo agent).

    `state`: where the launched harness keeps its files (harness_state.py); the adapter
    reads there. Without it, the harness's default as seen from this process."""
    from loop_dispatch.adapters import ClaudeCodeAdapter, CodexAdapter, GenericAdapter

    read_dir = None if state is None else state.path
    if harness.adapter == "claude-code":
        return ClaudeCodeAdapter(
            harness.resolved_binary(),
            harness.extra_args,
            state_dir=harness.state_dir,
            read_dir=read_dir,
            config_file=None if state is None else state.config_file,
        )
    if harness.adapter == "codex":
        return CodexAdapter(
            harness.resolved_binary(),
            harness.extra_args,
            state_dir=harness.state_dir,
            read_dir=read_dir,
        )
    fresh, resume = harness.generic_argv()
    return GenericAdapter(fresh, resume, idle_file=harness.idle_file)


def build_launcher(config: Config, config_path: Path | None = None) -> Launcher:
    """THE launcher seam: every pane runs under `loop-envstate exec`, with the env file
    when `env.file` is configured, and always with an environment built from the
    allowlist, `harness.passEnv` and the-loop's own names only (docs/security.md)."""
    from .rotation.launcher import pane_launcher

    return pane_launcher(config, config_path)


def build_sources(config: Config, store: Store, event_log: EventLog | None = None) -> list[Source]:
    """Every tracker the poller reads (`trackers`, else `tracker`), each its own cursor."""
    return [build_source(config, store, name, event_log) for name in config.active_trackers()]


def build_source(
    config: Config, store: Store, tracker: str | None = None, event_log: EventLog | None = None
) -> Source:
    """One tracker the poller reads: the local tracker, GitHub or Jira."""
    tracker = tracker or config.tracker
    if tracker == "local":
        from .tracker import LocalSource

        return LocalSource(store)
    if tracker == "jira":
        return build_jira_source(config, store)
    import os

    token = os.environ.get(config.github.token_env)
    if not token:
        raise ConfigError(
            [
                "tracker github: the token variable "
                f"github.tokenEnv={shown(config.github.token_env)} is not set in this environment"
            ]
        )
    if not config.github.repositories:
        raise ConfigError(["tracker github: github.repositories lists no repository"])
    from .github.source import GitHubSource

    groups = project_groups(config)
    sources = [
        GitHubSource(
            repositories=repositories,
            token=token,
            api_url=config.github.api_url,
            trigger_label=label,
            authorized_actors=list(actors),
            store=store,
            session_per_pr=per_pr,
            ci_retries=config.github.ci_retries,
            event_log=event_log,
            # Closing references route to every watched repository, whichever group.
            configured=list(config.github.repositories),
        )
        for (label, actors, per_pr), repositories in groups.items()
    ]
    if len(sources) == 1:
        return sources[0]
    from .github.grouped import GroupedSource

    return GroupedSource(sources)


def project_groups(config: Config) -> dict[tuple[str, tuple[str, ...], bool], list[str]]:
    """The watched repositories grouped by the rules they are read under (`projects:`
    overrides): (trigger label, authorized actors, sessionPerPr) -> repositories."""
    groups: dict[tuple[str, tuple[str, ...], bool], list[str]] = {}
    for repository in config.github.repositories:
        eff = config.for_project(repository)
        key = (
            eff.github.trigger_label,
            tuple(eff.authorized_actors),
            eff.github.session_per_pr,
        )
        groups.setdefault(key, []).append(repository)
    return groups


def jira_client(config: Config) -> Any:
    """A JiraClient for `jira.*`, or ConfigError naming the variable that is not set."""
    jira = config.jira
    token = os.environ.get(jira.token_env)
    if not token:
        raise ConfigError(
            [
                "tracker jira: the token variable "
                f"jira.tokenEnv={shown(jira.token_env)} is not set in this environment"
            ]
        )
    email = None
    if jira.deployment == "cloud":
        email = os.environ.get(jira.email_env or "")
        if not email:
            raise ConfigError(
                [
                    "tracker jira: the e-mail variable "
                    f"jira.emailEnv={shown(jira.email_env or '')} is not set in this environment"
                ]
            )
    from .jira.client import JiraClient

    return JiraClient(jira.base_url(), jira.deployment, token, email)


def build_jira_source(config: Config, store: Store) -> Source:
    """The Jira source of `jira.*` (docs/jira.md)."""
    jira = config.jira
    if jira.site is None or not jira.projects:
        raise ConfigError(["tracker jira: jira.site and jira.projects are required"])
    client = jira_client(config)
    from .github.source import registry_active_items
    from .jira.source import JiraSource, token_fingerprint

    secret = os.environ.get(jira.token_env, "")
    return JiraSource(
        client,
        jira.site,
        list(jira.projects),
        jira.trigger_label,
        list(config.authorized_actors),
        token_fingerprint=token_fingerprint(jira.base_url(), secret),
        active_items=lambda: registry_active_items(store),
        margin=jira.margin_seconds,
    )


def open_event_log(config: Config) -> EventLog:
    """The configured event log. A path that is not a file is refused here: the log
    itself never raises for an unwritable path, so every event would vanish silently."""
    from loop_dispatch.eventlog import EventLog

    path = config.event_log_path()
    if path.exists() and not path.is_file():
        raise ConfigError([f"event log {path} is not a file (key eventLog.path)"])
    cfg = config.event_log
    return EventLog(path, max_bytes=cfg.max_bytes, backups=cfg.backups)


class Runtime:
    """The objects of one the-loop process, each built on first use."""

    version = __version__

    def __init__(self, loaded: LoadedConfig, *, read_only: bool = False) -> None:
        # read_only: this command only reads (status, listings): its store is opened
        # read-only and never waits for another process's write lock.
        self.read_only = read_only
        self.loaded = loaded
        self.config: Config = loaded.config
        self.state_dir: Path = self.config.effective_state_dir()
        self.lock_dir: Path = self.state_dir / "locks"
        self._opened: list[Any] = []
        self._sources: list[Source] | None = None
        self._drains: list[Drain] = []
        self._close_waits: dict[str, float] = {}
        # (project, harness) -> (the config it was built from, its view, its dispatcher)
        self._dispatchers: dict[tuple[str, str], tuple[Config, Config, Dispatcher]] = {}
        self._adapters: dict[tuple[str, str], tuple[Config, HarnessAdapter]] = {}
        self._dispatchers_lock = threading.Lock()

    # Built from live keys: dropped on a reload, built again on next use.
    _LIVE_BUILT = ("adapter", "launcher", "workspaces", "_reactor", "_jira_acks", "hibernator")

    def apply_config(self, loaded: LoadedConfig) -> None:
        """Swap in a whole validated config (live_config.py kept its restart-only keys
        as they were). What was built from live keys is built again on next use; an
        attempt under way finishes with the objects it took (the sources, reactors and
        acknowledgers dropped here are closed with the runtime); the drains take the
        new delivery settings at their next claim."""
        self.loaded = loaded
        self.config = loaded.config
        for name in self._LIVE_BUILT:
            self.__dict__.pop(name, None)
        with self._dispatchers_lock:  # each is built anew from the new config on use
            self._dispatchers.clear()
            self._adapters.clear()
        self._sources = None
        for drain in self._drains:
            drain.configure(
                policy=self._retry_policy(),
                concurrency=self.config.delivery.concurrency,
                lease_seconds=self.config.delivery.lease_seconds,
            )

    @property
    def has_state(self) -> bool:
        """Whether the state store exists yet. Read-only commands (`status`, `sessions
        list`, `env doctor`) check this instead of opening it: opening creates it."""
        if self.config.store.url:
            return True  # a shared database: its schema is created on first use
        try:
            return (self.state_dir / STATE_FILE).is_file()
        except PermissionError:  # the state is private (0700) to the user the-loop runs as
            raise OperationalError(
                f"state dir {self.state_dir}: permission denied; it is private to the user "
                "the-loop runs as: run this command as that user"
            ) from None

    @cached_property
    def store(self) -> Store:
        from loop_dispatch.store import Store

        cfg = self.config.store
        password = None
        if cfg.url and cfg.password_env:
            password = os.environ.get(cfg.password_env)
            if not password:
                raise ConfigError(
                    [
                        f"{self.loaded.path}: store.passwordEnv names {shown(cfg.password_env)}, "
                        "which is not set (or empty) in the environment"
                    ]
                )
        store = Store.open(self.state_dir, url=cfg.url, password=password, read_only=self.read_only)
        self._opened.append(store)
        return store

    def state_read_only(self) -> str:
        """Why this user may not write the SQLite state ("" when it may, when there is
        none yet, or on a shared database), for `status` to say so."""
        if self.config.store.url or not self.has_state:
            return ""
        from loop_dispatch.sqlite_db import read_only_reason

        return read_only_reason(self.state_dir / STATE_FILE)

    @cached_property
    def event_log(self) -> EventLog:
        log = open_event_log(self.config)
        if self.read_only or not self.config.notify.enabled:
            return log
        from .notify import NotifyingEventLog

        # Events chosen by `notify:` are committed to the store's outbox as written.
        return NotifyingEventLog(
            log.path,
            config=self.config,
            store=lambda: self.store,
            max_bytes=log.max_bytes,
            backups=log.backups,
        )

    @cached_property
    def tmux(self) -> Tmux:
        from loop_tmux import Tmux

        from .agent_env import server_environment

        # A server started by this process holds only the allowlist (docs/security.md).
        return Tmux(
            socket_name=self.config.routing.tmux_socket,
            server_env=server_environment(self.config),
        )

    @cached_property
    def adapter(self) -> HarnessAdapter:
        from .harness_state import harness_state

        return build_adapter(self.config.harness, harness_state(self.config))

    @cached_property
    def launcher(self) -> Launcher:
        return build_launcher(self.config, self.loaded.path)

    def cwd_for(self, ref: WorkItemRef) -> Path:
        return self.config.cwd_for_project(ref.project)

    @property
    def versions(self) -> dict[str, str]:
        """The versions of the packages that decide a delivery: a give-up recorded under
        any other set is re-armed once (seed 002 AC11, per package)."""
        import loop_dispatch
        import loop_tmux

        return {
            "loop-cli": __version__,
            "loop-dispatch": loop_dispatch.__version__,
            "loop-tmux": loop_tmux.__version__,
        }

    def ground(self) -> Ground:
        """The state directory's identity now, for a daemon to watch (see ground.py)."""
        from .ground import Ground

        return Ground(self.state_dir, self.state_dir / STATE_FILE)

    def drain(
        self,
        *,
        watch: Callable[[], str | None] | None = None,
        on_settled: Callable[[Settlement], None] | None = None,
    ) -> Drain:
        """The inbox drain over this runtime's dispatcher, configured by `delivery.*`."""
        from loop_dispatch.drain import Drain

        cfg = self.config.delivery
        policy = self._retry_policy()
        self.reactor()  # built now, on this thread; a reload builds the next ones
        self.jira_acks()
        on_settled = _both(on_settled, self._react)
        on_settled = _both(on_settled, self._ack)
        if self.config.tracker == "local":  # control words answered on the item itself
            from .acknowledge import LocalAcknowledger, on_control_settled

            local = on_control_settled(LocalAcknowledger(self.store))
            on_settled = _both(on_settled, local)
        host = self.host_lease()
        drain = Drain(
            self.store,
            _LaunchChecked(self),
            self.event_log,
            versions=self.versions,
            policy=policy,
            concurrency=cfg.concurrency,
            lease_seconds=cfg.lease_seconds,
            watch=watch,
            on_settled=on_settled,
            paste_gate=self.paste_gate,
            host=host,
            on_lapsed=None if host is None else self.end_stale_agents,
        )
        self._drains.append(drain)
        return drain

    def _retry_policy(self) -> Any:
        from loop_dispatch.drain import RetryPolicy

        cfg = self.config.delivery
        return RetryPolicy(
            max_attempts=self.config.max_attempts(),
            give_up_after=cfg.give_up_after_seconds,
            backoff=cfg.backoff_seconds,
            max_backoff=cfg.max_backoff_seconds,
        )

    def _ack(self, settlement: Settlement) -> None:
        """Hand a settled attempt to the Jira acknowledger of the config in force (its
        acknowledgement, and the answer to a control word)."""
        acks = self.jira_acks()
        if acks is not None:
            from .acknowledge import on_control_settled

            try:
                acks.on_settled(settlement)
            finally:
                on_control_settled(acks)(settlement)

    def _react(self, settlement: Settlement) -> None:
        """Hand a settled attempt to the reactor of the config in force (if any), when
        its project reacts (`github.reactions`, or its `projects.P.reactions`)."""
        reactor = self.reactor()
        event = settlement.entry.event
        if reactor is None or event is None:
            return
        if self.config.for_project(event.work_item.project).github.reactions:
            reactor.on_settled(settlement)

    def reactor(self) -> Any:
        """Reactions on GitHub comments (`github.reactions`), when a token is at hand;
        None otherwise. Built once; closed with the runtime."""
        if "_reactor" in self.__dict__:
            return self.__dict__["_reactor"]
        import os

        gh = self.config.github
        token = os.environ.get(gh.token_env)
        reactor = None
        reacts = gh.reactions or any(
            self.config.for_project(r).github.reactions for r in gh.repositories
        )
        if reacts and gh.repositories and token:
            from .github.client import GitHubClient
            from .github.reactions import Reactor

            client = GitHubClient(token, gh.api_url)
            self._opened.append(client)

            def failed(job: Any, result: str) -> None:
                if result != "posted":
                    self.event_log.emit(
                        "github.reaction_failed",
                        level="warning",
                        source=EVENT_SOURCE,
                        detail={"what": job.what, "path": job.path, "error": result[:300]},
                    )

            reactor = Reactor(client.post_json, on_result=failed)
            self._opened.append(reactor)
        self.__dict__["_reactor"] = reactor
        return reactor

    def jira_acks(self) -> Any:
        """Acknowledgements on Jira (marked comments), when Jira is a tracker and its
        credentials are at hand; None otherwise. Built once; closed with the runtime."""
        if "_jira_acks" in self.__dict__:
            return self.__dict__["_jira_acks"]
        acks = None
        jira_source = next((s for s in self._jira_sources() if hasattr(s, "post_comment")), None)
        if jira_source is not None:
            from .jira.acks import JiraAcks

            def failed(ref: str, error: str) -> None:
                self.event_log.emit(
                    "jira.ack_failed",
                    level="warning",
                    source=EVENT_SOURCE,
                    detail={"workItem": ref, "error": error},
                )

            acks = JiraAcks(jira_source.post_comment, on_failed=failed)
            self._opened.append(acks)
        self.__dict__["_jira_acks"] = acks
        return acks

    def _jira_sources(self) -> list[Source]:
        if "jira" not in self.config.active_trackers():
            return []
        try:
            return [s for s in self.sources() if s.name == "jira"]
        except ConfigError:  # no credentials here: nothing to acknowledge with
            return []

    @cached_property
    def workspaces(self) -> Any:
        """The per-item worktrees (`workspace.mode: worktree`), else None (shared cwd)."""
        return _workspaces(self.config)

    @property
    def host_name(self) -> str:
        """This host's name in the fleet (`host.name`, default the machine's hostname);
        heartbeats and restart requests are keyed by it."""
        return self.config.host.effective_name()

    @property
    def fleet(self) -> bool:
        """Whether this host is one of a fleet sharing a PostgreSQL store."""
        return bool(self.config.store.url)

    @cached_property
    def _host_lease(self) -> Any:
        from loop_dispatch.hosts import HostLease

        cfg = self.config.host
        return HostLease(
            self.store,
            cfg.effective_name(),
            max_sessions=cfg.max_sessions,
            lease_seconds=cfg.lease_seconds,
            max_live=cfg.max_live,
            fence=self.fence,
        )

    def host_lease(self) -> Any:
        """This host's lease in the fleet (None on the single-host SQLite store)."""
        return self._host_lease if self.fleet else None

    def end_stale_agents(self) -> None:
        """Our lease had lapsed: end the agents of items that moved to other hosts."""
        from loop_dispatch.hosts import end_stale_agents

        name = self.config.host.effective_name()
        for tmux_name in end_stale_agents(self.store, self.tmux, name):
            self.event_log.emit(
                "session.stale_ended",
                level="warning",
                source="host",
                detail={"host": name, "tmux_name": tmux_name, "reason": "host_lease_lapsed"},
            )

    @cached_property
    def fence(self) -> LeaseFence | None:
        """On a fleet, this worker's own deadline for its host lease (fence.py): no paste
        or spawn after it. None on the single-host SQLite store."""
        if not self.fleet:
            return None
        from loop_dispatch.fence import LeaseFence

        return LeaseFence(self.config.host.lease_seconds)

    @cached_property
    def paste_gate(self) -> PasteGate:
        """Shared by the dispatcher and the drain: a kill repeats at most one paste; on
        a fleet it also refuses every paste and spawn once the host lease ran out."""
        from loop_dispatch.pastegate import PasteGate

        return PasteGate(fence=self.fence)

    def start_fence_keeper(self, lock: Path) -> FenceKeeper | None:
        """On a fleet, the process that ends this host's agents when the lease runs out
        even while this worker is frozen or cut off (fencekeeper.py). None otherwise."""
        fence = self.fence
        if fence is None:
            return None
        from loop_dispatch.fencekeeper import FenceKeeper

        keeper = FenceKeeper.start(
            socket_name=self.config.routing.tmux_socket, socket_path=None, lock=lock
        )
        fence.on_renewed(keeper.extend)
        return keeper

    @property
    def dispatcher(self) -> Dispatcher:
        """The dispatcher of the global settings (`harness:`, no project override),
        built anew once per config (a reload swaps it between attempts)."""
        with self._dispatchers_lock:
            config = self.config
            found = self._dispatchers.get(_GLOBAL)
            if found is None or found[0] is not config:
                from .harness_state import harness_state

                adapter = build_adapter(config.harness, harness_state(config))
                built = self._build_dispatcher(
                    config, adapter, build_launcher(config, self.loaded.path), _workspaces(config)
                )
                found = (config, config, built)
                self._dispatchers[_GLOBAL] = found
            return found[2]

    def _env_state(self, cfg: Config) -> Callable[[str], str]:
        """The `status` control word's environment words for one session (names of the
        stale variables at most, never a value)."""

        def state(tmux_name: str) -> str:
            from loop_tmux import TmuxUnavailable

            from .rotation.drift import session_env_state

            try:
                pids = self.tmux.pane_pids(tmux_name)
            except TmuxUnavailable:  # silent: the reply says so rather than fail the verb
                return "unknown (tmux did not answer)"
            return session_env_state(cfg, pids)

        return state

    def _build_dispatcher(
        self, cfg: Config, adapter: HarnessAdapter, launcher: Launcher, workspaces: Any
    ) -> Dispatcher:
        from loop_dispatch.dispatcher import Dispatcher

        dispatcher = Dispatcher(
            self.store,
            self.tmux,
            adapter,
            self.event_log,
            self.version,
            cwd_for=lambda ref: cfg.cwd_for_project(ref.project),
            lock_dir=self.lock_dir,
            launcher=launcher,
            lock_timeout=cfg.routing.dispatch_timeout_seconds,
            survival_delay=cfg.harness.survival_seconds,
            receipt_seconds=cfg.harness.receipt_seconds,
            kill_harness_on_close=cfg.sessions.kill_harness_on_close,
            close_grace=cfg.sessions.close_grace_seconds,
            workspaces=workspaces,
            paste_gate=self.paste_gate,
            max_live=self.config.host.max_live,
            host=self.host_name if self.fleet else None,
            env_state=self._env_state(cfg),
            require_start=self.config.github.require_start_command
            and self.config.tracker == "github",
        )
        # A close's wait for an idle moment is one count per delivery, whichever
        # dispatcher (project, harness, config reload) hears it next.
        dispatcher.closer._waits = self._close_waits
        return dispatcher

    @cached_property
    def hibernator(self) -> Hibernator:
        """The poll daemon's hibernation sweep (issue 25; hibernation.py)."""
        from loop_dispatch.hibernation import Hibernator

        return Hibernator(self.dispatcher, after=self.config.sessions.hibernate_after_seconds)

    def dispatcher_for(self, project: str, harness: str) -> tuple[Config, Dispatcher]:
        """The config and dispatcher of one project's sessions under one named harness
        (issue 27): the global dispatcher when nothing is overridden; built once per
        (project, harness) and config."""
        base = self.config
        cfg = base.for_project(project, harness)
        if cfg is base:
            return cfg, self.dispatcher
        key = (project, harness)
        with self._dispatchers_lock:
            found = self._dispatchers.get(key)
            if found is None or found[0] is not base:
                from .harness_state import harness_state

                adapter = build_adapter(cfg.harness, harness_state(cfg))
                built = self._build_dispatcher(
                    cfg, adapter, build_launcher(cfg, self.loaded.path), _workspaces(cfg)
                )
                found = (base, cfg, built)
                self._dispatchers[key] = found
        return found[1], found[2]

    def item_dispatcher(self, ref: WorkItemRef) -> Dispatcher:
        """The dispatcher of the item's project and harness (commands acting on one
        item: `sessions start`, `sessions stop`). GitHub unreadable: exit 1."""
        from .github.client import GitHubError

        try:
            harness = self.harness_for(ref)
        except GitHubError as exc:
            raise OperationalError(f"{ref}: cannot read its labels on GitHub: {exc}") from None
        return self.dispatcher_for(ref.project, harness)[1]

    def harness_for(self, ref: WorkItemRef) -> str:
        """The harness name the item's next event goes through: its live session's
        recorded one, else a fresh choice (label, project, default), recorded now."""
        from . import harness_choice

        record = self.store.registry.get(ref)
        recorded = harness_choice.read(self.store, ref)
        if record is not None and record.active:
            return harness_choice.in_force(self.config, recorded)
        labels = self._labels(ref) if ref.source == "github" else None
        choice = harness_choice.choose(self.config, ref, labels)
        if recorded != choice:
            harness_choice.record(self.store, ref, choice)
        return choice.harness

    def _labels(self, ref: WorkItemRef) -> Callable[[], list[str]] | None:
        """The item's labels as GitHub has them now (one request; asked only when a
        harness label could pick a harness). Raises GitHubError when GitHub fails."""
        token = os.environ.get(self.config.github.token_env)
        if not token:
            return None

        def read() -> list[str]:
            from .github.client import GitHubClient

            client = GitHubClient(token, self.config.github.api_url, timeout=10.0, retries=1)
            try:
                issue = client.get_json(f"repos/{ref.project}/issues/{ref.number}")
            finally:
                client.close()
            labels = issue.get("labels") if isinstance(issue, dict) else None
            return [
                str(label.get("name"))
                for label in labels or []
                if isinstance(label, dict) and isinstance(label.get("name"), str)
            ]

        return read

    def check_launch(self, config: Config | None = None) -> None:
        """Refuse (exit 2, naming the key) when a pane could not start the harness: the
        configured env file is gone or unreadable, or the harness program is not found.

        Checked before anything is dispatched (and by every poll cycle): a harness that
        cannot start dies in its pane at once, and the dispatcher would count that spawn
        as done, using up the event. A bare name is looked up on the PATH the launcher
        will use (the env file's, when it declares one); a relative path is left to the
        pane's cwd.
        """
        import os
        import shutil

        from .rotation.launcher import env_file_path
        from .rotation.restart import harness_problem

        config = config or self.config
        harness = config.harness
        if harness.adapter == "generic":
            program, key = harness.generic_argv()[0][0], "harness.argv[0]"
        else:
            program, key = harness.resolved_binary(), "harness.binary"
        if os.sep in program and not os.path.isabs(os.path.expanduser(program)):
            return
        where = self.loaded.path or "embedded defaults"
        declared: dict[str, str] = {}
        file = env_file_path(config)
        if file is not None:
            from loop_envstate import EnvFileError
            from loop_envstate import declared as read_env_file

            try:
                env = read_env_file(file)
            except EnvFileError as err:
                raise ConfigError([f"{where}: env.file: {err}"]) from None
            declared = dict(env.values) if env is not None else {}
        problem = harness_problem(os.path.expanduser(program), declared, shutil.which)
        if problem is not None:
            raise ConfigError([f"{where}: {key}: {problem}"])

    def preflight(self) -> list[str]:
        """Refuse (exit 2, one line each) what would make every spawn fail: tmux absent
        or too old, a setup finding marked fatal (`preflight.setup_findings`), a harness
        that cannot start (`check_launch`). Returns the other findings as warning lines,
        for the command to show, and notes which tmux server this config uses."""
        from .preflight import claim_socket, setup_findings, tmux_problem

        problem = tmux_problem(self.tmux.binary, version=self.tmux.version)
        if problem is not None:
            raise ConfigError([problem])
        where = self.loaded.path or "embedded defaults"
        findings = setup_findings(self.config)
        fatal = [f"{where}: {f.line()}" for f in findings if f.fatal]
        if fatal:
            raise ConfigError(fatal)
        self.check_launch()
        claim_socket(self.config, self.loaded.path)
        return [f"{where}: {f.line()}" for f in findings if not f.fatal]

    def adapter_of(self, record: SessionRecord) -> HarnessAdapter | None:
        """The adapter of the harness that started this session, or None when that is
        not the one configured for it now. A conversation is resumed (and its files
        read) only by the harness that started it: the named harness recorded for the
        item (issue 27), with its project's extra args."""
        from . import harness_choice

        ref = record.work_item
        name = harness_choice.in_force(self.config, harness_choice.read(self.store, ref))
        adapter = self.adapter_for(ref.project, name)
        return adapter if adapter.name == record.harness else None

    def dispatcher_of(self, record: SessionRecord) -> Dispatcher | None:
        """The dispatcher of the harness that started this session (as `adapter_of`),
        or None when that is not the one configured for it now."""
        from . import harness_choice

        ref = record.work_item
        name = harness_choice.in_force(self.config, harness_choice.read(self.store, ref))
        dispatcher = self.dispatcher_for(ref.project, name)[1]
        return dispatcher if dispatcher.adapter.name == record.harness else None

    def with_conversation(self, record: SessionRecord) -> SessionRecord:
        """`record` with its conversation id, found late when its harness picks its own
        (Codex) and none is recorded yet (Dispatcher.with_conversation); as it is
        otherwise. Only such records build a dispatcher."""
        if record.conversation_id or record.status != "active":
            return record
        adapter = self.adapter_of(record)
        if adapter is None or adapter.assigns_conversation_id:
            return record
        dispatcher = self.dispatcher_of(record)
        return record if dispatcher is None else dispatcher.with_conversation(record)

    def adapter_for(self, project: str, harness: str) -> HarnessAdapter:
        """The adapter of one project's sessions under one named harness: its
        dispatcher's when one is built, else the adapter alone (reading activity for
        `status` needs no dispatcher, whose import alone costs tens of milliseconds)."""
        base = self.config
        cfg = base.for_project(project, harness)
        key = _GLOBAL if cfg is base else (project, harness)
        with self._dispatchers_lock:
            built = self._dispatchers.get(key)
            if built is not None and built[0] is base:
                return built[2].adapter
            found = self._adapters.get(key)
            if found is None or found[0] is not base:
                from .harness_state import harness_state

                found = (base, build_adapter(cfg.harness, harness_state(cfg)))
                self._adapters[key] = found
            return found[1]

    def activity_reader(self) -> ActivityReader:
        """Sessions' activity now (issue 25): every pane in one batched tmux call, then
        the configured adapter's reading (the harness's files first, then the screen).
        Raises TmuxUnavailable when tmux does not answer."""
        from .activity import activity_of
        from .rotation.restart import Look

        tmux = self.tmux

        def read(records: Sequence[SessionRecord]) -> dict[str, Look]:
            # Screens always: an "unknown" harness counts idle once its screen is quiet.
            views = tmux.pane_views([r.tmux_name for r in records], capture=True)
            out = {}
            for record in records:
                view = views.get(record.tmux_name)
                screen = None if view is None else view.screen
                found = activity_of(self.adapter_of(record), record, view)
                out[str(record.work_item)] = Look(found, screen)
            return out

        return read

    def restart_deps(self, **overrides: Any) -> RestartDeps:
        """`sessions restart`'s collaborators: the config's adapter, tmux, registry, event
        log and per-item locks, and the env-file launcher (refused when none is set)."""
        from loop_dispatch.lock import item_lock

        from .rotation.launcher import EnvFileLauncher
        from .rotation.restart import AdapterLike, RestartDeps

        launcher = self.launcher
        if not isinstance(launcher, EnvFileLauncher) or launcher.file is None:
            # require_env_file refuses before this
            raise UsageError("no env file configured (key env.file)")

        def adapter_for(record: SessionRecord) -> AdapterLike | None:
            return self.adapter_of(record)

        values: dict[str, Any] = {
            "registry": self.store.registry,
            "tmux": self.tmux,
            "launcher": launcher,
            "adapter_for": adapter_for,
            "activity": self.activity_reader(),
            "conversation": self.with_conversation,
            "events": self.event_log,
            "lock": lambda ref: item_lock(self.lock_dir, ref, timeout=RESTART_LOCK_TIMEOUT),
            "survival_delay": self.config.harness.survival_seconds,
        }
        values.update(overrides)
        return RestartDeps(**values)

    def source(self) -> Source:
        """The first configured source (the only one unless `trackers` lists several)."""
        return self.sources()[0]

    def sources(self) -> list[Source]:
        """The configured sources, built once per process: they keep HTTP connections."""
        if self._sources is None:
            built = build_sources(self.config, self.store, self.event_log)
            self._opened.extend(s for s in built if hasattr(s, "close"))
            self._sources = built
        return self._sources

    def keep_until_closed(self, obj: Any) -> None:
        """Close `obj` (an HTTP client, a worker) when this runtime closes."""
        self._opened.append(obj)

    def close(self) -> None:
        for obj in reversed(self._opened):
            # Closing at exit must not mask the command's real outcome.
            with contextlib.suppress(Exception):
                obj.close()
        self._opened.clear()


_GLOBAL = ("", "")  # the dispatchers' key of the global settings


def _workspaces(config: Config) -> Any:
    """Worktrees per item when `workspace.mode` is worktree, else None (shared cwd)."""
    if config.workspace.mode != "worktree":
        return None
    from loop_dispatch.workspace import Workspaces

    cfg = config.workspace
    return Workspaces(
        config.workspace_root(), dict(cfg.repositories), base_ref=cfg.base_ref, fetch=cfg.fetch
    )


def _both(first: Any, second: Any) -> Any:
    if first is None:
        return second

    def call(settlement: Any) -> None:
        try:
            first(settlement)
        finally:
            second(settlement)

    return call


class _LaunchChecked:
    """The dispatcher, behind the launch check: while the env file is gone or the harness
    program is missing, a spawn would die at once, so attempts fail as
    `launch_unavailable` (transient: retried, never counted) until it is fixed."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def dispatch(self, event: Event) -> Outcome:
        from loop_dispatch.dispatcher import Outcome, OutcomeKind

        from .github.client import GitHubError

        ref = event.work_item
        try:
            harness = self.rt.harness_for(ref)
            config, dispatcher = self.rt.dispatcher_for(ref.project, harness)
            self.rt.check_launch(config)
        except (ConfigError, GitHubError) as exc:
            detail = " ".join(str(exc).split())[:500]
            self.rt.event_log.emit(
                "dispatch.failed",
                level="error",
                source=EVENT_SOURCE,
                work_item=event.work_item,
                delivery_id=event.delivery_id,
                detail={"reason": "launch_unavailable", "error": detail, "kind": event.kind.value},
            )
            return Outcome(OutcomeKind.FAILED, "launch_unavailable", detail)
        return dispatcher.dispatch(event)
