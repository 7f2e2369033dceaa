"""The docs keep up with the code (issue 22): the operator guide's command table names
every command the click tree has, with its options; README's table names every document;
the install steps work on a fresh account."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from loop_cli.main import cli

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "operator-guide.md"
# Options every command (or every daemon) takes, described once outside the table.
SHARED_OPTIONS = {"--help", "--config", "--format", "--output", "--log-level", "--log-format"}


def commands() -> dict[str, click.Command]:
    """Every runnable command path (`item show`, `poll` for `poll --once`), lazy
    commands loaded through the group as `--help` would."""
    found: dict[str, click.Command] = {}

    def walk(cmd: click.Command, path: list[str], ctx: click.Context) -> None:
        if not isinstance(cmd, click.Group):
            found[" ".join(path)] = cmd
            return
        if path and cmd.invoke_without_command:
            found[" ".join(path)] = cmd
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))

    walk(cli, [], click.Context(cli, info_name="the-loop"))
    return found


def table_rows(text: str, heading: str) -> list[str]:
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_the_command_table_names_every_command_and_its_options() -> None:
    rows = table_rows(GUIDE.read_text(encoding="utf-8"), "## Commands")
    found = commands()
    assert {"item show", "workspace list", "workspace gc", "env doctor"} <= set(found)
    missing, undescribed = [], []
    for path, cmd in sorted(found.items()):
        # A row names the command as `the-loop PATH`, then its arguments or options.
        mine = [r for r in rows if re.search(rf"`the-loop {re.escape(path)}(?![\w-])", r)]
        if not mine:
            missing.append(path)
            continue
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            for opt in param.opts:
                if not opt.startswith("--") or opt in SHARED_OPTIONS:
                    continue
                if not any(re.search(rf"{re.escape(opt)}(?![\w-])", r) for r in mine):
                    undescribed.append(f"{path} {opt}")
    assert missing == [], f"commands missing from {GUIDE.name}'s table"
    assert undescribed == [], f"options missing from {GUIDE.name}'s table"


def test_every_table_row_is_a_real_command() -> None:
    found = commands()
    for row in table_rows(GUIDE.read_text(encoding="utf-8"), "## Commands"):
        named = re.match(r"\| `the-loop ([a-z-]+(?: [a-z-]+)?)", row)
        assert named is not None, row
        words = named.group(1)
        assert words in found or words.split()[0] in found, row


def test_readme_lists_every_document() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("| document | for |\n", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`docs/([\w.-]+\.md)`", table))
    assert listed == {p.name for p in (ROOT / "docs").glob("*.md")}


def test_no_doc_names_a_command_that_does_not_exist() -> None:
    """`config show` in scale-out.md named nothing: every `GROUP SUB` a doc quotes, for a
    group of subcommands, is one."""
    found = commands()
    groups = "|".join(sorted({p.split()[0] for p in found if " " in p}))
    quoted = re.compile(rf"`(?:the-loop )?({groups}) ([a-z][a-z-]*)(?=[` ])")
    named = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for group, sub in quoted.findall(doc.read_text(encoding="utf-8")):
            if f"{group} {sub}" not in found:
                named.append(f"{doc.name}: {group} {sub}")
    assert named == []


def _install_lines() -> list[str]:
    guide = GUIDE.read_text(encoding="utf-8")
    block = guide.split("## Install", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith(("mkdir", "ln "))]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell steps")
def test_install_steps_work_on_a_fresh_account(tmp_path: Path) -> None:
    """The guide's link steps, run by sh on a home with no ~/.local/bin; the venv the
    guide creates is stood in for by this one (pip install itself is not re-run)."""
    home = tmp_path / "home"
    venv_bin = home / ".local" / "share" / "the-loop" / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    installed = Path(sys.executable).with_name("the-loop")
    assert installed.exists(), "the-loop must be installed in the test venv"
    (venv_bin / "the-loop").symlink_to(installed)
    lines = _install_lines()
    assert any(line.startswith("ln ") for line in lines)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    for _ in range(2):  # and a second time: re-running the steps does not fail
        done = subprocess.run(
            ["sh", "-ec", "\n".join(lines)], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    ran = subprocess.run(
        [str(home / ".local" / "bin" / "the-loop"), "--help"],
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("Usage: the-loop")
