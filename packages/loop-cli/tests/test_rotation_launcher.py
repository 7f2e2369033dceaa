"""The env-file launcher hook: argv shape, no secret toward tmux, and env folding order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_cli.config import Config, parse_text
from loop_cli.errors import UsageError
from loop_cli.rotation.launcher import (
    CONFIG_VAR,
    WORK_ITEM_VAR,
    EnvFileLauncher,
    build_launcher,
    require_env_file,
)
from loop_dispatch import WorkItemRef
from loop_dispatch.registry import SessionRecord

SECRET = "s3cr3t-value-that-must-not-travel"


def record(cwd: Path) -> SessionRecord:
    ref = WorkItemRef.parse("local:proj#7")
    now = datetime.now(timezone.utc)
    return SessionRecord(ref, ref.slug(), ref.tmux_name(), "generic", "c", cwd, "active", now, now)


def test_no_env_file_means_no_launcher():
    assert build_launcher(Config()) is None


def test_relative_env_file_is_anchored_and_made_absolute(tmp_path):
    cfg = parse_text("env:\n  file: secrets/app.env\n", tmp_path / "config.yaml")
    launcher = build_launcher(cfg, tmp_path / "config.yaml")
    assert launcher is not None
    assert launcher.file == tmp_path / "secrets" / "app.env"
    assert launcher.file.is_absolute()


def test_spec_carries_no_value_and_no_tmux_env(tmp_path):
    env_file = tmp_path / "app.env"
    env_file.write_text(f"API_TOKEN={SECRET}\n")
    launcher = EnvFileLauncher(env_file, config_path=tmp_path / "config.yaml")
    spec = launcher(record(tmp_path), ["claude", "--resume", "c", "hello"])

    assert spec.env == {}  # nothing for tmux -e: same on every tmux version
    assert SECRET not in " ".join(spec.argv)
    split = spec.argv.index("--")
    assert spec.argv[split + 1 :] == ["claude", "--resume", "c", "hello"]
    assert spec.argv[1:3] == ["exec", str(env_file)]
    sets = [spec.argv[i + 1] for i, a in enumerate(spec.argv[:split]) if a == "--set"]
    assert sets == [
        f"{WORK_ITEM_VAR}=local:proj#7",
        f"{CONFIG_VAR}={tmp_path / 'config.yaml'}",
    ]


def test_folding_order_inherited_then_file_then_own_names(tmp_path):
    """Run the real launcher: the file beats the inherited environment, and the-loop's
    own names beat the file (a hand-edited file cannot redefine them)."""
    env_file = tmp_path / "app.env"
    env_file.write_text(f"API_TOKEN={SECRET}\nSHARED=from-file\n{WORK_ITEM_VAR}=local:evil#1\n")
    launcher = EnvFileLauncher(env_file, python=sys.executable)
    probe = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    spec = launcher(record(tmp_path), probe)
    inherited = {**os.environ, "SHARED": "inherited", "ONLY_INHERITED": "kept"}

    done = subprocess.run(spec.argv, capture_output=True, text=True, env=inherited, timeout=30)

    assert done.returncode == 0, done.stderr
    held = json.loads(done.stdout)
    assert held["API_TOKEN"] == SECRET
    assert held["SHARED"] == "from-file"
    assert held["ONLY_INHERITED"] == "kept"
    assert held[WORK_ITEM_VAR] == "local:proj#7"


def test_require_env_file_refusals(tmp_path):
    with pytest.raises(UsageError, match=r"env\.file"):
        require_env_file(Config())
    missing = tmp_path / "gone.env"
    cfg = parse_text(f"env:\n  file: {missing}\n", tmp_path / "config.yaml")
    with pytest.raises(UsageError, match=r"gone\.env") as err:
        require_env_file(cfg)
    assert err.value.exit_code == 2


def test_malformed_lines_keep_valid_names(tmp_path):
    env_file = tmp_path / "app.env"
    env_file.write_text(f"A=1\nthis is not a binding\nB={SECRET}\n")
    cfg = parse_text(f"env:\n  file: {env_file}\n", tmp_path / "config.yaml")
    env = require_env_file(cfg)
    assert env.names == ["A", "B"]
    assert env.malformed == (2,)


def test_launcher_check_runs_the_real_launcher(tmp_path):
    from loop_cli.rotation.restart import check_launcher

    env_file = tmp_path / "app.env"
    env_file.write_text(f"API_TOKEN={SECRET}\n")
    launcher = EnvFileLauncher(env_file, python=sys.executable)
    assert check_launcher(launcher) is None
    env_file.unlink()
    problem = check_launcher(launcher)
    assert problem is not None
    assert "exited 2" in problem
    assert "app.env" in problem
