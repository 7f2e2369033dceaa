"""Issue 22, conventions: one output flag, global options anywhere, exit codes, version,
completion, "did you mean", and help that reads well. Each point runs through the
installed console script at least once (`the-loop` next to this interpreter)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from loop_cli.main import cli

DOCS = Path(__file__).resolve().parents[3] / "docs"
SCRIPT = Path(sys.executable).with_name("the-loop")
# Commands that print no result of their own: they exec, serve, or print a script.
NO_RESULT = {
    ("sessions", "attach"),
    ("poll", "start"),
    ("gh-webhook", "start"),
    ("completion",),
    ("demo",),
}


def leaves(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            if cmd.invoke_without_command:  # `poll --once` is a command of its own
                out.append(((*path, name), cmd))
            out += leaves(cmd, (*path, name))
        else:
            out.append(((*path, name), cmd))
    return out


def the_loop(
    *args: str, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), "the console script is installed next to the interpreter"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, **kw)


def script_env(config: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    if config is not None:
        env["THE_LOOP_CONFIG"] = str(config)
    return env


# 1. One output flag -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "cmd"),
    [(p, c) for p, c in leaves() if p not in NO_RESULT],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else "",
)
def test_every_command_that_prints_a_result_takes_output(
    path: tuple[str, ...], cmd: click.Command
) -> None:
    options = {opt: p for p in cmd.params if isinstance(p, click.Option) for opt in p.opts}
    assert {"-o", "--output", "--format"} <= set(options), path
    param = options["-o"]
    assert param is options["--format"] is options["--output"]
    assert isinstance(param.type, click.Choice)
    assert param.type.choices[:2] == ("text", "json") or list(param.type.choices[:2]) == [
        "text",
        "json",
    ]


def test_format_stays_an_alias_and_table_means_text(run_cli, loop_config) -> None:
    run_cli("item", "open", "one")
    texts = {
        args: run_cli("item", "list", *args).output
        for args in ((), ("-o", "text"), ("--format", "table"), ("--output=text",))
    }
    assert len(set(texts.values())) == 1
    assert "local:loop#1" in texts[()]
    assert (
        json.loads(run_cli("item", "list", "--format", "json").output)[0]["ref"] == "local:loop#1"
    )
    assert json.loads(run_cli("item", "list", "-o", "json").output)[0]["ref"] == "local:loop#1"


def test_a_root_output_is_the_default_of_the_command(run_cli, loop_config) -> None:
    run_cli("item", "open", "one")
    assert json.loads(run_cli("-o", "json", "item", "list").output)[0]["title"] == "one"
    refused = run_cli("-o", "slack", "item", "list")
    assert refused.exit_code == 2
    assert "this command has no -o slack" in refused.output


DATA_MAPS = {"effective", "detail", "fingerprints", "tables", "names.sessions"}


def _keys(value: Any, out: set[str], parent: str = "") -> set[str]:
    """Every key at any depth, except below maps keyed by data (config keys, event
    details, env fingerprints: `names[].sessions` maps a fingerprint to a count)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            out.add(key)
            if key not in DATA_MAPS and f"{parent}.{key}" not in DATA_MAPS:
                _keys(inner, out, key)
    elif isinstance(value, list):
        for inner in value:
            _keys(inner, out, parent)
    return out


def _doc_sections() -> dict[str, str]:
    text = (DOCS / "output.md").read_text(encoding="utf-8")
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_docs_list_every_json_field_a_command_emits(run_cli, loop_config) -> None:
    runs = {
        "the-loop item open": ("item", "open", "Docs", "--body", "b"),
        "the-loop item comment": ("item", "comment", "local:loop#1", "hi"),
        "the-loop item list": ("item", "list"),
        "the-loop item show": ("item", "show", "local:loop#1"),
        "the-loop poll --once": ("poll", "--once"),
        "the-loop sessions list": ("sessions", "list"),
        "the-loop inbox list": ("inbox", "list", "--state", "done"),
        "the-loop status": ("status",),
        "the-loop config check": ("config", "check"),
        "the-loop config check KEY": ("config", "check", "routing.tmuxSocket"),
        "the-loop version": ("version",),
        "the-loop harness check": ("harness", "check"),
        "the-loop env doctor": ("env", "doctor"),
        "the-loop events": ("events", "--limit", "20"),
        "the-loop sessions reset": ("sessions", "reset", "local:loop#1", "--dry-run"),
        "the-loop inbox retry": ("inbox", "retry", "--given-up"),
    }
    sections = _doc_sections()
    sections["the-loop config check KEY"] = sections["the-loop config check"]
    sections["the-loop sessions start"] = sections["the-loop sessions start / stop"]
    sections["the-loop sessions stop"] = sections["the-loop sessions start / stop"]
    runs["the-loop sessions stop"] = ("sessions", "stop", "local:loop#1")
    runs["the-loop sessions start"] = ("sessions", "start", "local:loop#1")
    runs["the-loop sessions say"] = ("sessions", "say", "local:loop#1", "hi", "--wait", "0.1")
    runs["the-loop sessions peek"] = ("sessions", "peek", "local:loop#1", "-n", "5")
    runs["the-loop item close"] = ("item", "close", "local:loop#1")  # last: no session after
    seen: dict[str, set[str]] = {}
    for section, args in runs.items():
        result = run_cli(*args, "-o", "json")
        assert result.exit_code in (0, 1), (args, result.output)
        data = json.loads(result.stdout)
        seen[section] = _keys(data, set())
        assert seen[section], f"{section} emitted no fields"
        undocumented = [k for k in sorted(seen[section]) if f"`{k}`" not in sections[section]]
        assert not undocumented, f"docs/output.md, section {section!r}, lacks {undocumented}"
    assert "activity" in seen["the-loop item show"]
    assert "processed" in seen["the-loop poll --once"]
    assert "seq" in seen["the-loop inbox list"]  # the scenario had rows to show


# 2. Global options anywhere ---------------------------------------------------------


def test_config_works_after_the_command_through_the_script(write_config, tmp_path: Path) -> None:
    config = write_config(use_env=False)
    for args in (
        ("status", "--config", str(config), "-o", "json"),
        ("sessions", "list", "--config", str(config), "-o", "json"),
        ("item", "list", f"--config={config}"),
    ):
        done = the_loop(*args, env=script_env())
        assert done.returncode in (0, 1), (args, done.stderr)
        assert "No such option" not in done.stderr
    status = json.loads(the_loop("status", "--config", str(config), "-o", "json").stdout)
    assert status["config"]["path"] == str(config)
    bad = tmp_path / "bad.yaml"
    bad.write_text("bogus: 1\n")
    refused = the_loop("sessions", "list", "--config", str(bad), env=script_env())
    assert refused.returncode == 2
    assert "bogus: unknown key" in refused.stderr


def test_log_level_before_the_command_is_the_daemons_default() -> None:
    from loop_cli.commands._common import log_options

    @click.command()
    @log_options
    def daemon(log_level: str, log_format: str) -> None:
        click.echo(log_level)

    @click.group()
    @click.option("--log-level", default=None)
    @click.pass_context
    def root(ctx: click.Context, log_level: str | None) -> None:
        ctx.obj = {"log_level": log_level}

    root.add_command(daemon)
    from click.testing import CliRunner

    assert CliRunner().invoke(root, ["--log-level", "debug", "daemon"]).output == "debug\n"
    assert CliRunner().invoke(root, ["daemon", "--log-level", "error"]).output == "error\n"
    assert CliRunner().invoke(root, ["daemon"]).output == "info\n"


# 3. Exit codes ------------------------------------------------------------------------


def test_retry_and_drop_of_a_missing_row_both_exit_2(run_cli, loop_config) -> None:
    run_cli("item", "open", "x")
    retry, drop = run_cli("inbox", "retry", "99"), run_cli("inbox", "drop", "99", "--reason", "r")
    assert (retry.exit_code, drop.exit_code) == (2, 2)
    assert "no pending or given-up inbox row 99" in retry.output
    assert "re-armed" not in retry.output  # a refusal alone is not announced as a success


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_end_a_command_with_the_shells_codes(write_config, signum: int, code: int) -> None:
    config = write_config(use_env=False)
    proc = subprocess.Popen(
        [str(SCRIPT), "--config", str(config), "events", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(),
        # As from an interactive shell: a background job of a non-interactive one (CI
        # started with `&`) inherits SIGINT ignored, and an ignored SIGINT stays ignored.
        preexec_fn=_sigint_default,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline()  # the header: it runs now
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err


# 4. Version ---------------------------------------------------------------------------


def test_version_names_every_part_through_the_script() -> None:
    from loop_cli import __version__

    data = json.loads(the_loop("version", "-o", "json").stdout)
    assert set(data) == {
        "loop-cli",
        "loop-dispatch",
        "loop-tmux",
        "loop-envstate",
        "python",
        "tmux",
    }
    assert data["loop-cli"] == __version__
    assert data["python"] == ".".join(map(str, sys.version_info[:3]))
    tmux = subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.split()[-1]
    assert data["tmux"] == tmux
    text = the_loop("--version").stdout
    assert text.splitlines()[0] == f"the-loop {__version__}"
    assert f"  tmux           {tmux}" in text
    assert "  loop-envstate  " in text
    assert the_loop("version").stdout == text


# 5. Completion --------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_clicks_script(shell: str) -> None:
    done = the_loop("completion", shell)
    assert done.returncode == 0
    assert f"_THE_LOOP_COMPLETE={shell}_complete" in done.stdout.replace('"', "").replace("'", "")


def _complete(words: str, config: Path) -> list[str]:
    env = script_env(config)
    env.update(
        _THE_LOOP_COMPLETE="bash_complete",
        COMP_WORDS=words,
        COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    )
    done = the_loop(env=env)
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_completion_offers_commands_refs_and_sessions(run_cli, loop_config) -> None:
    run_cli("item", "open", "one")
    run_cli("item", "open", "two")
    assert run_cli("sessions", "start", "local:loop#2").exit_code == 0
    assert "sessions" in _complete("the-loop ses", loop_config)
    assert _complete("the-loop item show ", loop_config) == ["local:loop#1", "local:loop#2"]
    names = _complete("the-loop sessions attach ", loop_config)
    assert "local:loop#2" in names
    assert "local:loop#1" not in names
    assert any(n.startswith("loop-") for n in names)  # the tmux names too


# 6. Did you mean ------------------------------------------------------------------------


def test_a_mistyped_command_names_the_nearest() -> None:
    done = the_loop("sesions", "list")
    assert done.returncode == 2
    assert "No such command 'sesions'. Did you mean 'sessions'?" in done.stderr
    assert "Did you mean 'list'?" in the_loop("sessions", "lst").stderr


def test_a_bare_number_suggests_a_local_ref(run_cli, loop_config) -> None:
    result = run_cli("item", "show", "1")
    assert result.exit_code == 2
    assert "did you mean 'local:loop#1'?" in result.output


# 7. Help reads well -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "cmd"), leaves(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else ""
)
def test_every_command_help_has_an_example_and_described_options(
    path: tuple[str, ...], cmd: click.Command
) -> None:
    ctx = click.Context(cmd, info_name=" ".join(("the-loop", *path)))
    text = cmd.get_help(ctx)
    assert f"Example: the-loop {' '.join(path)}" in " ".join(text.split()), path
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{' '.join(path)} {param.opts[0]} has no description"
    assert not re.search(r"docs/|packages/|\bsrc/|\.md\b", text), path


def test_group_listings_never_cut_a_description() -> None:
    groups = [cli] + [c for _, c in leaves() if isinstance(c, click.Group)]
    ctx = click.Context(cli)
    for group in {
        id(g): g
        for g in groups + [cli.get_command(ctx, n) for n in cli.list_commands(ctx)]
        if isinstance(g, click.Group)
    }.values():
        for width in (60, 80):
            text = group.get_help(click.Context(group, info_name="the-loop", terminal_width=width))
            listing = text.split("Commands:", 1)[-1]
            assert "..." not in listing, (group.name, width)
            assert not re.search(r"docs/|packages/|\.md\b", text)


def test_root_help_through_the_script_points_to_no_repository_path() -> None:
    done = the_loop("--help")
    assert done.returncode == 0
    assert "Example: the-loop" in done.stdout
    assert not re.search(r"docs/|packages/|\.md\b", done.stdout)


def test_completion_offers_config_keys_and_check_shows_one(run_cli, loop_config) -> None:
    keys = _complete("the-loop config check routing.", loop_config)
    assert "routing.tmuxSocket" in keys
    assert all(k.startswith("routing.") for k in keys)
    shown = run_cli("config", "check", "routing.tmuxSocket")
    assert shown.exit_code == 0
    assert shown.output.strip() == yaml_value(loop_config, "routing", "tmuxSocket")
    wrong = run_cli("config", "check", "routing.tmux_socket")
    assert wrong.exit_code == 2
    assert "did you mean 'routing.tmuxSocket'?" in wrong.output


def yaml_value(path: Path, *keys: str) -> str:
    import yaml

    value: Any = yaml.safe_load(path.read_text())
    for key in keys:
        value = value[key]
    return str(value)


def test_output_flag_through_the_script(write_config) -> None:
    config = write_config(use_env=False)
    env = script_env(config)
    assert the_loop("item", "open", "via the script", env=env).returncode == 0
    outputs = [
        the_loop(*args, env=env).stdout
        for args in (
            ("item", "list", "-o", "json"),
            ("item", "list", "--output=json"),
            ("item", "list", "--format", "json"),
            ("-o", "json", "item", "list"),
        )
    ]
    assert len(set(outputs)) == 1
    assert json.loads(outputs[0])[0]["title"] == "via the script"
    opened = json.loads(the_loop("item", "open", "second", "-o", "json", env=env).stdout)
    assert opened == {"ref": "local:loop#2"}
    refused = the_loop("item", "list", "-o", "slack", env=env)
    assert refused.returncode == 2
    assert "'slack' is not one of 'text', 'json'." in refused.stderr


def test_docs_list_the_fields_of_the_env_file_commands(
    run_cli, write_config, tmux_socket: str, isolated: Path
) -> None:
    """`env doctor` and `sessions restart` with an env file, and `inbox drop` on a row."""
    env_file = isolated / "agent.env"
    env_file.write_text("TOKEN=one\n")
    (isolated / "work").mkdir(exist_ok=True)
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "env": {"file": str(env_file)},
        }
    )
    run_cli("item", "open", "one")
    assert run_cli("sessions", "start", "local:loop#1").exit_code == 0
    env_file.write_text("TOKEN=two\n")  # rotated: the session is stale
    run_cli("item", "comment", "local:loop#1", "queued")
    sections = _doc_sections()
    runs = {
        "the-loop env doctor": ("env", "doctor"),
        "the-loop sessions restart": ("sessions", "restart", "--all", "--dry-run"),
        "the-loop status": ("status",),
    }
    for section, args in runs.items():
        result = run_cli(*args, "-o", "json")
        assert result.exit_code in (0, 1), (args, result.output)
        seen = _keys(json.loads(result.stdout), set())
        assert seen
        undocumented = [k for k in sorted(seen) if f"`{k}`" not in sections[section]]
        assert not undocumented, f"docs/output.md, section {section!r}, lacks {undocumented}"
    assert "names" in _keys(json.loads(run_cli("env", "doctor", "-o", "json").stdout), set())
