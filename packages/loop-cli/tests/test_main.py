"""The root command: lazy loading, --version, and the one-line error model."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from loop_cli import __version__
from loop_cli.errors import OperationalError, UsageError
from loop_cli.lazy import LazyGroup, RootGroup
from loop_cli.main import COMMANDS


def _imported_after(args: list[str]) -> set[str]:
    code = (
        "import sys\nfrom loop_cli.main import cli\n"
        f"try:\n    cli({args!r}, prog_name='the-loop')\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def _entry_imports(args: list[str]) -> tuple[str, set[str]]:
    """What the console script's entry point prints and imports for `args`."""
    code = (
        "import sys\nfrom loop_cli.entry import main\n"
        f"sys.argv = ['the-loop', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout, set(out.stderr.split())


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"]])
def test_entry_point_answers_version_and_help_without_click(args: list[str]) -> None:
    printed, mods = _entry_imports(args)
    assert "click" not in mods
    assert not any(m.startswith(("loop_dispatch", "loop_tmux", "yaml", "msgspec")) for m in mods)
    if args == ["--version"]:
        assert printed.startswith(f"the-loop {__version__}\n")
        for part in ("loop-cli", "loop-dispatch", "loop-tmux", "loop-envstate", "python", "tmux"):
            assert f"  {part} " in printed
    else:
        assert printed.startswith("Usage: the-loop [OPTIONS] COMMAND [ARGS]...")
        for name in COMMANDS:
            assert f"  {name} " in printed


@pytest.mark.parametrize("width", [50, 60, 78, 100, 200])
def test_entry_help_is_clicks_help_at_every_width(width: int) -> None:
    from loop_cli.entry import root_help
    from loop_cli.main import cli

    ctx = click.Context(
        cli, info_name="the-loop", terminal_width=width, help_option_names=["-h", "--help"]
    )
    assert root_help(width) == cli.get_help(ctx) + "\n"


def test_entry_point_hands_commands_to_click(run_cli) -> None:
    code = (
        "import sys\nfrom loop_cli.entry import main\n"
        "sys.argv = ['the-loop', 'frobnicate']\nmain()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert "No such command" in out.stderr


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_fast_paths_import_nothing_heavy(args: list[str]) -> None:
    mods = _imported_after(args)
    for heavy in (
        "yaml",
        "pydantic",
        "msgspec",
        "sqlite3",
        "loop_dispatch",
        "loop_tmux",
        "httpx",
        "starlette",
    ):
        assert heavy not in mods, f"{args} imported {heavy}"
    assert not any(m.startswith("loop_cli.commands.") for m in mods)


def test_status_imports_only_what_it_uses(tmp_path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"stateDir: {tmp_path / 'state'}\nrouting: {{tmuxSocket: loop-test-none}}\n")
    mods = _imported_after(["--config", str(config), "status"])
    assert "yaml" in mods  # it did read the file
    for unused in (
        "httpx",
        "starlette",
        "uvicorn",
        "slack_sdk",
        "loop_cli.github",
        "pydantic",  # no validation library but the config's own (msgspec)
        "pydantic_core",
        "jsonschema",
        "attrs",
        "platformdirs",
        "loop_cli.rotation.restart",
        "loop_dispatch.dispatcher",
        "loop_dispatch.drain",
    ):
        assert unused not in mods, f"status imported {unused}"


def test_version(run_cli) -> None:
    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == f"the-loop {__version__}"
    assert f"  loop-dispatch  {__version__}" in result.output


def test_help_lists_every_installed_command(run_cli) -> None:
    result = run_cli("--help")
    assert result.exit_code == 0
    for name in ("status", "sessions", "item", "poll", "events", "demo", "config"):
        assert f"  {name} " in result.output


def test_pre_registered_names() -> None:
    assert COMMANDS["gh-webhook"][0] == "loop_cli.commands.webhook:gh_webhook"
    assert COMMANDS["env"][0] == "loop_cli.commands.env:env"
    from loop_cli.commands.sessions import LAZY

    assert LAZY["restart"][0] == "loop_cli.commands.restart:restart"


def test_unknown_command_is_usage_error(run_cli) -> None:
    result = run_cli("frobnicate")
    assert result.exit_code == 2
    assert "No such command" in result.output


def _group_raising(exc: BaseException) -> click.Group:
    @click.group(cls=RootGroup)
    def root() -> None:
        pass

    @root.command()
    def boom() -> None:
        raise exc

    return root


@pytest.mark.parametrize(
    ("exc", "code"),
    [(UsageError("bad usage"), 2), (OperationalError("could not"), 1)],
)
def test_project_errors_become_one_line(exc: Exception, code: int) -> None:
    result = CliRunner().invoke(_group_raising(exc), ["boom"])
    assert result.exit_code == code
    assert result.output == f"Error: {exc}\n"


def test_library_errors_are_classified_by_type() -> None:
    from loop_dispatch import RefError
    from loop_dispatch.store import StoreError

    result = CliRunner().invoke(_group_raising(RefError("bad ref")), ["boom"])
    assert (result.exit_code, result.output) == (2, "Error: bad ref\n")
    from pathlib import Path

    result = CliRunner().invoke(_group_raising(StoreError(Path("/s"), "newer schema")), ["boom"])
    assert result.exit_code == 1
    assert result.output == "Error: state store /s: newer schema\n"


def test_a_bug_keeps_its_traceback() -> None:
    result = CliRunner().invoke(_group_raising(ZeroDivisionError("bug")), ["boom"])
    assert isinstance(result.exception, ZeroDivisionError)


def test_every_lazy_entry_is_a_click_command_imported_on_use() -> None:
    from loop_cli.commands.sessions import LAZY, sessions
    from loop_cli.main import cli

    for group, table in ((cli, COMMANDS), (sessions, LAZY)):
        assert isinstance(group, LazyGroup)
        ctx = click.Context(group)
        for name in table:
            assert isinstance(group.get_command(ctx, name), click.Command), name
    assert cli.get_command(click.Context(cli), "no-such-command") is None


def test_library_roots_are_matched_by_isinstance_not_by_name() -> None:
    from loop_cli.errors import classify
    from loop_dispatch import DispatchError, LockTimeout, StoreError
    from loop_envstate import EnvFileError, EnvstateError
    from loop_tmux import TmuxError, TmuxUnavailable

    class Renamed(DispatchError):  # a name no string table would know
        pass

    assert classify(Renamed("x")) == 1
    assert classify(LockTimeout("busy")) == 1
    assert classify(StoreError(__import__("pathlib").Path("/s"), "bad")) == 1
    assert classify(TmuxUnavailable("no answer")) == 1
    assert classify(EnvFileError("/e", "missing")) == 2
    assert classify(ValueError("a bug")) is None
    for root in (DispatchError, TmuxError, EnvstateError):
        assert classify(root("x")) == 1


def _both(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], ...]:
    """The same command line through the entry point and through the click group."""
    entry = (
        f"import sys\nfrom loop_cli.entry import main\nsys.argv = ['the-loop', *{args!r}]\nmain()\n"
    )
    group = f"from loop_cli.main import cli\ncli({args!r}, prog_name='the-loop')\n"
    return tuple(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        for code in (entry, group)
    )


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "--format", "json"],
        ["status", "--format=text"],
        ["--config", "{config}", "status", "--format", "json"],
        ["--config={bad}", "status"],
        ["--config", "{missing}", "status", "--format", "json"],
        ["status", "--config", "{config}", "-o", "json"],
        ["-o", "json", "status", "--config={missing}"],
        ["status", "--output=json", "--config", "{bad}"],
    ],
)
def test_plain_status_without_click_matches_the_click_command(
    args: list[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from loop_cli.entry import plain_status

    state = tmp_path / "state"
    config = tmp_path / "c.yaml"
    config.write_text(f"stateDir: {state}\nrouting: {{tmuxSocket: loop-test-none-{os.getpid()}}}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tracker: youtrack\nbogus: 1\n")
    names = {"config": str(config), "bad": str(bad), "missing": str(tmp_path / "none.yaml")}
    args = [a.format(**names) for a in args]
    assert plain_status(args) is not None
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["THE_LOOP_CONFIG"] = str(config)
    env["HOME"] = str(tmp_path)
    fast, slow = _both(args, env)
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    assert fast.stdout or fast.stderr.startswith("Error: ")


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--format", "slack"],
        ["status", "-o", "yaml"],
        ["--format", "json", "status"],
        ["status", "--post"],
        ["status", "--format"],
        ["--config", "status"],
        ["sessions", "list"],
        ["status", "extra"],
    ],
)
def test_other_lines_go_to_click(args: list[str]) -> None:
    from loop_cli.entry import plain_status

    assert plain_status(args) is None


def test_plain_status_imports_no_click(tmp_path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"stateDir: {tmp_path / 'state'}\nrouting: {{tmuxSocket: loop-test-none}}\n")
    _, mods = _entry_imports(["--config", str(config), "status", "--format", "json"])
    assert "click" not in mods
    assert "yaml" in mods
