"""What an agent's process may hold, and where the daemon's credentials were found.

Agents are untrusted (ticket text steers them), so the tmux server the-loop starts is
given only an allowlisted environment plus the operator's `harness.passEnv` names; the
env file reaches a pane through the launcher. The daemon's own credentials (the values
named by `github.tokenEnv` and `webhook.secretEnv`) are never among them, and
`exposures` looks for them where an agent could read them: tmux's global environment
and each pane's process. Values never leave this module: fingerprints only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loop_envstate import fingerprint, process_environ

if TYPE_CHECKING:
    from loop_tmux import Pane

    from .config import Config

__all__ = [
    "Exposure",
    "Stray",
    "credential_names",
    "exposure_summary",
    "exposures",
    "kept_names",
    "server_environment",
    "stray_names",
    "stray_summary",
]


SLACK_URL_VAR = "THE_LOOP_SLACK_WEBHOOK_URL"
"""`status --post` reads its Slack URL (a bearer capability) from here."""
OWN_NAMES = ("THE_LOOP_CONFIG", "THE_LOOP_DEMO_AGENT_DIR")
"""the-loop's own non-secret names an agent may inherit from the daemon."""
HARNESS_STATE_VARS = {"claude-code": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME"}
"""Where each harness keeps its files, handed to it for `harness.stateDir`."""


def credential_names(config: Config) -> tuple[str, ...]:
    """The daemon's credential variables (their NAMES), in a stable order."""
    names = (
        config.github.token_env,
        config.webhook.secret_env,
        config.api.token_env,
        SLACK_URL_VAR,
    )
    notify = (config.notify.slack_url_env, config.notify.webhook_secret_env)
    jira: tuple[str | None, ...] = ()
    if "jira" in config.active_trackers():
        # Not jira.emailEnv: an address is no secret, and the operator's own is often
        # in a pane under another name (its value would be reported as a leak).
        jira = (config.jira.token_env, config.jira.webhook_secret_env)
    return tuple(dict.fromkeys([*names, *(n for n in (*notify, *jira) if n)]))


def kept_names(config: Config) -> tuple[str, ...]:
    """The inherited names a pane keeps (`--keep`): the allowlist (its prefixes as
    `PREFIX*`), what tmux sets in a pane, the-loop's own non-secret names and
    `harness.passEnv`, never a daemon credential."""
    from loop_tmux.environment import ALLOWED_NAMES, ALLOWED_PREFIXES, PANE_NAMES

    names = [
        *sorted(ALLOWED_NAMES),
        *(f"{prefix}*" for prefix in ALLOWED_PREFIXES),
        *PANE_NAMES,
        *OWN_NAMES,
        *config.harness.pass_env,
    ]
    credentials = set(credential_names(config))
    return tuple(n for n in dict.fromkeys(names) if n not in credentials)


def server_environment(config: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the-loop's tmux server is started with: the allowlist plus
    `harness.passEnv`, never a credential name."""
    from loop_tmux import allowlisted

    extra = [*OWN_NAMES, *config.harness.pass_env]
    env = allowlisted(os.environ if environ is None else environ, extra)
    for name in credential_names(config):
        env.pop(name, None)
    return env


@dataclass(frozen=True)
class Exposure:
    """A daemon credential found where an agent can read it (a fingerprint, never a value)."""

    credential: str  # the config's name for it (e.g. GITHUB_TOKEN)
    found_as: str  # the variable name it was found under
    where: str  # "tmux global environment" or "session loop-x (pid N)"
    fingerprint: str

    def line(self) -> str:
        alias = "" if self.found_as == self.credential else f" as {self.found_as}"
        return (
            f"credential {self.credential}{alias} ({self.fingerprint}) is visible in {self.where}"
        )

    def to_dict(self) -> dict[str, str]:
        return {
            "credential": self.credential,
            "foundAs": self.found_as,
            "where": self.where,
            "fingerprint": self.fingerprint,
        }


def _scan(
    env: Mapping[str, str], where: str, names: tuple[str, ...], daemon: Mapping[str, str]
) -> list[Exposure]:
    """Credentials in `env`: by name, or by value under any other name."""
    found: list[Exposure] = []
    values = {daemon[n]: n for n in names if daemon.get(n)}
    for var, value in sorted(env.items()):
        if var in names and value:
            found.append(Exposure(var, var, where, fingerprint(value)))
        elif value in values:
            found.append(Exposure(values[value], var, where, fingerprint(value)))
    return found


def exposures(
    config: Config,
    tmux_global: Mapping[str, str] | None,
    panes: Iterable[Pane],
    *,
    environ: Mapping[str, str] | None = None,
    reader: Callable[[int], Mapping[str, str] | None] = process_environ,
) -> list[Exposure]:
    """Every place an agent can read a daemon credential (read-only; `panes` is one
    `Tmux.panes()` answer). `environ` is the daemon's own environment (default ours)."""
    names = credential_names(config)
    daemon = os.environ if environ is None else environ
    found: list[Exposure] = []
    if tmux_global is not None:
        found += _scan(tmux_global, "tmux global environment", names, daemon)
    for pane in panes:
        if getattr(pane, "dead", False) or not pane.pid:
            continue
        env = reader(pane.pid)
        if env is not None:
            found += _scan(env, f"session {pane.session} (pid {pane.pid})", names, daemon)
    return found


def exposure_summary(found: list[Exposure]) -> dict[str, Any]:
    """The JSON form `status` and `env doctor` share."""
    return {"count": len(found), "items": [e.to_dict() for e in found]}


@dataclass(frozen=True)
class Stray:
    """A pane whose environment holds names outside what an agent may hold (names only)."""

    where: str  # "session loop-x (pid N)"
    names: tuple[str, ...]

    def line(self) -> str:
        return f"{self.where}: {', '.join(self.names)}"

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "names": list(self.names)}


def allowed_in_pane(config: Config, file_names: Iterable[str] = ()) -> Callable[[str], bool]:
    """Whether a name may be in an agent's environment: the names the launcher keeps
    (allowlist, what tmux sets, `harness.passEnv`), the env file's names, the-loop's
    own `THE_LOOP_*` (never a credential) and the harness's state folder variable."""
    keep = kept_names(config)
    exact = {n for n in keep if not n.endswith("*")} | set(file_names)
    exact |= set(HARNESS_STATE_VARS.values())  # set by the launcher for harness.stateDir
    prefixes = (*(n[:-1] for n in keep if n.endswith("*")), "THE_LOOP_")
    credentials = set(credential_names(config))

    def allowed(name: str) -> bool:
        if name in credentials:
            return False
        return name in exact or name.startswith(prefixes)

    return allowed


def stray_names(
    config: Config,
    panes: Iterable[Pane],
    file_names: Iterable[str] = (),
    *,
    reader: Callable[[int], Mapping[str, str] | None] = process_environ,
) -> list[Stray]:
    """Every live pane's names outside `allowed_in_pane`, whatever they are (not only
    the names the config knows): what a server the-loop did not start leaked in."""
    allowed = allowed_in_pane(config, file_names)
    found: list[Stray] = []
    for pane in panes:
        if getattr(pane, "dead", False) or not pane.pid:
            continue
        env = reader(pane.pid)
        if env is None:
            continue
        names = tuple(sorted(n for n in env if not allowed(n)))
        if names:
            found.append(Stray(f"session {pane.session} (pid {pane.pid})", names))
    return found


def stray_summary(found: list[Stray]) -> dict[str, Any]:
    """The JSON form of `stray_names` (`env doctor`)."""
    return {"count": len(found), "items": [s.to_dict() for s in found]}
