"""Config: validation messages, the search order, defaults, and `config check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loop_cli.config import Config, load_config, parse_text
from loop_cli.errors import ConfigError


def _errors(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_text(text, tmp_path / "c.yaml")
    return info.value.problems


def test_unknown_key_named_with_its_path(tmp_path: Path) -> None:
    problems = _errors("harness:\n  adapter: generic\n  argvv: [x]\n", tmp_path)
    assert problems == [f"{tmp_path / 'c.yaml'}: harness.argvv: unknown key; did you mean 'argv'?"]


def test_snake_case_spelling_is_an_unknown_key(tmp_path: Path) -> None:
    problems = _errors("state_dir: /x\n", tmp_path)
    assert problems == [f"{tmp_path / 'c.yaml'}: state_dir: unknown key; did you mean 'stateDir'?"]


def test_near_miss_keys_name_the_key_meant(tmp_path: Path) -> None:
    problems = _errors("routing:\n  tmux_socket: x\nharness:\n  adaptor: codex\n", tmp_path)
    assert problems == [
        f"{tmp_path / 'c.yaml'}: harness.adaptor: unknown key; did you mean 'adapter'?",
        f"{tmp_path / 'c.yaml'}: routing.tmux_socket: unknown key; did you mean 'tmuxSocket'?",
    ]
    far = _errors("routing:\n  frobnicate: x\n", tmp_path)
    assert far == [f"{tmp_path / 'c.yaml'}: routing.frobnicate: unknown key"]


def test_every_problem_gets_its_own_line(tmp_path: Path) -> None:
    problems = _errors(
        "tracker: youtrack\npolling: {intervalSeconds: 0}\nwebhook: {port: 70000}\n"
        "github: {tokenEnv: 'ghp_abc def', repositories: [nope]}\n"
        "routing: {tmuxSocket: 'a/b'}\n",
        tmp_path,
    )
    text = "\n".join(problems)
    assert len(problems) == 6
    assert "tracker: must be one of 'local', 'github' or 'jira' (got 'youtrack')" in text
    assert "polling.intervalSeconds: must be greater than 0 (got 0)" in text
    assert "webhook.port:" in text
    assert "github.tokenEnv: must be the NAME of an environment variable" in text
    assert "github.repositories: 'nope' is not OWNER/REPO" in text
    assert "routing.tmuxSocket:" in text
    assert all(p.startswith(str(tmp_path / "c.yaml") + ": ") for p in problems)


def test_wrong_types_are_named_with_their_path(tmp_path: Path) -> None:
    problems = _errors(
        "routing: [a]\npolling: {maxRetries: 1.5, intervalSeconds: yes}\n"
        "harness: {extraArgs: [a, 3], cwdByProject: {o/r: 7}}\n"
        "sessions: {killHarnessOnClose: 'no'}\nauthorizedActors: alice\n",
        tmp_path,
    )
    where = str(tmp_path / "c.yaml")
    assert problems == [
        f"{where}: authorizedActors: must be a list (got 'alice')",
        f"{where}: harness.extraArgs[1]: must be a string (got 3)",
        f"{where}: harness.cwdByProject.o/r: must be a path (got 7)",
        f"{where}: routing: must be a mapping of keys",
        f"{where}: polling.intervalSeconds: must be a number (got True)",
        f"{where}: polling.maxRetries: must be a whole number (got 1.5)",
        f"{where}: sessions.killHarnessOnClose: must be true or false (got 'no')",
    ]


def test_numbers_in_strings_and_whole_floats_are_not_coerced(tmp_path: Path) -> None:
    problems = _errors("webhook: {port: '8080'}\npolling: {maxRetries: 2.0}\n", tmp_path)
    where = str(tmp_path / "c.yaml")
    assert problems == [
        f"{where}: polling.maxRetries: must be a whole number (got 2.0)",
        f"{where}: webhook.port: must be a whole number (got '8080')",
    ]


def test_non_finite_durations_are_refused(tmp_path: Path) -> None:
    problems = _errors(
        "polling: {intervalSeconds: .nan}\nrouting: {dispatchTimeoutSeconds: .inf}\n", tmp_path
    )
    where = str(tmp_path / "c.yaml")
    assert problems == [
        f"{where}: routing.dispatchTimeoutSeconds: must be a finite number (got inf)",
        f"{where}: polling.intervalSeconds: must be a finite number (got nan)",
    ]


def test_survival_seconds_is_bounded(tmp_path: Path) -> None:
    where = str(tmp_path / "c.yaml")
    assert _errors("harness: {survivalSeconds: 61}\n", tmp_path) == [
        f"{where}: harness.survivalSeconds: must be at most 60 (got 61)"
    ]
    assert _errors("harness: {survivalSeconds: -1}\n", tmp_path) == [
        f"{where}: harness.survivalSeconds: must be at least 0 (got -1)"
    ]
    cfg = parse_text("harness: {survivalSeconds: 2.5}\n", tmp_path / "c.yaml")
    assert cfg.harness.survival_seconds == 2.5
    assert parse_text("tracker: local\n", tmp_path / "c.yaml").harness.survival_seconds == 1.0


def test_sections_keys_and_paths_of_the_wrong_shape(tmp_path: Path) -> None:
    problems = _errors(
        "polling:\nharness: {cwd: '', cwdByProject: {7: /x}}\neventLog: {path: [a]}\n",
        tmp_path,
    )
    where = str(tmp_path / "c.yaml")
    assert problems == [
        f"{where}: harness.cwd: must be a path (got '')",
        f"{where}: harness.cwdByProject: key must be a string (got 7)",
        f"{where}: polling: must be a mapping of keys (got None)",
        f"{where}: eventLog.path: must be a path",
    ]


def test_a_token_given_as_tokenenv_is_never_echoed(tmp_path: Path) -> None:
    (problem,) = _errors("github: {tokenEnv: ghp_Secret-Value-123}\n", tmp_path)
    assert problem.endswith(
        "github.tokenEnv: must be the NAME of an environment variable (not its value)"
    )
    assert "ghp_Secret" not in problem


def test_config_is_immutable(tmp_path: Path) -> None:
    cfg = parse_text("polling: {maxRetries: 2}\n", tmp_path / "c.yaml")
    with pytest.raises(AttributeError, match="immutable"):
        cfg.polling.max_retries = 5  # type: ignore[misc]
    assert cfg.polling.max_retries == 2


def test_valid_values_are_typed(tmp_path: Path) -> None:
    cfg = parse_text(
        "polling: {intervalSeconds: 5, maxRetries: 2}\nrouting: {dispatchTimeoutSeconds: 30}\n",
        tmp_path / "c.yaml",
    )
    assert cfg.polling.interval_seconds == 5.0
    assert isinstance(cfg.polling.interval_seconds, float)
    assert cfg.polling.max_retries == 2
    assert cfg.routing.dispatch_timeout_seconds == 30.0


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    problems = _errors("tracker: local\nharness:\n  argv: [a, b\n", tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith(f"{tmp_path / 'c.yaml'}:4:")
    assert "YAML syntax error" in problems[0]


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert "top level must be a mapping" in _errors("- a\n- b\n", tmp_path)[0]


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    assert parse_text("", tmp_path / "c.yaml") == Config()


def test_camel_case_keys_and_path_handling(tmp_path: Path, isolated: Path) -> None:
    cfg = parse_text(
        "stateDir: ~/st\nharness: {cwd: rel/work, cwdByProject: {o/r: ~/o}}\n"
        "eventLog: {path: logs/e.jsonl}\nenv: {file: ~/.env}\n"
        "sessions: {killHarnessOnClose: false}\nservices: {webhook: true}\n",
        tmp_path / "c.yaml",
    )
    home = Path.home()
    assert cfg.state_dir == home / "st"
    assert cfg.harness.cwd == tmp_path / "rel" / "work"  # relative to the file
    assert cfg.cwd_for_project("o/r") == home / "o"
    assert cfg.cwd_for_project("other") == tmp_path / "rel" / "work"
    assert cfg.event_log_path() == tmp_path / "logs" / "e.jsonl"
    assert cfg.env.file == home / ".env"
    assert cfg.sessions.kill_harness_on_close is False
    assert cfg.services.webhook is True


def test_defaults_without_any_config(isolated: Path) -> None:
    loaded = load_config(None)
    assert loaded.path is None
    assert loaded.origin == "defaults"
    cfg = loaded.config
    assert cfg.tracker == "local"
    assert cfg.effective_state_dir() == isolated / "home" / ".local" / "state" / "the-loop"
    assert cfg.event_log_path() == cfg.effective_state_dir() / "events.jsonl"
    fresh, resume = cfg.harness.generic_argv()
    assert fresh[1:3] == ["-m", "loop_cli.demo_agent"]
    assert "--session-id" in fresh
    assert resume is not None
    assert "--resume" in resume


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_search_order(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = _write(isolated / "home" / ".config" / "the-loop" / "config.yaml", "tracker: local\n")
    assert load_config(None).path == user
    local = _write(Path(".the-loop/config.yaml"), "tracker: local\n")
    assert load_config(None).path == local.resolve()
    env = _write(isolated / "env.yaml", "tracker: local\n")
    monkeypatch.setenv("THE_LOOP_CONFIG", str(env))
    assert load_config(None).path == env
    flag = _write(isolated / "flag.yaml", "tracker: local\n")
    loaded = load_config(str(flag))
    assert (loaded.path, loaded.origin) == (flag, "--config")


def test_named_config_must_exist(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(str(isolated / "missing.yaml"))
    monkeypatch.setenv("THE_LOOP_CONFIG", str(isolated / "gone.yaml"))
    with pytest.raises(ConfigError, match=r"gone\.yaml: config file not found"):
        load_config(None)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(str(isolated))


def test_cli_config_error_is_one_line_per_problem_exit_2(run_cli, isolated: Path) -> None:
    bad = _write(isolated / "bad.yaml", "tracker: youtrack\nbogus: 1\n")
    result = run_cli("--config", str(bad), "config", "check")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"Error: {bad}: tracker: must be one of 'local', 'github' or 'jira' (got 'youtrack')",
        f"Error: {bad}: bogus: unknown key",
    ]
    assert "Traceback" not in result.output


def test_config_check_shows_effective_config_without_secret_values(
    run_cli, write_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_DISTINCTIVE_TOKEN_VALUE_123"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "whsec_DISTINCTIVE_456")
    write_config(
        {
            "tracker": "github",
            "github": {"repositories": ["o/r"]},
            "harness": {
                "adapter": "claude-code",
                "extraArgs": ["--api-key=sk-SECRET789", "-v", "--token", "tok-SPACED321", "x"],
            },
        }
    )
    result = run_cli("config", "check")
    assert result.exit_code == 0, result.output
    for secret in (token, "whsec_DISTINCTIVE_456", "sk-SECRET789", "tok-SPACED321"):
        assert secret not in result.output
    assert "tokenEnv: GITHUB_TOKEN (set)" in result.output
    assert "--api-key=<redacted>" in result.output
    data = json.loads(run_cli("config", "check", "--format", "json").output)
    assert data["effective"]["github"]["repositories"] == ["o/r"]
    assert data["effective"]["harness"]["extraArgs"] == [
        "--api-key=<redacted>",
        "-v",
        "--token",
        "<redacted>",
        "x",
    ]
    assert data["origin"] == "$THE_LOOP_CONFIG"


def test_config_check_on_defaults(run_cli) -> None:
    result = run_cli("config", "check")
    assert result.exit_code == 0
    assert "none found: embedded defaults" in result.output
    assert "loop_cli.demo_agent" in result.output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("harness: {adapter: generic, binary: x}", "harness: binary is for claude-code and codex"),
        (
            "harness: {adapter: codex, argv: [a]}",
            "harness: argv and resumeArgv are for the generic",
        ),
        ("harness: {resumeArgv: [a]}", "harness: resumeArgv needs argv"),
        ("harness: {argv: []}", "harness.argv: must start with the program to run"),
        ("tracker: github", "tracker github needs at least one github.repositories entry"),
    ],
)
def test_cross_key_rules(tmp_path: Path, text: str, expected: str) -> None:
    (problem,) = _errors(text, tmp_path)
    assert problem.startswith(f"{tmp_path / 'c.yaml'}: {expected}")


def test_delivery_section_rules(tmp_path: Path) -> None:
    where = str(tmp_path / "c.yaml")
    assert _errors("delivery: {concurrency: 0, leaseSeconds: 1, maxAttempts: 0}\n", tmp_path) == [
        f"{where}: delivery.maxAttempts: must be at least 1 (got 0)",
        f"{where}: delivery.concurrency: must be at least 1 (got 0)",
        f"{where}: delivery.leaseSeconds: must be at least 5 (got 1)",
    ]
    assert _errors("delivery: {backoffSeconds: 10, maxBackoffSeconds: 5}\n", tmp_path) == [
        f"{where}: delivery: maxBackoffSeconds must be at least backoffSeconds"
    ]
    cfg = parse_text("delivery: {maxAttempts: 7}\npolling: {maxRetries: 2}\n", Path(where))
    assert cfg.max_attempts() == 7
    assert parse_text("polling: {maxRetries: 2}\n", Path(where)).max_attempts() == 2
    assert Config().max_attempts() == 3


@pytest.mark.parametrize(
    "data",
    [
        {"webhook": {"port": "8080"}},
        {"polling": {"maxRetries": 2.0}},
        {"polling": {"intervalSeconds": True}},
        {"sessions": {"killHarnessOnClose": "no"}},
        {"tracker": "jira"},
        {"bogus": 1},
        {"harness": {"extraArgs": ["a", 3]}},
        {"delivery": {"concurrency": 65}},
        {"routing": ["a"]},
    ],
)
def test_msgspec_strict_mode_refuses_what_the_checker_refuses(data: dict[str, object]) -> None:
    """The walker words the problems; msgspec's strict mode must agree they are problems."""
    import msgspec

    from loop_cli.validation import check

    assert check(Config, data, None)[1]
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(data, Config, strict=True)


def test_github_ci_retries_is_validated(tmp_path: Path) -> None:
    """Issue 27: the CI retry budget is a whole number from 1 to 100, default 3."""
    where = str(tmp_path / "c.yaml")
    assert _errors("github: {ciRetries: 0}\n", tmp_path) == [
        f"{where}: github.ciRetries: must be at least 1 (got 0)"
    ]
    (problem,) = _errors("github: {ciRetries: 2.5}\n", tmp_path)
    assert problem.startswith(f"{where}: github.ciRetries:")
    assert Config().github.ci_retries == 3
    assert parse_text("github: {ciRetries: 7}\n", Path(where)).github.ci_retries == 7
