"""store.url / store.passwordEnv: validated, the password never in the file or a message,
and a PostgreSQL store opened by the runtime (a private cluster)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_cli.config import LoadedConfig, parse_text
from loop_cli.errors import ConfigError
from loop_cli.runtime import Runtime


def _errors(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_text(text, tmp_path / "c.yaml")
    return info.value.problems


def test_store_url_absent_means_the_sqlite_file(tmp_path: Path) -> None:
    cfg = parse_text(f"stateDir: {tmp_path}\n", tmp_path / "c.yaml")
    assert cfg.store.url is None
    rt = Runtime(LoadedConfig(cfg, tmp_path / "c.yaml", "--config"))
    assert rt.store.backend == "sqlite"
    assert rt.store.path == tmp_path / "state.db"
    rt.close()


def test_a_password_in_store_url_is_refused_and_never_shown(tmp_path: Path) -> None:
    for url in (
        "postgresql://loop:hunter2-secret@db.example/loop",
        "postgresql://loop@db.example/loop?password=hunter2-secret",
    ):
        problems = _errors(f"store: {{url: '{url}'}}\n", tmp_path)
        assert len(problems) == 1
        assert "store.url" in problems[0]
        assert "passwordEnv" in problems[0]
        assert "hunter2-secret" not in problems[0]


def test_store_url_must_be_postgresql_and_password_env_a_name(tmp_path: Path) -> None:
    problems = _errors("store: {url: 'mysql://db/x', passwordEnv: 'not a name'}\n", tmp_path)
    text = "\n".join(problems)
    assert "store.url: must be a postgresql://" in text
    assert "store.passwordEnv" in text


def test_an_unset_password_env_is_one_line_naming_the_variable(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("LOOP_TEST_PG_PASSWORD", raising=False)
    cfg = parse_text(
        "store: {url: 'postgresql://loop@127.0.0.1:1/loop', passwordEnv: LOOP_TEST_PG_PASSWORD}\n",
        tmp_path / "c.yaml",
    )
    rt = Runtime(LoadedConfig(cfg, tmp_path / "c.yaml", "--config"))
    with pytest.raises(ConfigError, match="LOOP_TEST_PG_PASSWORD, which is not set"):
        _ = rt.store


def test_status_and_sessions_list_show_the_fleet_per_host(
    cluster, run_cli, isolated: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from loop_dispatch.hosts import HostLease
    from loop_dispatch.model import Event, EventKind, WorkItemRef
    from loop_dispatch.store import Store

    url = cluster.create_database()
    monkeypatch.setenv("LOOP_TEST_PG_PASSWORD", cluster.password)
    config = isolated / "c.yaml"
    config.write_text(
        f"stateDir: {isolated / 's'}\n"
        f"store: {{url: '{url}', passwordEnv: LOOP_TEST_PG_PASSWORD}}\n"
        f"host: {{name: host-a, maxSessions: 3}}\n"
        f"routing: {{tmuxSocket: {tmux_socket}}}\n"
    )
    with Store.open(url=url, password=cluster.password) as store:
        a = HostLease(store, "host-a", max_sessions=3, lease_seconds=30)
        b = HostLease(store, "host-b", max_sessions=5, lease_seconds=30)
        a.beat(force=True)
        b.beat(force=True)
        ref = WorkItemRef("local", "p", 1)
        store.inbox.accept(
            "t", [Event("d1", ref, EventKind.COMMENT, "a", "b", "", datetime.now(timezone.utc))]
        )
        # host-b has the most free capacity: the item is placed there.
        assert b.hosts.claim("host-b", b.owner, limit=1, lease_seconds=60, alive=lambda o: True)
        store.registry.register(ref, harness="h", conversation_id="c1", cwd="/")
        # Each host's daemons beat their own rows: host-b's running poller must not
        # make host-a's look running, and host-a's stop must not stop host-b's.
        from loop_cli import heartbeat

        now = datetime.now(timezone.utc)
        heartbeat.beat(store, "poller", stale_after=60, started=now, host="host-b")
        heartbeat.stopped(store, "poller", started=now, host="host-a")
        heartbeat.beat(store, "webhook", stale_after=60, started=now, host="recv-1")
    result = run_cli("--config", str(config), "status", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    hosts = json.loads(result.output)["hosts"]
    assert hosts["this"] == "host-a"
    rows = {h["name"]: h for h in hosts["hosts"]}
    assert rows["host-b"]["placed"] == 1
    assert rows["host-a"]["live"]
    assert rows["host-b"]["live"]
    assert hosts["totals"] == {"hosts": 2, "live": 2, "placed": 1, "capacity": 8}
    assert rows["host-a"]["services"] == {"poller": "stopped"}
    assert rows["host-b"]["services"] == {"poller": "running"}
    assert hosts["otherHosts"] == [{"name": "recv-1", "services": {"webhook": "running"}}]
    services = {s["name"]: s for s in json.loads(result.output)["services"]}
    assert services["poller"]["state"] == "stopped"  # this host's (host-a's) poller
    assert not json.loads(result.output)["ok"]
    text = run_cli("--config", str(config), "status").output
    assert "host:      host-a (this host): live, 0/3 items" in text
    assert "s; poller stopped" in text
    assert "host:      host-b: live, 1/5 items" in text
    assert "; poller running" in text.split("host:      host-b")[1].splitlines()[0]
    assert "host:      recv-1: no worker; webhook running" in text
    assert "poller:    NOT RUNNING (stopped)" in text
    assert "fleet:     2/2 hosts live, 1 items placed, capacity 8" in text
    listing = run_cli("--config", str(config), "sessions", "list").output
    assert "HOST" in listing.splitlines()[0]
    assert "host-b" in listing
    assert "on another host" in listing
    assert cluster.password not in result.output + text + listing


def test_the_runtime_opens_a_postgresql_store_with_the_password_from_the_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("psycopg")
    from loop_dispatch.pgcluster import ClusterUnavailable, start_cluster

    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        pytest.skip(f"no private PostgreSQL cluster: {exc}")
    try:
        url = cluster.create_database()
        monkeypatch.setenv("LOOP_TEST_PG_PASSWORD", cluster.password)
        cfg = parse_text(
            f"stateDir: {tmp_path / 's'}\n"
            f"store: {{url: '{url}', passwordEnv: LOOP_TEST_PG_PASSWORD}}\n",
            tmp_path / "c.yaml",
        )
        rt = Runtime(LoadedConfig(cfg, tmp_path / "c.yaml", "--config"))
        assert rt.has_state
        store = rt.store
        assert store.backend == "postgresql"
        assert cluster.password not in str(store.path)
        store.meta.set("hello", "world")
        assert store.meta.get("hello") == "world"
        assert not (tmp_path / "s" / "state.db").exists()
        rt.close()
    finally:
        cluster.stop()
        os.environ.pop("LOOP_TEST_PG_PASSWORD", None)


def test_store_migrate_copies_a_state_dir_into_postgresql_and_the_fleet_goes_on(
    cluster, run_cli, write_config, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items, comments (the tracker's own tables), the inbox with its order and states,
    cursors: all there after the copy, the source untouched; a second migrate into the
    now used database is refused; new rows continue after the copied keys."""
    import json

    write_config()
    assert run_cli("item", "open", "First", "--body", "one").exit_code == 0
    assert run_cli("item", "comment", "local:loop#1", "two", "--author", "alice").exit_code == 0
    assert run_cli("item", "open", "Second").exit_code == 0
    before = json.loads(run_cli("inbox", "list", "--format", "json").output)
    url = cluster.create_database()
    monkeypatch.setenv("LOOP_TEST_PG_PASSWORD", cluster.password)
    moved = run_cli(
        "store",
        "migrate",
        "--to",
        url,
        "--password-env",
        "LOOP_TEST_PG_PASSWORD",
        "--format",
        "json",
    )
    assert moved.exit_code == 0, moved.output
    tables = json.loads(moved.output)["tables"]
    assert tables["inbox"] == 3
    assert tables["loop_cli_items"] == 2
    assert cluster.password not in moved.output
    again = run_cli("store", "migrate", "--to", url, "--password-env", "LOOP_TEST_PG_PASSWORD")
    assert again.exit_code != 0
    assert "already holds rows" in again.output
    # The same commands on the shared database see the same state, and go on.
    write_config(
        {"store": {"url": url, "passwordEnv": "LOOP_TEST_PG_PASSWORD"}, "host": {"name": "h1"}}
    )
    after = json.loads(run_cli("inbox", "list", "--format", "json").output)
    assert after == before
    assert run_cli("item", "comment", "local:loop#1", "three", "--author", "bob").exit_code == 0
    listing = json.loads(run_cli("item", "list", "--format", "json").output)
    assert [i["ref"] for i in listing] == ["local:loop#1", "local:loop#2"]
    rows = json.loads(run_cli("inbox", "list", "--format", "json").output)
    assert len(rows) == 4
    assert rows[-1]["seq"] > max(r["seq"] for r in before)
