"""The YAML config: pydantic models, the search order and one-line error messages.

Key names are camelCase in YAML (the issue fixes them); fields are snake_case in code.
Unknown keys are errors, so a typo never silently falls back to a default. The models
are strict: a wrong type (`1.5` for a whole number, `"no"` for a flag) is refused, never
coerced. pydantic's ValidationError is translated into one line per problem naming the
file and the camelCase key path.

Importing this module imports pydantic (about 60-100 ms), so only commands that load a
config import it; `the-loop --version` and `--help` never do (see test_main).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, PydanticCustomError

from . import paths
from .errors import ConfigError

_TMUX_SOCKET_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
DEMO_AGENT_MODULE = "loop_cli.demo_agent"


def _check_env_name(value: str) -> str:
    if not value or not (value[0].isalpha() or value[0] == "_"):
        raise ValueError("must be the NAME of an environment variable (not its value)")
    if not all(ch.isalnum() or ch == "_" for ch in value):
        raise ValueError("must be the NAME of an environment variable (not its value)")
    return value


def _to_path(value: Any) -> Any:
    """A non-empty YAML string as a Path with `~` expanded (anchoring happens after)."""
    if isinstance(value, Path):  # defaults and model_copy
        return value
    if not isinstance(value, str) or not value:
        raise PydanticCustomError("path_type", "must be a path")
    return Path(os.path.expanduser(value))


def _program_first(value: list[str] | None) -> list[str] | None:
    if value is not None and (not value or not value[0]):
        raise ValueError("must start with the program to run")
    return value


ConfigPath = Annotated[Path, BeforeValidator(_to_path)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]  # a variable NAME, never a value
Argv = Annotated[list[str], AfterValidator(_program_first)]


class _Section(BaseModel):
    """Shared rules: camelCase keys only, unknown keys refused, immutable, strict types."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        frozen=True,
        strict=True,
        validate_default=True,
    )


class GitHubConfig(_Section):
    repositories: list[str] = Field(default_factory=list)
    token_env: EnvName = "GITHUB_TOKEN"  # noqa: S105 (a variable NAME)
    api_url: str = "https://api.github.com"
    trigger_label: str = "the-loop"
    # A pull request that links to no issue gets a session of its own only when true.
    session_per_pr: bool = False
    # React on the triggering comment (eyes: delivered; rocket: in the conversation;
    # confused + one comment: given up), so the commenter sees it arrived.
    reactions: bool = True

    @field_validator("repositories")
    @classmethod
    def _owner_repo(cls, value: list[str]) -> list[str]:
        for repo in value:
            owner, sep, name = repo.partition("/")
            if not sep or not owner or not name or "/" in name:
                raise ValueError(f"{repo!r} is not OWNER/REPO")
        return value


class HarnessConfig(_Section):
    adapter: Literal["claude-code", "codex", "generic"] = "generic"
    binary: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    argv: Argv | None = None
    resume_argv: Argv | None = None
    cwd: ConfigPath | None = None
    # Per-project working directory: "OWNER/REPO" (github) or "PROJECT" (local) -> path.
    cwd_by_project: dict[str, ConfigPath] = Field(default_factory=dict)
    # How long a freshly started or resumed harness must stay up to count as started: a
    # harness that dies sooner (bad flag, unknown conversation) is caught, and a failed
    # resume falls back to a fresh conversation. Raise it for a harness slow to fail.
    survival_seconds: float = Field(default=1.0, ge=0, le=60, allow_inf_nan=False)
    # issue 10: names an agent may see beyond the allowlist (see docs/security.md).
    pass_env: list[EnvName] = Field(default_factory=list)
    # Issue 11: where claude-code / codex keep their own files (CLAUDE_CONFIG_DIR /
    # CODEX_HOME, handed to the harness when set), and how long a paste may take to show
    # up there before it is reported `dispatch.unconfirmed`.
    state_dir: ConfigPath | None = None
    receipt_seconds: float = Field(default=10.0, gt=0, le=300, allow_inf_nan=False)

    @model_validator(mode="after")
    def _fits_adapter(self) -> HarnessConfig:
        if self.adapter == "generic":
            if self.binary is not None:
                raise ValueError("binary is for claude-code and codex; generic uses argv")
            if self.state_dir is not None:
                raise ValueError("stateDir is for claude-code and codex")
            if self.argv is None and self.resume_argv is not None:
                raise ValueError("resumeArgv needs argv")
        elif self.argv is not None or self.resume_argv is not None:
            raise ValueError(f"argv and resumeArgv are for the generic adapter, not {self.adapter}")
        return self

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


class RoutingConfig(_Section):
    runner: Literal["tmux"] = "tmux"
    tmux_socket: str | None = None
    # The longest one dispatch waits for its work item's lock (another dispatch, a
    # restart or a stop holding it) before the attempt fails (transient) and the inbox
    # retries it later; short, so a busy item never holds a drain worker for long.
    dispatch_timeout_seconds: float = Field(default=10.0, gt=0, allow_inf_nan=False)

    @field_validator("tmux_socket")
    @classmethod
    def _socket_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or not set(value) <= _TMUX_SOCKET_CHARS):
            raise ValueError("must be a tmux -L socket name: letters, digits, '.', '_', '-'")
        return value


class PollingConfig(_Section):
    interval_seconds: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    # Kept as an alias of delivery.maxAttempts (which wins when both are given).
    max_retries: int | None = Field(default=None, ge=1)


class DeliveryConfig(_Section):
    """How the inbox retries: transient faults back off until a time horizon; definite
    failures count against an attempt budget."""

    max_attempts: int | None = Field(default=None, ge=1)
    give_up_after_seconds: float = Field(default=86400.0, gt=0, allow_inf_nan=False)
    backoff_seconds: float = Field(default=1.0, gt=0, le=3600, allow_inf_nan=False)
    max_backoff_seconds: float = Field(default=60.0, gt=0, le=86400, allow_inf_nan=False)
    concurrency: int = Field(default=4, ge=1, le=64)
    lease_seconds: float = Field(default=60.0, ge=5, le=3600, allow_inf_nan=False)

    @model_validator(mode="after")
    def _backoff_order(self) -> DeliveryConfig:
        if self.max_backoff_seconds < self.backoff_seconds:
            raise ValueError("maxBackoffSeconds must be at least backoffSeconds")
        return self


class WebhookConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=1, le=65535)
    secret_env: EnvName = "THE_LOOP_WEBHOOK_SECRET"  # noqa: S105 (a variable NAME)
    max_body_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)
    # issue 10: receiver limits against slow and half-open connections (docs/security.md).
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=300, allow_inf_nan=False)
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=600, allow_inf_nan=False)
    keep_alive_seconds: float = Field(default=5.0, ge=1, le=300, allow_inf_nan=False)
    max_connections: int = Field(default=2048, ge=1, le=65536)


class EnvConfig(_Section):
    file: ConfigPath | None = None


class EventLogConfig(_Section):
    path: ConfigPath | None = None
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=4096)
    backups: int = Field(default=5, ge=0)


class WorkspaceConfig(_Section):
    """Where agents work: one shared cwd, or one git worktree per item (docs/workspaces.md)."""

    mode: Literal["shared", "worktree"] = "shared"
    # "OWNER/REPO" (github) or "PROJECT" (local) -> the local clone worktrees are made from.
    repositories: dict[str, ConfigPath] = Field(default_factory=dict)
    root: ConfigPath | None = None  # default: <stateDir>/worktrees
    base_ref: str | None = None  # default: the clone's default branch
    fetch: bool = True

    @model_validator(mode="after")
    def _worktree_needs(self) -> WorkspaceConfig:
        if self.mode == "worktree" and not self.repositories:
            raise ValueError("mode worktree needs at least one repositories entry")
        if self.base_ref is not None and (not self.base_ref or self.base_ref.startswith("-")):
            raise ValueError("baseRef must be a branch, tag or commit name")
        return self


class SessionsConfig(_Section):
    kill_harness_on_close: bool = True


class ServicesConfig(_Section):
    poller: bool = True
    webhook: bool = False


class StoreConfig(_Section):
    """Where state lives: absent url, the SQLite file in the state directory; a
    `postgresql://user@host:port/db` url, a database shared by several hosts. The
    password is never written here: `passwordEnv` names the variable holding it."""

    url: str | None = None
    password_env: EnvName | None = None

    @field_validator("url")
    @classmethod
    def _postgresql_only(cls, value: str | None) -> str | None:
        if value is None:
            return value
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
        return value


class HostConfig(_Section):
    """This host's identity in a fleet sharing a PostgreSQL store (unused on SQLite)."""

    name: str | None = None  # default: the machine's hostname
    lease_seconds: float = Field(default=30.0, ge=2, le=3600, allow_inf_nan=False)
    max_sessions: int = Field(default=20, ge=1, le=100000)

    @field_validator("name")
    @classmethod
    def _name_chars(cls, value: str | None) -> str | None:
        if value is not None and (
            not value or "/" in value or not value.isprintable() or len(value) > 100
        ):
            raise ValueError("must be a short printable name without '/'")
        return value

    def effective_name(self) -> str:
        import socket

        return self.name or socket.gethostname()


class Config(_Section):
    state_dir: ConfigPath | None = None
    store: StoreConfig = Field(default_factory=StoreConfig)
    host: HostConfig = Field(default_factory=HostConfig)
    tracker: Literal["local", "github"] = "local"
    github: GitHubConfig = Field(default_factory=GitHubConfig)
    authorized_actors: list[str] = Field(default_factory=list)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    polling: PollingConfig = Field(default_factory=PollingConfig)
    delivery: DeliveryConfig = Field(default_factory=DeliveryConfig)
    webhook: WebhookConfig = Field(default_factory=WebhookConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    event_log: EventLogConfig = Field(default_factory=EventLogConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    services: ServicesConfig = Field(default_factory=ServicesConfig)

    @model_validator(mode="after")
    def _tracker_needs(self) -> Config:
        if self.tracker == "github" and not self.github.repositories:
            raise ValueError("tracker github needs at least one github.repositories entry")
        # issue 10: the daemon's credentials never reach an agent, even when asked.
        for name in self.harness.pass_env:
            if name in (self.github.token_env, self.webhook.secret_env):
                raise ValueError(
                    f"harness.passEnv: {name} is a credential of the daemon "
                    "(github.tokenEnv / webhook.secretEnv) and never reaches an agent"
                )
        return self

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


# -- pydantic's errors as one line each: key path, then what is wrong --------------------

# pydantic error type -> our wording; "{...}" is filled from the error's context.
_WORDING = {
    "extra_forbidden": "unknown key",
    "missing": "required",
    "literal_error": "must be one of {expected}",
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "finite_number": "must be a finite number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping of keys",
    "model_attributes_type": "must be a mapping of keys",
}
# Errors whose message already says enough (and must not echo the value: a tokenEnv
# holding a token would otherwise be printed).
_NO_ECHO = {"extra_forbidden", "missing", "value_error"}


def _key_path(loc: tuple[str | int, ...]) -> tuple[str, bool]:
    """The camelCase key path (`harness.extraArgs[1]`) and whether the problem is with
    a mapping's key rather than its value."""
    parts: list[str | int] = []
    is_key = False
    for part in loc:
        if part == "[key]":  # pydantic's marker after the offending key itself
            is_key = True
            parts.pop()
        else:
            parts.append(part)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + part
    return out, is_key


def _got(value: Any) -> str:
    return "" if isinstance(value, (dict, list)) else f" (got {value!r})"


def _plain(value: Any) -> Any:
    """A bound as written in the docs: `0`, not pydantic's `0.0` for a float field."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _describe(err: ErrorDetails) -> str:
    """One line for one pydantic error: `key.path: what is wrong (got value)`."""
    kind = err["type"]
    wording = _WORDING.get(kind)
    if wording is None:
        message = err["msg"].removeprefix("Value error, ")
    else:
        ctx = {k: _plain(v) for k, v in (err.get("ctx") or {}).items()}
        message = wording.format(**ctx)
    if kind not in _NO_ECHO and "input" in err:
        message += _got(err["input"])
    loc, is_key = _key_path(tuple(err["loc"]))
    if is_key:
        message = f"key {message}"
    if not loc:  # a cross-key rule of the whole file says what it is about itself
        return message if kind == "value_error" else f"(top level): {message}"
    return f"{loc}: {message}"


def validate(data: Any, where: Path) -> Config:
    """A Config from parsed YAML, or ConfigError with one line per problem, each naming
    `where` (the file) and the key path."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err) for err in exc.errors(include_url=False)]
        raise ConfigError([f"{where}: {line}" for line in problems]) from None


def dump(obj: BaseModel) -> dict[str, Any]:
    """A config (or section) as YAML/JSON-ready data under its camelCase keys."""
    return obj.model_dump(mode="json", by_alias=True)


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config and where it came from (`path` None: embedded defaults)."""

    config: Config
    path: Path | None
    origin: str  # "--config", "$THE_LOOP_CONFIG", "./.the-loop/config.yaml", "user", "defaults"


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
    return parse_text(text, path)


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
    return _anchor(validate(data, path), path.parent)


def _anchor(config: Config, base: Path) -> Config:
    """Relative paths in a config file are relative to the file's directory."""

    def fix(p: Path | None) -> Path | None:
        return p if p is None or p.is_absolute() else (base / p)

    harness = config.harness.model_copy(
        update={
            "cwd": fix(config.harness.cwd),
            "state_dir": fix(config.harness.state_dir),
            "cwd_by_project": {k: fix(v) for k, v in config.harness.cwd_by_project.items()},
        }
    )
    workspace = config.workspace.model_copy(
        update={
            "root": fix(config.workspace.root),
            "repositories": {k: fix(v) for k, v in config.workspace.repositories.items()},
        }
    )
    return config.model_copy(
        update={
            "workspace": workspace,
            "state_dir": fix(config.state_dir),
            "harness": harness,
            "env": config.env.model_copy(update={"file": fix(config.env.file)}),
            "event_log": config.event_log.model_copy(update={"path": fix(config.event_log.path)}),
        }
    )


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
    data["stateDir"] = str(cfg.effective_state_dir())
    data["eventLog"]["path"] = str(cfg.event_log_path())
    harness = data["harness"]
    for key in ("extraArgs", "argv", "resumeArgv"):
        if harness.get(key) is not None:
            harness[key] = redact_args(harness[key])
    harness["cwd"] = str(cfg.harness.cwd if cfg.harness.cwd is not None else Path.home())
    if cfg.harness.adapter == "generic" and cfg.harness.argv is None:
        fresh, resume = cfg.harness.generic_argv()
        harness["argv"], harness["resumeArgv"] = fresh, resume
    data["github"]["tokenEnv"] = _env_state(cfg.github.token_env)
    data["webhook"]["secretEnv"] = _env_state(cfg.webhook.secret_env)
    return data


def _env_state(name: str) -> str:
    return f"{name} ({'set' if os.environ.get(name) else 'not set'})"
