"""First-run settings for Claude Code and Codex, written for offline, unattended use.

docs/harnesses.md says what an operator sets; this writes exactly that into a fresh
harness home (the demo's, the tests'): onboarding done, the working folders trusted,
the loopback API and its key approved, updates, telemetry and Codex's daemon off.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

__all__ = ["FAKE_KEY_ENV", "harness_env", "prepare_home"]

FAKE_KEY_ENV = "LOOP_FAKE_KEY"  # the env var Codex reads the loopback provider's key from


def prepare_home(kind: str, home: Path, folders: Iterable[Path], model_url: str, key: str) -> None:
    """Write (or extend) the harness's settings in `home` so no dialog stands in the way."""
    home.mkdir(parents=True, exist_ok=True)
    if kind == "claude-code":
        path = home / ".claude.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        data["hasCompletedOnboarding"] = True
        data["customApiKeyResponses"] = {"approved": [key[-20:]], "rejected": []}
        projects = data.setdefault("projects", {})
        for folder in folders:
            projects[str(folder)] = {"hasTrustDialogAccepted": True}
        path.write_text(json.dumps(data), encoding="utf-8")
        return
    path = home / "config.toml"
    if not path.exists():
        path.write_text(
            'model = "fake-model"\nmodel_provider = "loopback"\n'
            "check_for_update_on_startup = false\n\n"
            "[model_providers.loopback]\n"
            f'name = "loopback"\nbase_url = "{model_url}/v1"\n'
            f'env_key = "{FAKE_KEY_ENV}"\nwire_api = "responses"\n\n'
            "[features]\ndaemon_auto_start = false\n",
            encoding="utf-8",
        )
    with path.open("a", encoding="utf-8") as handle:
        for folder in folders:
            handle.write(f'\n[projects."{folder}"]\ntrust_level = "trusted"\n')


def harness_env(kind: str, model_url: str, key: str) -> dict[str, str]:
    """The environment the harness needs to talk to the loopback model API only."""
    if kind == "claude-code":
        return {
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": key,
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
    return {FAKE_KEY_ENV: key}
