"""`the-loop harness check`: what the configured harness needs for unattended use.

Returns findings (never prints): the program and its `--version`, the versions the
adapter was tested with, the state dir it reads, and the first-run settings
(docs/harnesses.md) that are missing. No secret is read beyond a comparison: an API
key's approval is reported as yes/no, never shown.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import Config
from .harness_state import HarnessState, harness_state

__all__ = ["Finding", "HarnessReport", "check_harness"]


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str


@dataclass
class HarnessReport:
    adapter: str
    program: str
    version: str
    tested: list[str]
    state_dir: str
    state_source: str = ""  # how the state dir was found (harness_state.py)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)


def _version(program: str) -> str:
    found = shutil.which(os.path.expanduser(program))
    if found is None:
        return ""
    try:
        done = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return " ".join(done.stdout.split())[:80]


def _cwds(config: Config) -> list[Path]:
    folders = [config.harness.cwd or Path.home(), *config.harness.cwd_by_project.values()]
    return [Path(os.path.realpath(f)) for f in folders]


def _claude(config: Config, where: HarnessState, report: HarnessReport) -> None:
    path = where.config_file or where.path / ".claude.json"
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        report.findings.append(Finding(False, f"{path}: missing or not JSON (first-run screens)"))
        return
    report.findings.append(
        Finding(bool(data.get("hasCompletedOnboarding")), f"{path}: hasCompletedOnboarding")
    )
    found = data.get("projects")
    projects: dict[str, Any] = found if isinstance(found, dict) else {}
    for folder in _cwds(config):
        entry = projects.get(str(folder))
        trusted = isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True
        report.findings.append(Finding(trusted, f"folder trusted: {folder}"))
    key = os.environ.get("ANTHROPIC_API_KEY")
    if key:
        answers = data.get("customApiKeyResponses")
        approved = isinstance(answers, dict) and key[-20:] in (answers.get("approved") or [])
        report.findings.append(
            Finding(approved, "ANTHROPIC_API_KEY approved (customApiKeyResponses)")
        )


def _codex(config: Config, where: HarnessState, report: HarnessReport) -> None:
    path = where.path / "config.toml"
    try:
        import tomllib  # type: ignore[import-not-found]  # 3.11+; 3.10 reads no TOML

        data: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        report.findings.append(Finding(True, f"{path}: not read (needs Python 3.11+)"))
        return
    except (OSError, ValueError):
        report.findings.append(Finding(False, f"{path}: missing or not TOML"))
        return
    projects = data.get("projects") if isinstance(data.get("projects"), dict) else {}
    for folder in _cwds(config):
        entry = projects.get(str(folder))
        trusted = isinstance(entry, dict) and entry.get("trust_level") == "trusted"
        report.findings.append(Finding(trusted, f"folder trusted: {folder}"))
    features = data.get("features") if isinstance(data.get("features"), dict) else {}
    report.findings.append(
        Finding(features.get("daemon_auto_start") is False, "features.daemon_auto_start = false")
    )


def check_harness(config: Config, adapter: Any) -> HarnessReport:
    """Findings for the configured harness (`adapter` from `runtime.build_adapter`)."""
    name = config.harness.adapter
    if name == "generic":
        program = config.harness.generic_argv()[0][0]
        report = HarnessReport(name, program, _version(program) or "?", [], "")
        report.findings.append(
            Finding(
                True, "generic adapter: no readiness checks and no receipts (pastes unconfirmed)"
            )
        )
        return report
    program = config.harness.resolved_binary()
    where = harness_state(config)
    assert where is not None  # claude-code or codex
    state = Path(adapter.state_dir)
    version = _version(program)
    report = HarnessReport(
        name, program, version, list(adapter.tested_versions), str(state), where.source
    )
    # The adapter must read where the launched harness writes (docs/harnesses.md).
    if where.mismatch is not None:
        report.findings.append(Finding(False, where.mismatch))
    report.findings.append(
        Finding(bool(version), f"program found and answers --version: {program}")
    )
    if version:
        tested = any(v in version for v in adapter.tested_versions)
        report.findings.append(
            Finding(tested, f"version {version} is one the adapter was tested with")
        )
    (_claude if name == "claude-code" else _codex)(config, where, report)
    return report
