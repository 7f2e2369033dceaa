"""The YAML config: msgspec Structs, the search order and one-line error messages.

Key names are camelCase in YAML (the issue fixes them); fields are snake_case in code.
Unknown keys are errors, so a typo never silently falls back to a default. Types are
strict: a wrong type (`1.5` for a whole number, `"no"` for a flag) is refused, never
coerced. `validation.check` reports every problem at once, one line each naming the
file and the camelCase key path; msgspec (strict mode) then builds the frozen config.

msgspec costs a fraction of pydantic's import (pydantic took 60-100 ms and more to build
its models), and only commands that load a config import this module; `the-loop
--version` and `--help` never do.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from . import paths
from .envnames import looks_like_token, shown
from .errors import ConfigError
from .validation import Rule, check, describe, run_rules

_TMUX_SOCKET_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789._-")
DEMO_AGENT_MODULE = "loop_cli.demo_agent"
DEFAULT_TMUX_SOCKET = "the-loop"
DEFAULT_HARNESS = "default"  # the name `harness:` answers to (`the-loop:default`)


def _check_env_name(value: str) -> None:
    # Messages never repeat the value: it may be the token itself (issue 21).
    if not value or not (value[0].isalpha() or value[0] == "_"):
        raise ValueError("must be the NAME of an environment variable (not its value)")
    if not all(ch.isalnum() or ch == "_" for ch in value):
        raise ValueError("must be the NAME of an environment variable (not its value)")
    if looks_like_token(value):  # `github_pat_...` has a name's characters
        raise ValueError(
            "must be the NAME of an environment variable, and this looks like a token "
            "(not shown): put the token in the environment and write its variable's NAME here"
        )


def _program_first(value: list[str]) -> None:
    if not value or not value[0]:
        raise ValueError("must start with the program to run")


def _owner_repo(value: list[str]) -> None:
    for repo in value:
        owner, sep, name = repo.partition("/")
        if not sep or not owner or not name or "/" in name:
            raise ValueError(f"{repo!r} is not OWNER/REPO")


def _jira_site(value: str) -> None:
    from loop_dispatch import RefError, WorkItemRef

    try:
        WorkItemRef("jira", f"{value}/KEY", 1)
    except RefError:
        raise ValueError(
            f"{value[:100]!r} is not a Jira site host name (e.g. acme.atlassian.net)"
        ) from None


def _jira_projects(value: list[str]) -> None:
    from loop_dispatch import RefError, WorkItemRef

    for key in value:
        try:
            WorkItemRef("jira", f"site/{key}", 1)
        except RefError:
            raise ValueError(
                f"{key[:100]!r} is not a Jira project key (a letter, then letters, digits, '_')"
            ) from None


def _jira_label(value: str) -> None:
    if not value or any(ch.isspace() for ch in value) or len(value) > 255:
        raise ValueError("must be a Jira label: 1-255 characters, no spaces")


def _http_url(value: str) -> None:
    if not value.startswith(("https://", "http://")):
        raise ValueError("must be an http(s):// URL")


def _harness_names(value: dict[str, Any]) -> None:
    for name in value:
        if not name or name[0] in "._-" or not set(name) <= _NAME_CHARS or len(name) > 40:
            raise ValueError(
                f"{name!r} is not a harness name: lower-case letters, digits, '.', '_', '-'"
            )
        if name == DEFAULT_HARNESS:
            raise ValueError(f"{name!r} is the name of `harness:` itself; choose another name")


def _project_names(value: dict[str, Any]) -> None:
    for name in value:
        owner, sep, repo = name.partition("/")
        local_chars = set(name) <= _TMUX_SOCKET_CHARS
        if sep and (not owner or not repo or "/" in repo):
            raise ValueError(f"{name!r} is not OWNER/REPO")
        if not sep and (not name or not local_chars):
            raise ValueError(f"{name!r} is neither OWNER/REPO nor a local project name")


def _secret_bearing_url(value: str, where: str) -> None:
    """A URL a credential is sent to: https (plain http only to loopback), no userinfo."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
    except ValueError:
        raise ValueError("must be an https:// URL") from None
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"must not carry credentials; {where}")
    loopback = host in ("127.0.0.1", "::1", "localhost")
    if not host or not (parts.scheme == "https" or (parts.scheme == "http" and loopback)):
        raise ValueError("must be an https:// URL (plain http only to a loopback address)")


def _jira_api_url(value: str) -> None:
    _secret_bearing_url(value, "the credential is in tokenEnv")


def _socket_name(value: str) -> None:
    if not value or not set(value) <= _TMUX_SOCKET_CHARS:
        raise ValueError("must be a tmux -L socket name: letters, digits, '.', '_', '-'")


EnvName = Annotated[str, Rule(_check_env_name)]  # a variable NAME, never a value
Argv = Annotated[list[str], Rule(_program_first)]
Seconds = float  # finite always (validation refuses nan and inf)


class _Section(
    msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, kw_only=True
):
    """Shared rules: camelCase keys only, unknown keys refused, immutable, keyword-only."""

    def __post_init__(self) -> None:
        run_rules(self)
        self._cross_keys()

    def _cross_keys(self) -> None:
        """Rules tying keys of one section together (raise ValueError)."""


class GitHubConfig(_Section, frozen=True, kw_only=True):
    repositories: Annotated[list[str], Rule(_owner_repo)] = []
    token_env: EnvName = "GITHUB_TOKEN"  # noqa: S105 (a variable NAME)
    api_url: str = "https://api.github.com"
    trigger_label: str = "the-loop"
    # A pull request that links to no issue gets a session of its own only when true.
    session_per_pr: bool = False
    # React on the triggering comment (eyes: delivered; rocket: in the conversation;
    # confused + one comment: given up), so the commenter sees it arrived.
    reactions: bool = True
    # Issue 27: a failing check is pasted at most this many times per head commit, then
    # once more to say the budget ran out, then not until it passes or the head moves.
    ci_retries: Annotated[int, Meta(ge=1, le=100)] = 3
    # The trigger label alone no longer starts a session: an item waits (its events
    # held in the inbox) until `the-loop start` on the ticket or `sessions start`.
    require_start_command: bool = False


TrackerName = Literal["local", "github", "jira"]


class JiraConfig(_Section, frozen=True, kw_only=True):
    """Jira as a ticket source (docs/jira.md). Cloud authenticates with an account's
    e-mail and API token (basic auth); Data Center with a personal access token (bearer).
    `site` names the items (`jira:SITE/KEY-N`); `apiUrl` (default https://SITE) is where
    the REST API answers."""

    site: Annotated[str, Rule(_jira_site)] | None = None
    deployment: Literal["cloud", "data-center"] = "cloud"
    email_env: EnvName | None = None
    token_env: EnvName = "JIRA_API_TOKEN"  # noqa: S105 (a variable NAME)
    projects: Annotated[list[str], Rule(_jira_projects)] = []
    trigger_label: Annotated[str, Rule(_jira_label)] = "the-loop"
    # Every request carries the credential: https, or plain http to loopback only.
    api_url: Annotated[str, Rule(_jira_api_url)] | None = None
    # The receiver's /jira-webhook route checks Jira's webhook secret kept in this variable.
    webhook_secret_env: EnvName = "THE_LOOP_JIRA_WEBHOOK_SECRET"  # noqa: S105 (a NAME)
    # How far back each JQL window reaches behind the cursor (Jira's `updated` is
    # minute-precise in JQL, and its search index lags a little).
    margin_seconds: Annotated[Seconds, Meta(ge=60, le=3600)] = 120.0

    def _cross_keys(self) -> None:
        if self.deployment == "cloud" and self.email_env is None and self.site is not None:
            raise ValueError("deployment cloud needs emailEnv (basic auth: e-mail + API token)")
        if self.deployment == "data-center" and self.email_env is not None:
            raise ValueError("emailEnv is for deployment cloud; data-center uses a bearer PAT")

    def base_url(self) -> str:
        """Where the REST API answers: `apiUrl`, else https://SITE."""
        return (self.api_url or f"https://{self.site}").rstrip("/")


class HarnessConfig(_Section, frozen=True, kw_only=True):
    adapter: Literal["claude-code", "codex", "generic"] = "generic"
    binary: str | None = None
    extra_args: list[str] = []
    argv: Argv | None = None
    resume_argv: Argv | None = None
    cwd: Path | None = None
    # Per-project working directory: "OWNER/REPO" (github) or "PROJECT" (local) -> path.
    cwd_by_project: dict[str, Path] = {}
    # How long a freshly started or resumed harness must stay up to count as started: a
    # harness that dies sooner (bad flag, unknown conversation) is caught, and a failed
    # resume falls back to a fresh conversation. Raise it for a harness slow to fail.
    survival_seconds: Annotated[Seconds, Meta(ge=0, le=60)] = 1.0
    # Issue 11: where claude-code / codex keep their own files (CLAUDE_CONFIG_DIR /
    # CODEX_HOME, handed to the harness when set), and how long a paste may take to show
    # up there before it is reported `dispatch.unconfirmed`.
    state_dir: Path | None = None
    receipt_seconds: Annotated[Seconds, Meta(gt=0, le=300)] = 10.0
    # issue 10: names an agent may see beyond the allowlist (see docs/security.md).
    pass_env: list[EnvName] = []
    # issue 25: the generic adapter's activity signal, a file the program rewrites with
    # `busy` / `idle` (`{session_id}` allowed); claude-code and codex read their own files.
    idle_file: str | None = None

    def _cross_keys(self) -> None:
        if self.idle_file is not None and not self.idle_file.strip():
            raise ValueError("idleFile must be a path, not an empty text")
        if self.idle_file is not None and self.adapter != "generic":
            raise ValueError(
                f"idleFile is for the generic adapter; {self.adapter} reports its activity "
                "from its own conversation files"
            )
        if self.adapter == "generic":
            if self.binary is not None:
                raise ValueError("binary is for claude-code and codex; generic uses argv")
            if self.state_dir is not None:
                raise ValueError("stateDir is for claude-code and codex")
            if self.argv is None and self.resume_argv is not None:
                raise ValueError("resumeArgv needs argv")
        elif self.argv is not None or self.resume_argv is not None:
            raise ValueError(f"argv and resumeArgv are for the generic adapter, not {self.adapter}")

    def resolved_binary(self) -> str:
        """The program an adapter runs: `binary`, else the adapter's usual name."""
        if self.binary:
            return self.binary
        return {"claude-code": "claude", "codex": "codex"}.get(self.adapter, "")

    def generic_argv(self) -> tuple[list[str], list[str] | None]:
        """Fresh and resume argv templates of the generic adapter.

        No `argv` means the bundled demo agent, which can resume.
        """
        if self.argv is None:
            base = [sys.executable, "-m", DEMO_AGENT_MODULE, *self.extra_args]
            return (
                [*base, "--session-id", "{session_id}", "{prompt}"],
                [*base, "--resume", "{session_id}", "{prompt}"],
            )
        return list(self.argv), (list(self.resume_argv) if self.resume_argv else None)


class RoutingConfig(_Section, frozen=True, kw_only=True):
    runner: Literal["tmux"] = "tmux"
    # issue 21: a private server of the-loop's own by default, never the operator's
    # default server (whose global environment may hold anything); null asks for it.
    tmux_socket: Annotated[str, Rule(_socket_name)] | None = DEFAULT_TMUX_SOCKET
    # The longest one dispatch waits for its work item's lock (another dispatch, a
    # restart or a stop holding it) before the attempt fails (transient) and the inbox
    # retries it later; short, so a busy item never holds a drain worker for long.
    dispatch_timeout_seconds: Annotated[Seconds, Meta(gt=0)] = 10.0


class PollingConfig(_Section, frozen=True, kw_only=True):
    interval_seconds: Annotated[Seconds, Meta(gt=0)] = 60.0
    # Kept as an alias of delivery.maxAttempts (which wins when both are given).
    max_retries: Annotated[int, Meta(ge=1)] | None = None


class DeliveryConfig(_Section, frozen=True, kw_only=True):
    """How the inbox retries: transient faults back off until a time horizon; definite
    failures count against an attempt budget."""

    max_attempts: Annotated[int, Meta(ge=1)] | None = None
    give_up_after_seconds: Annotated[Seconds, Meta(gt=0)] = 86400.0
    backoff_seconds: Annotated[Seconds, Meta(gt=0, le=3600)] = 1.0
    max_backoff_seconds: Annotated[Seconds, Meta(gt=0, le=86400)] = 60.0
    concurrency: Annotated[int, Meta(ge=1, le=64)] = 4
    lease_seconds: Annotated[Seconds, Meta(ge=5, le=3600)] = 60.0

    def _cross_keys(self) -> None:
        if self.max_backoff_seconds < self.backoff_seconds:
            raise ValueError("maxBackoffSeconds must be at least backoffSeconds")


class WebhookConfig(_Section, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: Annotated[int, Meta(ge=1, le=65535)] = 8787
    secret_env: EnvName = "THE_LOOP_WEBHOOK_SECRET"  # noqa: S105 (a variable NAME)
    max_body_bytes: Annotated[int, Meta(ge=1024)] = 25 * 1024 * 1024
    # issue 10: receiver limits against slow and half-open connections (docs/security.md).
    header_timeout_seconds: Annotated[Seconds, Meta(gt=0, le=300)] = 10.0
    body_timeout_seconds: Annotated[Seconds, Meta(gt=0, le=600)] = 30.0
    keep_alive_seconds: Annotated[Seconds, Meta(ge=1, le=300)] = 5.0
    max_connections: Annotated[int, Meta(ge=1, le=65536)] = 2048


class EnvConfig(_Section, frozen=True, kw_only=True):
    file: Path | None = None
    # issue 25: "idle" makes the poll daemon relaunch each stale session at its next
    # idle moment (a turn is never cut); "off" leaves rotation to `sessions restart`.
    auto_roll: Literal["off", "idle"] = "off"

    def _cross_keys(self) -> None:
        if self.auto_roll == "idle" and self.file is None:
            raise ValueError("autoRoll: idle needs env.file (what sessions are rolled onto)")


class EventLogConfig(_Section, frozen=True, kw_only=True):
    path: Path | None = None
    max_bytes: Annotated[int, Meta(ge=4096)] = 10 * 1024 * 1024
    backups: Annotated[int, Meta(ge=0)] = 5


class WorkspaceConfig(_Section, frozen=True, kw_only=True):
    """Where agents work: one shared cwd, or one git worktree per item (docs/workspaces.md)."""

    mode: Literal["shared", "worktree"] = "shared"
    # "OWNER/REPO" (github) or "PROJECT" (local) -> the local clone worktrees are made from.
    repositories: dict[str, Path] = {}
    root: Path | None = None  # default: <stateDir>/worktrees
    base_ref: str | None = None  # default: the clone's default branch
    fetch: bool = True

    def _cross_keys(self) -> None:
        if self.mode == "worktree" and not self.repositories:
            raise ValueError("mode worktree needs at least one repositories entry")
        if self.base_ref is not None and (not self.base_ref or self.base_ref.startswith("-")):
            raise ValueError("baseRef must be a branch, tag or commit name")


class SessionsConfig(_Section, frozen=True, kw_only=True):
    kill_harness_on_close: bool = True
    # A close waits for a busy harness's idle moment at most this long (issue 20): a
    # close by anyone never cuts an agent's turn short, and a harness that never goes
    # idle is still ended.
    close_grace_seconds: Annotated[Seconds, Meta(ge=0, le=86400)] = 600.0
    # issue 25: a session idle this long with no pending event has its harness ended
    # (scrollback kept, record `hibernated`); its next event resumes it. Absent: never
    # by age (only the oldest idle ones, when items wait for a slot under host.maxLive).
    hibernate_after_seconds: Annotated[Seconds, Meta(ge=1, le=30 * 86400)] | None = None


class ServicesConfig(_Section, frozen=True, kw_only=True):
    poller: bool = True
    webhook: bool = False


class AttentionConfig(_Section, frozen=True, kw_only=True):
    """When the poll daemon's stalled-agent detector raises `session.stalled`
    (docs/operator-guide.md, Attention)."""

    # An open item's harness exited (dead pane, or no session) this long: a dispatch
    # between registering an item and its spawn is not one.
    dead_seconds: Annotated[Seconds, Meta(ge=0, le=604800)] = 60.0
    # A harness on a dialog (permission, question, trust, login) this long.
    blocked_seconds: Annotated[Seconds, Meta(gt=0, le=604800)] = 300.0
    # Busy, and its conversation file has not grown this long.
    quiet_seconds: Annotated[Seconds, Meta(gt=0, le=604800)] = 1800.0
    # This many deliveries in a row without a receipt.
    unconfirmed_count: Annotated[int, Meta(ge=1, le=1000)] = 3


NOTIFY_EVENTS = (
    "session.stalled",
    "session.stall_cleared",
    "inbox.gave_up",
    "session.resume_failed",
    "session.env_restart",
    "daemon.state_lost",
    "dispatch.failed",
)
DEFAULT_NOTIFY_EVENTS = [
    "session.stalled",
    "inbox.gave_up",
    "session.resume_failed",
    "session.env_restart",
    "daemon.state_lost",
]


def _notify_events(value: list[str]) -> None:
    for name in value:
        if name not in NOTIFY_EVENTS:
            known = ", ".join(NOTIFY_EVENTS)
            raise ValueError(f"{name!r} is not a notifiable event; one of {known}")


def _webhook_url(value: str) -> None:
    _secret_bearing_url(value, "the signature secret is in secretEnv")


class NotifyConfig(_Section, frozen=True, kw_only=True):
    """Pushed alerts (docs/operator-guide.md, Notifications): which events, where to."""

    events: Annotated[list[str], Rule(_notify_events)] = msgspec.field(
        default_factory=lambda: list(DEFAULT_NOTIFY_EVENTS)
    )
    # At most one message per (item, reason) per interval.
    interval_seconds: Annotated[Seconds, Meta(ge=0, le=604800)] = 3600.0
    # The Slack incoming-webhook URL is a credential: only its variable's NAME here.
    slack_url_env: EnvName | None = None
    webhook_url: Annotated[str, Rule(_webhook_url)] | None = None
    webhook_secret_env: EnvName | None = None
    max_attempts: Annotated[int, Meta(ge=1, le=100)] = 8
    backoff_seconds: Annotated[Seconds, Meta(gt=0, le=3600)] = 5.0
    max_backoff_seconds: Annotated[Seconds, Meta(gt=0, le=86400)] = 900.0
    timeout_seconds: Annotated[Seconds, Meta(gt=0, le=60)] = 10.0

    def _cross_keys(self) -> None:
        if self.webhook_url is not None and self.webhook_secret_env is None:
            raise ValueError("webhookUrl needs webhookSecretEnv (every post is signed)")
        if self.webhook_secret_env is not None and self.webhook_url is None:
            raise ValueError("webhookSecretEnv without webhookUrl")
        if self.max_backoff_seconds < self.backoff_seconds:
            raise ValueError("maxBackoffSeconds must be at least backoffSeconds")

    @property
    def enabled(self) -> bool:
        return self.slack_url_env is not None or self.webhook_url is not None


def _postgresql_only(value: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        password = parts.password
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise ValueError("must be a postgresql://user@host:port/database URL") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("must be a postgresql://user@host:port/database URL (or absent)")
    if password is not None or "password" in parts.query.lower():
        # A ValueError: its message never echoes the value (the password).
        raise ValueError(
            "must not hold a password; name the variable holding it in store.passwordEnv"
        )


def _host_name(value: str) -> None:
    if not value or "/" in value or not value.isprintable() or len(value) > 100:
        raise ValueError("must be a short printable name without '/'")


class StoreConfig(_Section, frozen=True, kw_only=True):
    """Where state lives: absent url, the SQLite file in the state directory; a
    `postgresql://user@host:port/db` url, a database shared by several hosts. The
    password is never written here: `passwordEnv` names the variable holding it."""

    url: Annotated[str, Rule(_postgresql_only)] | None = None
    password_env: EnvName | None = None


class HostConfig(_Section, frozen=True, kw_only=True):
    """This host's identity in a fleet sharing a PostgreSQL store (unused on SQLite)."""

    name: Annotated[str, Rule(_host_name)] | None = None  # default: the machine's hostname
    lease_seconds: Annotated[Seconds, Meta(ge=2, le=3600)] = 30.0
    max_sessions: Annotated[int, Meta(ge=1, le=100000)] = 20
    # issue 25: the most harnesses running on this host at once (absent: no cap). A
    # spawn or wake beyond it waits in the inbox (`capacity_full`), oldest first.
    max_live: Annotated[int, Meta(ge=1, le=100000)] | None = None
    # `status` warns when the harnesses' memory passes this share of available memory.
    memory_warn_share: Annotated[float, Meta(gt=0, le=1)] = 0.8

    def effective_name(self) -> str:
        import socket

        return self.name or socket.gethostname()


def _listen(value: str) -> None:
    parse_listen(value)  # raises ValueError naming what is wrong


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`) -> (host, port); ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8788")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host != "localhost":
        import ipaddress

        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError("HOST must be an IP address or localhost") from None
    return host, int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    return host == "localhost" or ipaddress.ip_address(host).is_loopback


class ApiConfig(_Section, frozen=True, kw_only=True):
    """The poll daemon's read-only API (issue 26): always on `api.sock` in the state
    directory (owner only) unless `socket` is false; on loopback TCP at `listen` too,
    behind the bearer token held by the variable `tokenEnv`."""

    socket: bool = True
    listen: Annotated[str, Rule(_listen)] | None = None
    token_env: EnvName = "THE_LOOP_API_TOKEN"  # noqa: S105 (a variable NAME)
    # A non-loopback `listen` exposes the fleet's state to a network: only when asked.
    allow_remote: bool = False

    def _cross_keys(self) -> None:
        if self.listen is not None and not self.allow_remote:
            host, _ = parse_listen(self.listen)
            if not is_loopback(host):
                raise ValueError(
                    f"listen {self.listen} is not a loopback address; the API is meant for "
                    "this machine (set allowRemote: true to serve it on a network anyway)"
                )


class ProjectEnvConfig(_Section, frozen=True, kw_only=True):
    file: Path | None = None


class ProjectWorkspaceConfig(_Section, frozen=True, kw_only=True):
    mode: Literal["shared", "worktree"] | None = None


class ProjectConfig(_Section, frozen=True, kw_only=True):
    """One project's overrides (issue 27); an absent key inherits the global one."""

    trigger_label: str | None = None
    authorized_actors: list[str] = []  # added to the global list
    harness: str | None = None  # a name from `harnesses:` ("default": `harness:`)
    extra_args: list[str] = []  # after the harness's own extraArgs
    env: ProjectEnvConfig = msgspec.field(default_factory=ProjectEnvConfig)
    workspace: ProjectWorkspaceConfig = msgspec.field(default_factory=ProjectWorkspaceConfig)
    session_per_pr: bool | None = None
    reactions: bool | None = None

    def _cross_keys(self) -> None:
        if self.trigger_label is not None and not self.trigger_label.strip():
            raise ValueError("triggerLabel must not be empty")


class Config(_Section, frozen=True, kw_only=True):
    state_dir: Path | None = None
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    host: HostConfig = msgspec.field(default_factory=HostConfig)
    tracker: TrackerName = "local"
    # Several trackers read side by side (each with its own cursor); when given, it is
    # the list read, and `tracker` (if set) must be one of them.
    trackers: list[TrackerName] = []
    github: GitHubConfig = msgspec.field(default_factory=GitHubConfig)
    jira: JiraConfig = msgspec.field(default_factory=JiraConfig)
    authorized_actors: list[str] = []
    harness: HarnessConfig = msgspec.field(default_factory=HarnessConfig)
    routing: RoutingConfig = msgspec.field(default_factory=RoutingConfig)
    polling: PollingConfig = msgspec.field(default_factory=PollingConfig)
    delivery: DeliveryConfig = msgspec.field(default_factory=DeliveryConfig)
    webhook: WebhookConfig = msgspec.field(default_factory=WebhookConfig)
    env: EnvConfig = msgspec.field(default_factory=EnvConfig)
    event_log: EventLogConfig = msgspec.field(default_factory=EventLogConfig)
    sessions: SessionsConfig = msgspec.field(default_factory=SessionsConfig)
    workspace: WorkspaceConfig = msgspec.field(default_factory=WorkspaceConfig)
    services: ServicesConfig = msgspec.field(default_factory=ServicesConfig)
    attention: AttentionConfig = msgspec.field(default_factory=AttentionConfig)
    notify: NotifyConfig = msgspec.field(default_factory=NotifyConfig)
    api: ApiConfig = msgspec.field(default_factory=ApiConfig)
    # issue 27: named harness configurations a project or a label picks, and
    # per-project overrides ("OWNER/REPO" or a local project name).
    harnesses: Annotated[dict[str, HarnessConfig], Rule(_harness_names)] = {}
    projects: Annotated[dict[str, ProjectConfig], Rule(_project_names)] = {}

    def _cross_keys(self) -> None:
        if len(set(self.trackers)) != len(self.trackers):
            raise ValueError("trackers lists a tracker twice")
        if self.trackers and self.tracker != "local" and self.tracker not in self.trackers:
            raise ValueError(f"tracker {self.tracker} is not one of trackers {self.trackers}")
        active = self.active_trackers()
        if "github" in active and not self.github.repositories:
            raise ValueError("tracker github needs at least one github.repositories entry")
        if "jira" in active and (self.jira.site is None or not self.jira.projects):
            raise ValueError("tracker jira needs jira.site and at least one jira.projects key")
        # issue 10: the daemon's credentials never reach an agent, even when asked.
        credentials = (
            self.github.token_env,
            self.webhook.secret_env,
            self.jira.token_env,
            self.jira.email_env,
            self.jira.webhook_secret_env,
            self.api.token_env,
        )
        named = [("harness", self.harness)]
        named += [(f"harnesses.{n}", h) for n, h in self.harnesses.items()]
        for key, harness in named:
            for name in harness.pass_env:
                if name in credentials:
                    raise ValueError(
                        f"{key}.passEnv: {shown(name)} is a credential of the daemon "
                        "(github.tokenEnv / webhook.secretEnv / jira.*Env / api.tokenEnv) and "
                        "never reaches an agent"
                    )
                if name in (self.notify.slack_url_env, self.notify.webhook_secret_env):
                    raise ValueError(
                        f"{key}.passEnv: {shown(name)} is a credential of the daemon "
                        "(notify.slackUrlEnv / notify.webhookSecretEnv) and never reaches an agent"
                    )
        for project, settings in self.projects.items():
            self._check_project(project, settings)

    def active_trackers(self) -> list[str]:
        """The trackers the poller reads: `trackers` when given, else `tracker`."""
        return list(self.trackers) if self.trackers else [self.tracker]

    def _check_project(self, project: str, settings: ProjectConfig) -> None:
        key = f"projects.{project}"
        known = {DEFAULT_HARNESS, *self.harnesses}
        if settings.harness is not None and settings.harness not in known:
            from .validation import did_you_mean

            raise ValueError(
                f"{key}.harness: no harness {settings.harness!r} in harnesses"
                + did_you_mean(settings.harness, known)
            )
        watched = {r.lower() for r in self.github.repositories}
        github = "github" in self.active_trackers()
        if "/" in project and github and project.lower() not in watched:
            raise ValueError(f"{key}: {project} is not one of github.repositories")
        mode = settings.workspace.mode or self.workspace.mode
        if mode == "worktree" and project not in self.workspace.repositories:
            raise ValueError(
                f"{key}.workspace.mode: worktree needs a workspace.repositories entry for {project}"
            )

    def project_settings(self, project: str) -> ProjectConfig | None:
        """A project's entry; an `OWNER/REPO` matches whatever its case (as GitHub)."""
        found = self.projects.get(project)
        if found is None and "/" in project:
            folded = project.lower()
            for name, settings in self.projects.items():
                if name.lower() == folded:
                    return settings
        return found

    def harness_named(self, name: str) -> HarnessConfig:
        """The harness configuration of a name (`default`: `harness:`). A named one with
        no cwd of its own starts where `harness:` does."""
        if name == DEFAULT_HARNESS or name not in self.harnesses:
            return self.harness
        named = self.harnesses[name]
        if named.cwd is None and not named.cwd_by_project:
            named = msgspec.structs.replace(
                named, cwd=self.harness.cwd, cwd_by_project=self.harness.cwd_by_project
            )
        return named

    def project_harness(self, project: str) -> str:
        """The harness name a project picks (`default` unless `projects.P.harness`)."""
        settings = self.project_settings(project)
        return settings.harness if settings and settings.harness else DEFAULT_HARNESS

    def trigger_label_for(self, project: str) -> str:
        settings = self.project_settings(project)
        if settings is not None and settings.trigger_label is not None:
            return settings.trigger_label
        return self.github.trigger_label

    def harness_label_names(self, project: str, labels: list[str]) -> list[str]:
        """Harness names picked by labels `<triggerLabel>:<name>` on an item, in label
        order (`the-loop:codex`); names not configured are left out."""
        prefix = self.trigger_label_for(project) + ":"
        known = {DEFAULT_HARNESS, *self.harnesses}
        picked = [label[len(prefix) :] for label in labels if label.startswith(prefix)]
        return [name for name in picked if name in known]

    def for_project(self, project: str, harness: str | None = None) -> "Config":
        """The config as one project's sessions see it: its overrides applied, the
        harness `harness` (else the project's choice) in `harness:`, the authorized
        actors the global list plus the project's. A whole new (validated) Config."""
        settings = self.project_settings(project)
        name = harness or self.project_harness(project)
        chosen = self.harness_named(name)
        if settings is None:
            if chosen is self.harness:
                return self
            return msgspec.structs.replace(self, harness=chosen)
        replace = msgspec.structs.replace
        if settings.extra_args:
            chosen = replace(chosen, extra_args=[*chosen.extra_args, *settings.extra_args])
        actors = [*self.authorized_actors]
        actors += [a for a in settings.authorized_actors if a not in actors]
        github = replace(
            self.github,
            trigger_label=self.trigger_label_for(project),
            session_per_pr=(
                settings.session_per_pr
                if settings.session_per_pr is not None
                else self.github.session_per_pr
            ),
            reactions=settings.reactions
            if settings.reactions is not None
            else self.github.reactions,
        )
        env = self.env if settings.env.file is None else replace(self.env, file=settings.env.file)
        workspace = self.workspace
        if settings.workspace.mode is not None:
            workspace = replace(workspace, mode=settings.workspace.mode)
        return replace(
            self,
            harness=chosen,
            authorized_actors=actors,
            github=github,
            env=env,
            workspace=workspace,
        )

    def project_names(self) -> list[str]:
        """Every project the config names: github.repositories, then projects: keys."""
        github = "github" in self.active_trackers()
        names = list(self.github.repositories) if github else []
        return names + [p for p in self.projects if p not in names]

    def max_attempts(self) -> int:
        """delivery.maxAttempts, else its alias polling.maxRetries, else 3."""
        return self.delivery.max_attempts or self.polling.max_retries or 3

    def effective_state_dir(self) -> Path:
        return self.state_dir if self.state_dir is not None else paths.user_state_dir()

    def event_log_path(self) -> Path:
        if self.event_log.path is not None:
            return self.event_log.path
        return self.effective_state_dir() / "events.jsonl"

    def workspace_root(self) -> Path:
        root = self.workspace.root
        return root if root is not None else self.effective_state_dir() / "worktrees"

    def cwd_for_project(self, project: str) -> Path:
        """Where a session of this project starts: the per-project override, else `cwd`,
        else the home directory."""
        if project in self.harness.cwd_by_project:
            return self.harness.cwd_by_project[project]
        return self.harness.cwd if self.harness.cwd is not None else Path.home()


def validate(data: Any, where: Path, base: Path | None = None) -> Config:
    """A Config from parsed YAML, or ConfigError with one line per problem, each naming
    `where` (the file) and the key path. Relative paths are anchored at `base`."""
    ready, problems = check(Config, data, base)
    if not problems:
        try:
            return msgspec.convert(ready, Config, strict=True)
        except msgspec.ValidationError as exc:
            problems = [describe(exc)]
    raise ConfigError([f"{where}: {line}" for line in problems])


def dump(obj: msgspec.Struct) -> dict[str, Any]:
    """A config (or section) as YAML/JSON-ready data under its camelCase keys."""
    data: dict[str, Any] = msgspec.to_builtins(obj, enc_hook=str)
    return data


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and where it came from (`path` None: embedded defaults)."""

    config: Config
    path: Path | None
    origin: str  # "--config", "$THE_LOOP_CONFIG", "./.the-loop/config.yaml", "user", "defaults"
    # Set when the file is invalid now and `config` is its last valid version (status).
    problem: str = ""


def find_config(explicit: str | None) -> tuple[Path | None, str]:
    """The search order: --config, $THE_LOOP_CONFIG, ./.the-loop/config.yaml, user dir.

    An explicitly named file (flag or variable) must exist; the two implicit places
    are used only when present.
    """
    if explicit:
        return Path(os.path.expanduser(explicit)), "--config"
    env = os.environ.get(paths.CONFIG_ENV)
    if env:
        return Path(os.path.expanduser(env)), f"${paths.CONFIG_ENV}"
    if paths.LOCAL_CONFIG.is_file():
        return paths.LOCAL_CONFIG.resolve(), "./" + str(paths.LOCAL_CONFIG)
    user = paths.user_config_file()
    if user.is_file():
        return user, "user config dir"
    return None, "defaults"


def load_config(explicit: str | None = None) -> LoadedConfig:
    """Find, read and validate the config; raise ConfigError with one line per problem."""
    path, origin = find_config(explicit)
    if path is None:
        return LoadedConfig(Config(), None, origin)
    return LoadedConfig(load_file(path), path, origin)


def load_config_or_last_valid(explicit: str | None = None) -> LoadedConfig:
    """`load_config`, or, when the file is invalid now, the version of it last
    validated here, with the problem noted (`status` shows what the daemons run while
    the file is broken). Without such a version the ConfigError stands."""
    try:
        return load_config(explicit)
    except ConfigError as exc:
        path, origin = find_config(explicit)
        if path is None:
            raise
        from . import config_cache

        config = config_cache.last_valid(path, Config)
        if config is None:
            raise
        problem = exc.problems[0] if exc.problems else str(exc)
        return LoadedConfig(config, path, origin, problem=problem)


def load_file(path: Path) -> Config:
    """Read and validate one config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: config file not found"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a config file"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    from . import config_cache

    want = config_cache.key(path, text)  # before validating: what this code validated
    config = config_cache.cached(path, Config, want)
    if config is None:
        config = parse_text(text, path)
        config_cache.keep(path, config, want)
    return config


def parse_text(text: str, path: Path) -> Config:
    """Validate YAML text; `path` is named in every error line."""
    import yaml  # only when there is a file to read

    from .yamlload import load_yaml

    try:
        data = load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(str(exc.problem or exc).split())
        raise ConfigError([f"{where}: YAML syntax error: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: YAML error: {' '.join(str(exc).split())}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of keys, not a list or value"])
    return validate(data, path, path.parent)


SECRET_HINTS = ("token", "secret", "password", "passwd", "apikey", "api-key", "api_key", "key=")


def _names_secret(flag: str) -> bool:
    return flag.startswith("-") and any(h.rstrip("=") in flag.lower() for h in SECRET_HINTS)


def redact_args(args: list[str]) -> list[str]:
    """Hide the values of arguments whose flag names a secret, in both spellings:
    `--api-key=VALUE` and `--api-key VALUE`."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        flag, sep, _ = arg.partition("=")
        if hide_next and not arg.startswith("-"):
            out.append("<redacted>")
        elif sep and _names_secret(flag):
            out.append(f"{flag}=<redacted>")
        else:
            out.append(arg)
        hide_next = not sep and _names_secret(arg)
    return out


def effective(loaded: LoadedConfig) -> dict[str, Any]:
    """The effective config as YAML-ready data: defaults filled, paths resolved, secrets
    redacted. Environment variable NAMES are shown with whether they are set; values never.
    """
    cfg = loaded.config
    data = dump(cfg)
    data["stateDir"] = _absolute(cfg.effective_state_dir())
    data["eventLog"]["path"] = _absolute(cfg.event_log_path())
    data["delivery"]["maxAttempts"] = cfg.max_attempts()
    data["host"]["name"] = cfg.host.effective_name()
    data["workspace"]["root"] = _absolute(cfg.workspace_root())
    data["workspace"]["repositories"] = {
        k: _absolute(v) for k, v in cfg.workspace.repositories.items()
    }
    if cfg.env.file is not None:
        data["env"]["file"] = _absolute(cfg.env.file)
    harness = data["harness"]
    harness["cwdByProject"] = {k: _absolute(v) for k, v in cfg.harness.cwd_by_project.items()}
    if cfg.harness.state_dir is not None:
        harness["stateDir"] = _absolute(cfg.harness.state_dir)
    for key in ("extraArgs", "argv", "resumeArgv"):
        if harness.get(key) is not None:
            harness[key] = redact_args(harness[key])
    harness["cwd"] = _absolute(cfg.harness.cwd if cfg.harness.cwd is not None else Path.home())
    if cfg.harness.adapter == "generic" and cfg.harness.argv is None:
        fresh, resume = cfg.harness.generic_argv()
        harness["argv"], harness["resumeArgv"] = fresh, resume
    for name, named in data["harnesses"].items():
        for key in ("extraArgs", "argv", "resumeArgv"):
            if named.get(key) is not None:
                named[key] = redact_args(named[key])
        state_dir = cfg.harnesses[name].state_dir
        if state_dir is not None:
            named["stateDir"] = _absolute(state_dir)
    data["projects"] = {name: project_settings(cfg, name) for name in cfg.project_names()}
    data["github"]["tokenEnv"] = _env_state(cfg.github.token_env)
    data["webhook"]["secretEnv"] = _env_state(cfg.webhook.secret_env)
    data["jira"]["tokenEnv"] = _env_state(cfg.jira.token_env)
    data["jira"]["webhookSecretEnv"] = _env_state(cfg.jira.webhook_secret_env)
    if cfg.jira.email_env is not None:
        data["jira"]["emailEnv"] = _env_state(cfg.jira.email_env)
    data["api"]["tokenEnv"] = _env_state(cfg.api.token_env)
    if cfg.store.password_env is not None:
        data["store"]["passwordEnv"] = _env_state(cfg.store.password_env)
    return data


def project_settings(cfg: Config, project: str) -> dict[str, Any]:
    """The settings in force for one project's items (`config check`): its overrides
    over the global keys, the harness it picks, actors global plus its own."""
    eff = cfg.for_project(project)
    harness = eff.harness
    return {
        "triggerLabel": eff.github.trigger_label,
        "authorizedActors": list(eff.authorized_actors),
        "harness": cfg.project_harness(project),
        "harnessLabels": f"{eff.github.trigger_label}:<name>",
        "adapter": harness.adapter,
        "extraArgs": redact_args(list(harness.extra_args)),
        "envFile": _absolute(eff.env.file) if eff.env.file is not None else None,
        "workspaceMode": eff.workspace.mode,
        "sessionPerPr": eff.github.session_per_pr,
        "reactions": eff.github.reactions,
        "overridden": sorted(_overridden(cfg.project_settings(project))),
    }


def _overridden(settings: ProjectConfig | None) -> list[str]:
    """The keys a project's entry sets (camelCase paths)."""
    if settings is None:
        return []
    out: list[str] = []
    for key, value in dump(settings).items():
        if isinstance(value, dict):
            out += [f"{key}.{k}" for k, v in value.items() if v is not None]
        elif value not in (None, []):
            out.append(key)
    return out


def _absolute(path: Path) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _env_state(name: str) -> str:
    return f"{shown(name)} ({'set' if os.environ.get(name) else 'not set'})"
