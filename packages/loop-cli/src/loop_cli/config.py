"""The YAML config: validated dataclasses, the search order and one-line error messages.

Key names are camelCase in YAML (the issue fixes them); fields are snake_case in code.
Unknown keys are errors, so a typo never silently falls back to a default.

Validation is a small walk over the dataclasses' type hints rather than pydantic: every
command loads the config, and importing pydantic and building its schemas cost about
150 ms of each `the-loop status` (measured with `python -X importtime`). The rules are
the same: types, ranges, fixed choices, unknown keys, and cross-key checks per section.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

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


def _owner_repo(value: list[str]) -> list[str]:
    for repo in value:
        owner, sep, name = repo.partition("/")
        if not sep or not owner or not name or "/" in name:
            raise ValueError(f"{repo!r} is not OWNER/REPO")
    return value


def _program_first(value: list[str] | None) -> list[str] | None:
    if value is not None and (not value or not value[0]):
        raise ValueError("must start with the program to run")
    return value


def _socket_name(value: str | None) -> str | None:
    if value is not None and (not value or not set(value) <= _TMUX_SOCKET_CHARS):
        raise ValueError("must be a tmux -L socket name: letters, digits, '.', '_', '-'")
    return value


@dataclass(frozen=True)
class GitHubConfig:
    repositories: list[str] = field(default_factory=list, metadata={"check": _owner_repo})
    token_env: str = field(
        default="GITHUB_TOKEN", metadata={"check": _check_env_name}
    )  # a variable NAME
    api_url: str = "https://api.github.com"
    trigger_label: str = "the-loop"


@dataclass(frozen=True)
class HarnessConfig:
    adapter: Literal["claude-code", "codex", "generic"] = "generic"
    binary: str | None = None
    extra_args: list[str] = field(default_factory=list)
    argv: list[str] | None = field(default=None, metadata={"check": _program_first})
    resume_argv: list[str] | None = field(default=None, metadata={"check": _program_first})
    cwd: Path | None = None
    # Per-project working directory: "OWNER/REPO" (github) or "PROJECT" (local) -> path.
    cwd_by_project: dict[str, Path] = field(default_factory=dict)

    def check(self) -> None:
        if self.adapter == "generic":
            if self.binary is not None:
                raise ValueError("binary is for claude-code and codex; generic uses argv")
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


@dataclass(frozen=True)
class RoutingConfig:
    runner: Literal["tmux"] = "tmux"
    tmux_socket: str | None = field(default=None, metadata={"check": _socket_name})
    # The longest one dispatch waits for its work item's lock (another dispatch, a
    # restart or a stop holding it) before the event fails and is retried.
    dispatch_timeout_seconds: float = field(default=1800.0, metadata={"gt": 0})


@dataclass(frozen=True)
class PollingConfig:
    interval_seconds: float = field(default=60.0, metadata={"gt": 0})
    max_retries: int = field(default=3, metadata={"ge": 1})


@dataclass(frozen=True)
class WebhookConfig:
    host: str = "127.0.0.1"
    port: int = field(default=8787, metadata={"ge": 1, "le": 65535})
    secret_env: str = field(
        default="THE_LOOP_WEBHOOK_SECRET", metadata={"check": _check_env_name}
    )  # a NAME
    max_body_bytes: int = field(default=25 * 1024 * 1024, metadata={"ge": 1024})


@dataclass(frozen=True)
class EnvConfig:
    file: Path | None = None


@dataclass(frozen=True)
class EventLogConfig:
    path: Path | None = None
    max_bytes: int = field(default=10 * 1024 * 1024, metadata={"ge": 4096})
    backups: int = field(default=5, metadata={"ge": 0})


@dataclass(frozen=True)
class SessionsConfig:
    kill_harness_on_close: bool = True


@dataclass(frozen=True)
class ServicesConfig:
    poller: bool = True
    webhook: bool = False


@dataclass(frozen=True)
class Config:
    state_dir: Path | None = None
    tracker: Literal["local", "github"] = "local"
    github: GitHubConfig = field(default_factory=GitHubConfig)
    authorized_actors: list[str] = field(default_factory=list)
    harness: HarnessConfig = field(default_factory=HarnessConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    polling: PollingConfig = field(default_factory=PollingConfig)
    webhook: WebhookConfig = field(default_factory=WebhookConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    event_log: EventLogConfig = field(default_factory=EventLogConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    services: ServicesConfig = field(default_factory=ServicesConfig)

    def check(self) -> None:
        if self.tracker == "github" and not self.github.repositories:
            raise ValueError("tracker github needs at least one github.repositories entry")

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


# -- validation: a walk over the dataclasses' type hints ---------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class _Problems(list):
    """(key path, message) pairs collected during one validation."""

    def add(self, loc: str, message: str) -> None:
        self.append((loc, message))


_INVALID = object()


def _got(value: Any) -> str:
    return "" if isinstance(value, (dict, list)) else f" (got {value!r})"


def _choices(options: tuple[Any, ...]) -> str:
    quoted = [repr(o) for o in options]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _join(loc: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{loc}[{key}]"
    return f"{loc}.{key}" if loc else key


def _convert(tp: Any, value: Any, loc: str, problems: _Problems) -> Any:
    """`value` as type `tp`, or _INVALID after recording why not."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):  # only `X | None` is used
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, loc, problems)
    if origin is Literal:
        if value in args:
            return value
        problems.add(loc, f"must be one of {_choices(args)}{_got(value)}")
        return _INVALID
    if origin is list:
        if not isinstance(value, list):
            problems.add(loc, f"must be a list{_got(value)}")
            return _INVALID
        items = [_convert(args[0], v, _join(loc, i), problems) for i, v in enumerate(value)]
        return _INVALID if _INVALID in items else items
    if origin is dict:
        if not isinstance(value, dict):
            problems.add(loc, f"must be a mapping{_got(value)}")
            return _INVALID
        out = {str(k): _convert(args[1], v, _join(loc, str(k)), problems) for k, v in value.items()}
        return _INVALID if _INVALID in out.values() else out
    if is_dataclass(tp):
        return _build(tp, value, loc, problems)
    return _scalar(tp, value, loc, problems)


_SCALARS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
    Path: (lambda v: isinstance(v, str) and v != "", "a path"),
}


def _scalar(tp: Any, value: Any, loc: str, problems: _Problems) -> Any:
    accepts, what = _SCALARS[tp]
    if not accepts(value):
        problems.add(loc, f"must be {what}{_got(value)}")
        return _INVALID
    if tp is Path:
        return Path(os.path.expanduser(value))
    return float(value) if tp is float else value


def _bounds(value: Any, rules: dict[str, Any]) -> str | None:
    if "gt" in rules and not value > rules["gt"]:
        return f"must be greater than {rules['gt']}"
    if "ge" in rules and not value >= rules["ge"]:
        return f"must be at least {rules['ge']}"
    if "le" in rules and not value <= rules["le"]:
        return f"must be at most {rules['le']}"
    return None


def _build(cls: Any, data: Any, loc: str, problems: _Problems) -> Any:
    """One section: known camelCase keys converted and checked, unknown keys refused,
    then the section's own cross-key `check` when every key was valid."""
    if not isinstance(data, dict):
        problems.add(loc or "(top level)", f"must be a mapping of keys{_got(data)}")
        return _INVALID
    hints = get_type_hints(cls)
    known = {camel(f.name): f for f in fields(cls)}
    before = len(problems)
    values: dict[str, Any] = {}
    for key, spec in known.items():
        if key not in data:
            continue
        where = _join(loc, key)
        value = _convert(hints[spec.name], data[key], where, problems)
        if value is _INVALID:
            continue
        why = _bounds(value, dict(spec.metadata)) if value is not None else None
        if why is None and "check" in spec.metadata:
            try:
                spec.metadata["check"](value)
            except ValueError as err:
                why = str(err)
        if why is not None:
            problems.add(where, why + ("" if "check" in spec.metadata else _got(data[key])))
            continue
        values[spec.name] = value
    for key in data:
        if key not in known:
            problems.add(_join(loc, str(key)), "unknown key")
    if len(problems) > before:
        return _INVALID
    obj = cls(**values)
    if hasattr(obj, "check"):
        try:
            obj.check()
        except ValueError as err:
            problems.add(loc, str(err))
            return _INVALID
    return obj


def validate(data: Any, where: Path) -> Config:
    """A Config from parsed YAML, or ConfigError with one line per problem, each naming
    `where` (the file) and the key path."""
    problems = _Problems()
    config = _build(Config, data, "", problems)
    if config is _INVALID:
        raise ConfigError(
            [f"{where}: {loc}: {msg}" if loc else f"{where}: {msg}" for loc, msg in problems]
        )
    return config


def dump(obj: Any) -> Any:
    """A config (or section) as YAML/JSON-ready data under its camelCase keys."""
    if is_dataclass(obj):
        return {camel(f.name): dump(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {k: dump(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [dump(v) for v in obj]
    return str(obj) if isinstance(obj, Path) else obj


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
    return _anchor(validate(data, path), path.parent)


def _anchor(config: Config, base: Path) -> Config:
    """Relative paths in a config file are relative to the file's directory."""

    def fix(p: Path | None) -> Path | None:
        return p if p is None or p.is_absolute() else (base / p)

    harness = replace(
        config.harness,
        cwd=fix(config.harness.cwd),
        cwd_by_project={k: fix(v) for k, v in config.harness.cwd_by_project.items()},
    )
    return replace(
        config,
        state_dir=fix(config.state_dir),
        harness=harness,
        env=replace(config.env, file=fix(config.env.file)),
        event_log=replace(config.event_log, path=fix(config.event_log.path)),
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
