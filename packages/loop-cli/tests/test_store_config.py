"""store.url / store.passwordEnv: validated, the password never in the file or a message,
and a PostgreSQL store opened by the runtime (a private cluster)."""

from __future__ import annotations

import os
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
