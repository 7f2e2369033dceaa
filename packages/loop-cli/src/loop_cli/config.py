"""The YAML config: validated models, the search order and one-line error messages.

Key names are camelCase in YAML (the issue fixes them); fields are snake_case in code.
Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from . import paths
from .errors import ConfigError

_TMUX_SOCKET_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
DEMO_AGENT_MODULE = "loop_cli.demo_agent"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, frozen=True, validate_default=True
    )


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return Path(os.path.expanduser(value))
    return value


class GitHubConfig(_Model):
    repositories: list[str] = Field(default_factory=list)
    token_env: str = "GITHUB_TOKEN"  # noqa: S105 (a variable NAME)
    api_url: str = "https://api.github.com"
    trigger_label: str = "the-loop"

    @field_validator("repositories")
    @classmethod
    def _owner_repo(cls, value: list[str]) -> list[str]:
        for repo in value:
            owner, sep, name = repo.partition("/")
            if not sep or not owner or not name or "/" in name:
                raise ValueError(f"{repo!r} is not OWNER/REPO")
        return value

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        return _check_env_name(value)


def _check_env_name(value: str) -> str:
    if not value or not (value[0].isalpha() or value[0] == "_"):
        raise ValueError("must be the NAME of an environment variable (not its value)")
    if not all(ch.isalnum() or ch == "_" for ch in value):
        raise ValueError("must be the NAME of an environment variable (not its value)")
    return value


class HarnessConfig(_Model):
    adapter: Literal["claude-code", "codex", "generic"] = "generic"
    binary: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    argv: list[str] | None = None
    resume_argv: list[str] | None = None
    cwd: Path | None = None
    # Per-project working directory: "OWNER/REPO" (github) or "PROJECT" (local) -> path.
    cwd_by_project: dict[str, Path] = Field(default_factory=dict)

    _paths = field_validator("cwd", mode="before")(_expand)

    @field_validator("cwd_by_project", mode="before")
    @classmethod
    def _expand_map(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _expand(v) for k, v in value.items()}
        return value

    @field_validator("argv", "resume_argv")
    @classmethod
    def _non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("must start with the program to run")
        return value

    @model_validator(mode="after")
    def _fits_adapter(self) -> HarnessConfig:
        if self.adapter == "generic":
            if self.binary is not None:
                raise ValueError("binary is for claude-code and codex; generic uses argv")
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


class RoutingConfig(_Model):
    runner: Literal["tmux"] = "tmux"
    tmux_socket: str | None = None
    dispatch_timeout_seconds: float = Field(default=1800, gt=0)

    @field_validator("tmux_socket")
    @classmethod
    def _socket(cls, value: str | None) -> str | None:
        if value is not None and (not value or not set(value) <= _TMUX_SOCKET_CHARS):
            raise ValueError("must be a tmux -L socket name: letters, digits, '.', '_', '-'")
        return value


class PollingConfig(_Model):
    interval_seconds: float = Field(default=60, gt=0)
    max_retries: int = Field(default=3, ge=1)


class WebhookConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=1, le=65535)
    secret_env: str = "THE_LOOP_WEBHOOK_SECRET"  # noqa: S105 (a variable NAME)
    max_body_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)

    _env = field_validator("secret_env")(lambda cls, v: _check_env_name(v))


class EnvConfig(_Model):
    file: Path | None = None

    _paths = field_validator("file", mode="before")(_expand)


class EventLogConfig(_Model):
    path: Path | None = None
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=4096)
    backups: int = Field(default=5, ge=0)

    _paths = field_validator("path", mode="before")(_expand)


class SessionsConfig(_Model):
    kill_harness_on_close: bool = True


class ServicesConfig(_Model):
    poller: bool = True
    webhook: bool = False


class Config(_Model):
    state_dir: Path | None = None
    tracker: Literal["local", "github"] = "local"
    github: GitHubConfig = Field(default_factory=GitHubConfig)
    authorized_actors: list[str] = Field(default_factory=list)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    polling: PollingConfig = Field(default_factory=PollingConfig)
    webhook: WebhookConfig = Field(default_factory=WebhookConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    event_log: EventLogConfig = Field(default_factory=EventLogConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    services: ServicesConfig = Field(default_factory=ServicesConfig)

    _paths = field_validator("state_dir", mode="before")(_expand)

    @model_validator(mode="after")
    def _tracker_needs(self) -> Config:
        if self.tracker == "github" and not self.github.repositories:
            raise ValueError("tracker github needs at least one github.repositories entry")
        return self

    def effective_state_dir(self) -> Path:
        return self.state_dir if self.state_dir is not None else paths.user_state_dir()

    def event_log_path(self) -> Path:
        if self.event_log.path is not None:
            return self.event_log.path
        return self.effective_state_dir() / "events.jsonl"

    def cwd_for_project(self, project: str) -> Path:
        """Where a session of this project starts: the per-project override, else `cwd`,
        else the home directory."""
        if project in self.harness.cwd_by_project:
            return self.harness.cwd_by_project[project]
        return self.harness.cwd if self.harness.cwd is not None else Path.home()


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
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError([f"{where}: YAML syntax error: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: YAML error: {exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of keys, not a list or value"])
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([f"{path}: {line}" for line in _problems(exc)]) from None
    return _anchor(config, path.parent)


def _anchor(config: Config, base: Path) -> Config:
    """Relative paths in a config file are relative to the file's directory."""

    def fix(p: Path | None) -> Path | None:
        return p if p is None or p.is_absolute() else (base / p)

    harness = config.harness.model_copy(
        update={
            "cwd": fix(config.harness.cwd),
            "cwd_by_project": {k: fix(v) for k, v in config.harness.cwd_by_project.items()},
        }
    )
    return config.model_copy(
        update={
            "state_dir": fix(config.state_dir),
            "harness": harness,
            "env": config.env.model_copy(update={"file": fix(config.env.file)}),
            "event_log": config.event_log.model_copy(update={"path": fix(config.event_log.path)}),
        }
    )


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _problems(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        # Drop validator-internal location parts such as "function-after[...]".
        loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p and "(" not in p))
        kind = err["type"]
        if kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            message = f"must be one of {expected} (got {err.get('input')!r})"
        elif kind == "missing":
            message = "required"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if (
                kind not in {"value_error"}
                and "input" in err
                and not isinstance(err["input"], (dict, list))
            ):
                message += f" (got {err['input']!r})"
        lines.append(f"{_key_path(loc)}: {message}" if loc else message)
    return lines


SECRET_HINTS = ("token", "secret", "password", "passwd", "apikey", "api-key", "api_key", "key=")


def redact_arg(arg: str) -> str:
    """Hide the value of a `--flag=value` argument whose flag names a secret."""
    flag, sep, _ = arg.partition("=")
    if sep and any(h.rstrip("=") in flag.lower() for h in SECRET_HINTS):
        return f"{flag}=<redacted>"
    return arg


def effective(loaded: LoadedConfig) -> dict[str, Any]:
    """The effective config as YAML-ready data: defaults filled, paths resolved, secrets
    redacted. Environment variable NAMES are shown with whether they are set; values never.
    """
    cfg = loaded.config
    data = cfg.model_dump(mode="json", by_alias=True)
    data["stateDir"] = str(cfg.effective_state_dir())
    data["eventLog"]["path"] = str(cfg.event_log_path())
    harness = data["harness"]
    for key in ("extraArgs", "argv", "resumeArgv"):
        if harness.get(key) is not None:
            harness[key] = [redact_arg(a) for a in harness[key]]
    harness["cwd"] = str(cfg.harness.cwd if cfg.harness.cwd is not None else Path.home())
    if cfg.harness.adapter == "generic" and cfg.harness.argv is None:
        fresh, resume = cfg.harness.generic_argv()
        harness["argv"], harness["resumeArgv"] = fresh, resume
    data["github"]["tokenEnv"] = _env_state(cfg.github.token_env)
    data["webhook"]["secretEnv"] = _env_state(cfg.webhook.secret_env)
    return data


def _env_state(name: str) -> str:
    return f"{name} ({'set' if os.environ.get(name) else 'not set'})"
