"""Where the launched harness keeps its files (harness_state.py): derived from the
environment the-loop composes for the pane (allowlist + harness.passEnv, then env.file
over it), unless harness.stateDir is set; and `harness check` says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop_cli.config import validate
from loop_cli.harness_state import harness_state


def _config(tmp_path: Path, harness: dict, env_file: str | None = None):
    data: dict = {"harness": harness}
    if env_file is not None:
        path = tmp_path / "agent.env"
        path.write_text(env_file)
        data["env"] = {"file": str(path)}
    return validate(data, tmp_path / "config.yaml", tmp_path)


def test_env_file_home_moves_claude_codes_folder_and_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "daemon-home"))
    agent_home = tmp_path / "agent-home"
    config = _config(tmp_path, {"adapter": "claude-code"}, f"HOME={agent_home}\n")
    state = harness_state(config)
    assert state is not None
    assert (state.path, state.source) == (agent_home / ".claude", "env.file HOME")
    assert state.config_file == agent_home / ".claude.json"
    assert state.mismatch is None


def test_without_an_env_file_the_daemons_home_is_the_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "daemon-home"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "not-passed"))  # not in passEnv
    state = harness_state(_config(tmp_path, {"adapter": "codex"}))
    assert state is not None
    assert (state.path, state.source) == (tmp_path / "daemon-home" / ".codex", "daemon HOME")
    assert state.config_file is None


def test_a_passed_variable_names_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    config = _config(tmp_path, {"adapter": "codex", "passEnv": ["CODEX_HOME"]})
    state = harness_state(config)
    assert state is not None
    assert (state.path, state.source) == (tmp_path / "codex", "harness.passEnv CODEX_HOME")


def test_the_env_files_variable_wins_over_its_home(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        {"adapter": "claude-code"},
        f"HOME={tmp_path / 'h'}\nCLAUDE_CONFIG_DIR={tmp_path / 'c'}\n",
    )
    state = harness_state(config)
    assert state is not None
    assert (state.path, state.source) == (tmp_path / "c", "env.file CLAUDE_CONFIG_DIR")
    assert state.config_file == tmp_path / "c" / ".claude.json"


def test_state_dir_wins_unless_the_env_file_overrides_it_in_the_pane(tmp_path: Path) -> None:
    harness = {"adapter": "claude-code", "stateDir": str(tmp_path / "s")}
    state = harness_state(_config(tmp_path, harness, f"HOME={tmp_path / 'h'}\n"))
    assert state is not None
    assert (state.path, state.source, state.mismatch) == (
        tmp_path / "s",
        "harness.stateDir",
        None,
    )
    clash = harness_state(_config(tmp_path, harness, f"CLAUDE_CONFIG_DIR={tmp_path / 'c'}\n"))
    assert clash is not None
    assert clash.mismatch is not None
    assert "env.file sets CLAUDE_CONFIG_DIR" in clash.mismatch
    assert str(tmp_path / "c") not in clash.mismatch  # the file's value is never shown


def test_the_generic_adapter_has_no_folder(tmp_path: Path) -> None:
    assert harness_state(_config(tmp_path, {"adapter": "generic"})) is None


def test_harness_check_names_the_folder_and_where_it_came_from(
    run_cli, write_config, isolated: Path
) -> None:
    agent_home = isolated / "agent-home"
    env_file = isolated / "agent.env"
    env_file.write_text(f"HOME={agent_home}\n")
    write_config(
        {
            "harness": {"adapter": "claude-code", "binary": "/bin/true"},
            "env": {"file": str(env_file)},
        }
    )
    result = run_cli("harness", "check")
    assert f"state dir: {agent_home / '.claude'} (from env.file HOME)" in result.output
    assert f"{agent_home / '.claude.json'}: missing or not JSON" in result.output
