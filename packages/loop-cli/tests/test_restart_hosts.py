"""`sessions restart --host NAME` / `--all-hosts`: requests through the store, each
host's worker answering for its own sessions; refusals in one line."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from loop_cli.config import LoadedConfig, parse_text
from loop_cli.main import cli
from loop_cli.runtime import Runtime


def invoke(config: Path, *args: str):
    return CliRunner().invoke(cli, ["--config", str(config), *args])


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_on_sqlite_host_names_only_this_host(tmp_path: Path, tmux_socket: str) -> None:
    env = _write(tmp_path / "app.env", "TOKEN=x\n")
    config = _write(
        tmp_path / "c.yaml",
        f"stateDir: {tmp_path / 's'}\nhost: {{name: h1}}\nenv: {{file: {env}}}\n"
        f"routing: {{tmuxSocket: {tmux_socket}}}\n",
    )
    other = invoke(config, "sessions", "restart", "--host", "build-7")
    assert other.exit_code == 2, other.output
    assert "Traceback" not in other.output
    assert len(other.output.strip().splitlines()) == 1
    assert "--host build-7: not a host of this store" in other.output
    assert "(h1)" in other.output
    for args in (["--host", "h1"], ["--all-hosts"]):
        here = invoke(config, "sessions", "restart", *args)
        assert here.exit_code == 0, here.output
        assert "summary: no sessions" in here.output
    both = invoke(config, "sessions", "restart", "--all", "--all-hosts")
    assert both.exit_code == 2
    assert "one of them" in both.output
    wait = invoke(config, "sessions", "restart", "--all", "--wait", "3")
    assert wait.exit_code == 2
    assert "--wait applies to --host/--all-hosts only" in wait.output


def test_all_hosts_reports_each_host_answered_failed_expired_or_silent(
    cluster, tmp_path: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loop_dispatch.hostrestarts import RestartRequests
    from loop_dispatch.hosts import Hosts
    from loop_dispatch.store import Store

    url = cluster.create_database()
    monkeypatch.setenv("LOOP_TEST_PG_PASSWORD", cluster.password)
    env = _write(tmp_path / "app.env", "TOKEN=x\n")

    def config(name: str, extra: str = "") -> Path:
        return _write(
            tmp_path / f"{name}.yaml",
            f"stateDir: {tmp_path / name}\n"
            f"store: {{url: '{url}', passwordEnv: LOOP_TEST_PG_PASSWORD}}\n"
            f"host: {{name: {name}, leaseSeconds: 30}}\n"
            f"routing: {{tmuxSocket: {tmux_socket}}}\n{extra}",
        )

    now = datetime.now(timezone.utc)
    with Store.open(url=url, password=cluster.password) as store:
        for name in ("host-a", "host-b", "host-d"):
            Hosts(store).beat(name, f"{name}/1/1", max_sessions=4, lease_seconds=60)
        # host-c's lease ran out an hour ago (leases live on the database's clock: a
        # host's own clock cannot make one look old, so the row is aged by hand).
        Hosts(store).beat("host-c", "host-c/1/1", max_sessions=4, lease_seconds=30)
        with store.transaction() as conn:
            conn.execute(
                "UPDATE hosts SET lease_until = ?, heartbeat_at = ? WHERE name = 'host-c'",
                (
                    (now - timedelta(minutes=59)).isoformat(timespec="microseconds"),
                    (now - timedelta(hours=1)).isoformat(timespec="microseconds"),
                ),
            )
    ctl = config("ctl")
    unknown = invoke(ctl, "sessions", "restart", "--host", "nope")
    assert unknown.exit_code == 2
    assert len(unknown.output.strip().splitlines()) == 1
    assert "--host nope: unknown host (hosts of this fleet: host-a, host-b, host-c, host-d)" in (
        unknown.output
    )
    assert "Traceback" not in unknown.output

    # The workers of host-a (env file set) and host-b (none: its restart cannot run).
    from loop_cli.host_restart import serve_requests

    workers = []
    for name, extra in (("host-a", f"env: {{file: {env}}}\n"), ("host-b", "")):
        path = config(name, extra)
        workers.append(Runtime(LoadedConfig(parse_text(path.read_text(), path), path, "--config")))
    stop = threading.Event()
    served: list[int] = []

    def work() -> None:
        while not stop.is_set():
            for rt in workers:
                served.extend(r.id for r in serve_requests(rt))
            stop.wait(0.2)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        result = invoke(ctl, "sessions", "restart", "--all-hosts", "--force", "--wait", "4")
    finally:
        stop.set()
        thread.join(10)
        for rt in workers:
            rt.close()
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "asked 4 host(s) to restart their sessions [force]; waiting up to 4s"
    by_host = {line.split(":")[0]: line for line in lines[1:-1]}
    assert by_host["host host-a"].startswith("host host-a: no sessions (request #")
    assert "host host-b: FAILED: no env file configured" in by_host["host host-b"]
    assert "(key env.file)" in by_host["host host-b"]
    assert "host host-c: EXPIRED (its lease ran out)" in by_host["host host-c"]
    assert "host host-d: NO ANSWER within 4s" in by_host["host host-d"]
    assert "still pending; it stays queued" in by_host["host host-d"]
    assert lines[-1] == "summary: 2 of 4 host(s) answered"
    assert cluster.password not in result.output
    with Store.open(url=url, password=cluster.password) as store:
        still = RestartRequests(store).open()
        assert sorted(r.host for r in still) == ["host-c", "host-d"]
        assert all(r.force for r in still)
    assert len(served) == 2

    # JSON: the same answers as data; --host of one live host that answers nothing.
    data = json.loads(
        invoke(
            ctl, "sessions", "restart", "--host", "host-d", "--wait", "0.5", "--format", "json"
        ).output
    )
    assert data["exitCode"] == 1
    assert [(h["host"], h["state"], h["requestState"]) for h in data["hosts"]] == [
        ("host-d", "no-answer", "pending")
    ]


def test_rollout_options_round_trip_and_bad_ones_are_refused() -> None:
    """What `--all-hosts` stores is what the host runs; options it cannot honour (a
    hand-edited row) are a one-line refusal recorded for the asker, never a traceback."""
    from loop_cli.errors import UsageError
    from loop_cli.host_restart import rollout_from, rollout_options
    from loop_cli.rotation.restart import Rollout

    how = Rollout(wait_idle=30, busy="restart", max_parallel=2)
    assert rollout_from(rollout_options(how)) == how
    assert rollout_from({}) == Rollout()
    for bad in ({"busy": "kill"}, {"maxParallel": "x"}, {"waitIdle": -1}, {"error": "unreadable"}):
        with pytest.raises(UsageError, match=r"restart request options|--busy|--max|--wait"):
            rollout_from(bad)
