"""Fixtures for loop-cli's own tests: an isolated home, configs, a private tmux server.

Every tmux server a test uses is private (`-L loop-test-...`, loop_tmux.testing's
`tmux_socket` / `new_tmux_socket`) and killed at teardown; TMUX/TMUX_PANE are removed so
nothing can reach an operator's server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from loop_tmux.testing import wait_for

sys.path.insert(0, str(Path(__file__).parent))
import leakguard

# A process a test started that outlives the run fails it (see leakguard.py).
leakguard.register(globals())


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The validated-config cache of every test (and every CLI it starts) lives in a
    temporary folder, never in the ~/.cache of whoever runs the suite."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """One private PostgreSQL cluster for the session; each test makes its own database
    (skipped, naming what is missing, where psycopg or the server binaries are absent;
    on CI .ci/run installs them)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed")
    from loop_dispatch.pgcluster import ClusterUnavailable, start_cluster

    try:
        started = start_cluster()
    except ClusterUnavailable as exc:
        pytest.skip(f"no private PostgreSQL cluster: {exc}")
    yield started
    started.stop()


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME, XDG dirs and cwd; no $THE_LOOP_CONFIG; no $TMUX."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("THE_LOOP_DEMO_AGENT_DIR", str(tmp_path / "agent"))
    for name in ("THE_LOOP_CONFIG", "TMUX", "TMUX_PANE"):
        monkeypatch.delenv(name, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return tmp_path


@pytest.fixture
def run_cli(isolated: Path) -> Callable[..., Result]:
    """Invoke `the-loop ARGS...` in-process; returns click's Result."""
    from loop_cli.main import cli

    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=True)

    return invoke


@pytest.fixture
def console(isolated: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the INSTALLED `the-loop` console script (a real process, the isolated env)."""
    script = Path(sys.executable).with_name("the-loop")
    argv0 = [str(script)] if script.exists() else [sys.executable, "-m", "loop_cli.main"]

    def run(
        *args: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv0, *args],
            input=input,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=120,
            check=False,
        )

    return run


@pytest.fixture
def write_config(isolated: Path, new_tmux_socket: Callable[[], str]) -> Callable[..., Path]:
    """Write a config file (dict -> YAML) and point $THE_LOOP_CONFIG at it.

    A config that names no tmux socket gets a private one (loop_tmux.testing's, killed at
    teardown): a test that starts a session must never reach the default server of whoever
    runs it."""
    private = new_tmux_socket()

    def write(data: dict[str, Any] | None = None, *, use_env: bool = True) -> Path:
        data = dict(data or {})
        data.setdefault("stateDir", str(isolated / "state"))
        routing = data.get("routing")
        if routing is None or (isinstance(routing, dict) and "tmuxSocket" not in routing):
            data["routing"] = {**(routing or {}), "tmuxSocket": private}
        path = isolated / "config.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        if use_env:
            os.environ["THE_LOOP_CONFIG"] = str(path)
        return path

    return write


@pytest.fixture
def loop_config(write_config: Callable[..., Path], tmux_socket: str, isolated: Path) -> Path:
    """A config on a private tmux socket, running the bundled demo agent."""
    (isolated / "work").mkdir(exist_ok=True)
    return write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
        }
    )


@pytest.fixture
def wait() -> Callable[..., Any]:
    """loop_tmux.testing's wait_for: poll until truthy; the last value at the deadline."""
    return wait_for


@pytest.fixture
def conversation(isolated: Path) -> Callable[[str], list[dict[str, Any]]]:
    """Records of the demo agent's conversation `cid` (empty while it does not exist)."""
    from loop_cli.demo_agent import read_conversation

    def read(cid: str) -> list[dict[str, Any]]:
        path = isolated / "agent" / f"{cid}.jsonl"
        try:
            return read_conversation(path)
        except (OSError, ValueError):
            return []

    return read
