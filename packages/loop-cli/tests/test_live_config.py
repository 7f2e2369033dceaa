"""Live config (issue 27 point 5): the key-path diff, restart-only refusals, and a
broken file that changes nothing. Real files and a real event log; no daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loop_cli.config import Config, LoadedConfig, load_file, validate
from loop_cli.live_config import (
    LiveConfig,
    changed_paths,
    keep_old,
    split_restart_only,
)
from loop_dispatch.eventlog import EventLog


def config(data: dict[str, Any], where: Path = Path("c.yaml")) -> Config:
    return validate(data, where, where.parent)


def test_diff_names_key_paths_of_changed_values_only() -> None:
    old = config({"authorizedActors": ["alice"], "polling": {"intervalSeconds": 60}})
    new = config(
        {
            "authorizedActors": ["alice", "bob"],
            "polling": {"intervalSeconds": 60},
            "delivery": {"concurrency": 2},
            "harness": {"extraArgs": ["--fast"]},
        }
    )
    assert changed_paths(old, new) == [
        "authorizedActors",
        "harness.extraArgs",
        "delivery.concurrency",
    ]
    assert changed_paths(new, new) == []


def test_diff_walks_mappings_and_sees_keys_come_and_go() -> None:
    old = config({"workspace": {"repositories": {"a/b": "/x"}, "mode": "worktree"}})
    new = config({"workspace": {"repositories": {"c/d": "/y"}, "mode": "worktree"}})
    assert changed_paths(old, new) == ["workspace.repositories.a/b", "workspace.repositories.c/d"]


def test_restart_only_keys_are_split_out() -> None:
    live, refused = split_restart_only(
        [
            "stateDir",
            "store.url",
            "host.name",
            "webhook.port",
            "webhook.secretEnv",
            "routing.tmuxSocket",
            "routing.dispatchTimeoutSeconds",
            "eventLog.path",
            "authorizedActors",
            "github.triggerLabel",
            "polling.intervalSeconds",
            "stateDirectory",  # a prefix of a name is not the key
        ]
    )
    assert refused == [
        "stateDir",
        "store.url",
        "host.name",
        "webhook.port",
        "webhook.secretEnv",
        "routing.tmuxSocket",
        "eventLog.path",
    ]
    assert live == [
        "routing.dispatchTimeoutSeconds",
        "authorizedActors",
        "github.triggerLabel",
        "polling.intervalSeconds",
        "stateDirectory",
    ]


def test_keep_old_restores_only_the_refused_keys() -> None:
    old = config({"stateDir": "/old", "routing": {"tmuxSocket": "a"}, "authorizedActors": []})
    new = config({"stateDir": "/new", "routing": {"tmuxSocket": "b"}, "authorizedActors": ["x"]})
    mixed = keep_old(new, old, ["stateDir", "routing.tmuxSocket"])
    assert mixed.state_dir == Path("/old")
    assert mixed.routing.tmux_socket == "a"
    assert mixed.authorized_actors == ["x"]
    assert changed_paths(old, mixed) == ["authorizedActors"]


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "config.yaml"
        self.log = tmp / "events.jsonl"
        self.applied: list[LoadedConfig] = []

    def write(self, data: dict[str, Any] | str) -> None:
        self.path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))

    def live(self) -> LiveConfig:
        loaded = LoadedConfig(load_file(self.path), self.path, "--config")
        return LiveConfig(loaded, self.applied.append, EventLog(self.log), "poller")

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    monkeypatch.setenv("THE_LOOP_CONFIG_CACHE", "0")
    return Rig(tmp_path)


BASE: dict[str, Any] = {
    "stateDir": "/srv/loop",
    "authorizedActors": ["alice"],
    "routing": {"tmuxSocket": "loop-a"},
}


def test_an_unchanged_file_is_not_reloaded(rig: Rig) -> None:
    rig.write(BASE)
    live = rig.live()
    assert live.check() is None
    rig.write("# a comment only\n" + yaml.safe_dump(BASE))
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "unchanged"
    assert rig.applied == []
    assert rig.events() == []
    assert live.check() is None  # the same bytes again: not even validated


def test_a_live_change_is_applied_whole_and_recorded_by_key_path(rig: Rig) -> None:
    rig.write(BASE)
    live = rig.live()
    first = live.digest
    rig.write({**BASE, "authorizedActors": ["alice", "bob"], "delivery": {"maxAttempts": 5}})
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "reloaded"
    (applied,) = rig.applied
    assert applied.config.authorized_actors == ["alice", "bob"]
    assert applied.config.delivery.max_attempts == 5
    (event,) = rig.events()
    assert event["type"] == "config.reloaded"
    assert event["detail"]["changed"] == ["authorizedActors", "delivery.maxAttempts"]
    assert event["detail"]["previous"] == first
    assert event["detail"]["digest"] == live.digest
    assert "bob" not in json.dumps(event)
    assert live.state() == {"path": str(rig.path), "digest": live.digest, "reloads": 1}


def test_restart_only_keys_are_refused_and_the_rest_applied(rig: Rig) -> None:
    rig.write(BASE)
    live = rig.live()
    rig.write(
        {
            **BASE,
            "stateDir": "/elsewhere",
            "routing": {"tmuxSocket": "loop-b"},
            "webhook": {"port": 9999},
            "authorizedActors": ["carol"],
        }
    )
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "refused"
    assert outcome.refused == ("stateDir", "routing.tmuxSocket", "webhook.port")
    (applied,) = rig.applied
    assert applied.config.state_dir == Path("/srv/loop")
    assert applied.config.routing.tmux_socket == "loop-a"
    assert applied.config.webhook.port == 8787
    assert applied.config.authorized_actors == ["carol"]
    kinds = [e["type"] for e in rig.events()]
    assert kinds == ["config.reloaded", "config.reload_refused"]
    refusal = rig.events()[1]
    assert refusal["level"] == "warning"
    assert refusal["detail"]["keys"] == ["stateDir", "routing.tmuxSocket", "webhook.port"]
    assert live.state()["refused"] == ["stateDir", "routing.tmuxSocket", "webhook.port"]


def test_only_restart_only_keys_changed_applies_nothing(rig: Rig) -> None:
    rig.write(BASE)
    live = rig.live()
    rig.write({**BASE, "host": {"name": "other"}})
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "refused"
    assert outcome.changed == ()
    assert rig.applied == []
    assert [e["type"] for e in rig.events()] == ["config.reload_refused"]


def test_a_broken_file_keeps_the_old_config_and_says_what_config_check_says(rig: Rig) -> None:
    rig.write(BASE)
    live = rig.live()
    good = live.digest
    rig.write({**BASE, "polling": {"intervalSeconds": "fast"}, "authorizedActors": ["mallory"]})
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "failed"
    assert rig.applied == []
    expected = f"{rig.path}: polling.intervalSeconds: must be a number (got 'fast')"
    assert outcome.error == expected
    (event,) = rig.events()
    assert event["type"] == "config.reload_failed"
    assert event["level"] == "error"
    assert event["detail"]["error"] == expected
    assert event["detail"]["running"] == good
    assert live.digest == good
    assert live.state()["error"] == expected
    assert live.check() is None  # reported once per file content, not every cycle
    rig.write({**BASE, "authorizedActors": ["alice", "dave"]})  # fixed: applied, error gone
    fixed = live.check()
    assert fixed is not None
    assert fixed.kind == "reloaded"
    assert "error" not in live.state()


def test_a_yaml_syntax_error_and_a_vanished_file_are_refused(rig: Rig) -> None:
    rig.write(BASE)
    live = rig.live()
    rig.write("authorizedActors: [alice\n")
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "failed"
    assert "YAML syntax error" in outcome.error
    rig.path.unlink()
    gone = live.check()
    assert gone is not None
    assert gone.kind == "failed"
    assert "cannot read" in gone.error
    assert rig.applied == []


def test_a_mix_that_breaks_a_cross_key_rule_is_refused_whole(rig: Rig) -> None:
    # The secret's variable is restart-only; the new file's passEnv names the OLD one.
    rig.write({**BASE, "webhook": {"secretEnv": "OLD_SECRET"}})
    live = rig.live()
    rig.write(
        {**BASE, "webhook": {"secretEnv": "NEW_SECRET"}, "harness": {"passEnv": ["OLD_SECRET"]}}
    )
    outcome = live.check()
    assert outcome is not None
    assert outcome.kind == "failed"
    assert "webhook.secretEnv" in outcome.error
    assert rig.applied == []


def test_a_reload_reaches_the_next_spawn_and_the_running_drain(tmp_path: Path) -> None:
    """Runtime.apply_config: the dispatcher is built anew from the new harness (the
    next spawn's argv), the one an attempt already holds is left as it was, and a drain
    that is running takes the new delivery settings."""
    from loop_cli.runtime import Runtime

    def loaded(extra: list[str], attempts: int) -> LoadedConfig:
        data = {
            "stateDir": str(tmp_path / "state"),
            "harness": {"extraArgs": extra},
            "delivery": {"maxAttempts": attempts, "concurrency": 1},
        }
        return LoadedConfig(config(data, tmp_path / "c.yaml"), tmp_path / "c.yaml", "--config")

    rt = Runtime(loaded(["--conversations", "/a"], 3))
    try:
        before = rt.dispatcher
        drain = rt.drain()
        assert "/a" in before.adapter.argv
        rt.apply_config(loaded(["--conversations", "/b"], 9))
        after = rt.dispatcher
        assert after is not before
        assert "/b" in after.adapter.argv
        assert "/a" not in after.adapter.argv
        assert "/a" in before.adapter.argv  # an attempt under way keeps what it took
        assert drain.policy.max_attempts == 9
        assert rt.dispatcher is after  # built once per config
    finally:
        rt.close()
