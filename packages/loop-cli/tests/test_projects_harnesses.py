"""Per-project settings and named harnesses (issue 27 points 6-7): strict validation,
precedence (label > project > default; project over global), the choice kept per
session on both store backends, and `config check`'s effective settings per project."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loop_cli import harness_choice
from loop_cli.config import DEFAULT_HARNESS, Config, validate
from loop_cli.errors import ConfigError
from loop_cli.harness_choice import Choice
from loop_dispatch import WorkItemRef
from loop_dispatch.store import Store

WHERE = Path("/etc/the-loop/c.yaml")


def config(data: dict[str, Any]) -> Config:
    return validate(data, WHERE, WHERE.parent)


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        config(data)
    return caught.value.problems


GITHUB: dict[str, Any] = {
    "tracker": "github",
    "github": {"repositories": ["acme/api", "acme/web"], "triggerLabel": "the-loop"},
    "authorizedActors": ["alice"],
    "harness": {"adapter": "claude-code", "extraArgs": ["--model", "big"], "cwd": "/srv"},
    "harnesses": {"codex": {"adapter": "codex", "extraArgs": ["--full-auto"]}},
}


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"projects": {"acme/api": {"triggerLable": "x"}}},
            "projects.acme/api.triggerLable: unknown key; did you mean 'triggerLabel'?",
        ),
        (
            {"projects": {"acme/api": {"harness": "codx"}}},
            "projects.acme/api.harness: no harness 'codx' in harnesses; did you mean 'codex'?",
        ),
        (
            {"projects": {"acme/lib": {"reactions": False}}},
            "projects.acme/lib: acme/lib is not one of github.repositories",
        ),
        (
            {"projects": {"acme/api": {"sessionPerPr": "yes"}}},
            "projects.acme/api.sessionPerPr: must be true or false (got 'yes')",
        ),
        (
            {"projects": {"acme/api": {"workspace": {"mode": "worktree"}}}},
            "projects.acme/api.workspace.mode: worktree needs a workspace.repositories "
            "entry for acme/api",
        ),
        (
            {"projects": {"acme/api": {"env": {"files": "/x"}}}},
            "projects.acme/api.env.files: unknown key; did you mean 'file'?",
        ),
        (
            {"projects": {"a/b/c": {}}},
            "projects: 'a/b/c' is not OWNER/REPO",
        ),
        (
            {"harnesses": {"default": {}}},
            "harnesses: 'default' is the name of `harness:` itself; choose another name",
        ),
        (
            {"harnesses": {"Codex": {}}},
            "harnesses: 'Codex' is not a harness name: lower-case letters, digits, '.', '_', '-'",
        ),
        (
            {"harnesses": {"x": {"adapter": "codex", "argv": ["x"]}}},
            "harnesses.x: argv and resumeArgv are for the generic adapter, not codex",
        ),
        (
            {"harnesses": {"x": {"passEnv": ["GITHUB_TOKEN"]}}},
            "harnesses.x.passEnv: GITHUB_TOKEN is a credential of the daemon "
            "(github.tokenEnv / webhook.secretEnv / jira.*Env / api.tokenEnv) and never "
            "reaches an agent",
        ),
    ],
)
def test_bad_projects_and_harnesses_are_refused_naming_the_key(
    data: dict[str, Any], line: str
) -> None:
    merged = {**GITHUB, **data, "harnesses": {**GITHUB["harnesses"], **data.get("harnesses", {})}}
    if "default" in data.get("harnesses", {}) or "Codex" in data.get("harnesses", {}):
        merged["harnesses"] = data["harnesses"]
    assert problems(merged) == [f"{WHERE}: {line}"]


def test_a_project_overrides_the_global_keys_and_adds_actors() -> None:
    cfg = config(
        {
            **GITHUB,
            "workspace": {"repositories": {"acme/api": "/src/api"}},
            "projects": {
                "acme/api": {
                    "triggerLabel": "agent",
                    "authorizedActors": ["carol", "alice"],
                    "harness": "codex",
                    "extraArgs": ["--fast"],
                    "env": {"file": "/etc/api.env"},
                    "workspace": {"mode": "worktree"},
                    "sessionPerPr": True,
                    "reactions": False,
                }
            },
        }
    )
    api = cfg.for_project("acme/api")
    assert api.github.trigger_label == "agent"
    assert api.authorized_actors == ["alice", "carol"]  # global first, added once
    assert api.harness.adapter == "codex"
    assert api.harness.extra_args == ["--full-auto", "--fast"]  # the harness's, then its own
    assert api.harness.cwd == Path("/srv")  # a named harness without cwd starts where harness:
    assert api.env.file == Path("/etc/api.env")
    assert api.workspace.mode == "worktree"
    assert (api.github.session_per_pr, api.github.reactions) == (True, False)
    # Another project, and the same project under the default harness by a label.
    web = cfg.for_project("acme/web")
    assert web is cfg  # nothing overridden: the global config itself
    assert cfg.for_project("acme/api", DEFAULT_HARNESS).harness.extra_args == [
        "--model",
        "big",
        "--fast",
    ]
    assert cfg.authorized_actors == ["alice"]  # the global list is untouched


def test_the_choice_is_label_then_project_then_default() -> None:
    cfg = config(
        {
            **GITHUB,
            "harnesses": {"codex": {"adapter": "codex"}, "fast": {"adapter": "claude-code"}},
            "projects": {"acme/api": {"harness": "codex"}},
        }
    )
    api = WorkItemRef("github", "acme/api", 1)
    web = WorkItemRef("github", "acme/web", 2)
    labels = ["bug", "the-loop", "the-loop:nope", "the-loop:fast"]
    assert harness_choice.choose(cfg, api, lambda: labels) == Choice("fast", "label")
    assert harness_choice.choose(cfg, api, lambda: ["the-loop:nope"]) == Choice("codex", "project")
    assert harness_choice.choose(cfg, api, None) == Choice("codex", "project")
    assert harness_choice.choose(cfg, web, lambda: ["the-loop:default"]) == Choice(
        "default", "label"
    )
    assert harness_choice.choose(cfg, web, lambda: []) == Choice("default", "default")


def test_labels_are_not_asked_without_named_harnesses() -> None:
    cfg = config({**GITHUB, "harnesses": {}})

    def labels() -> list[str]:
        raise AssertionError("asked GitHub for labels with no harness to pick")

    ref = WorkItemRef("github", "acme/api", 1)
    assert harness_choice.choose(cfg, ref, labels) == Choice("default", "default")


def test_a_harness_label_follows_the_projects_trigger_label() -> None:
    cfg = config({**GITHUB, "projects": {"acme/api": {"triggerLabel": "agent"}}})
    assert cfg.harness_label_names("acme/api", ["the-loop:codex", "agent:codex"]) == ["codex"]
    assert cfg.harness_label_names("acme/web", ["agent:codex"]) == []


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        s = Store.open(tmp_path)
    else:
        cluster = request.getfixturevalue("cluster")
        s = Store.open(url=cluster.create_database(), password=cluster.password)
    yield s
    s.close()


def test_the_choice_is_kept_per_item_on_both_backends(store: Store) -> None:
    one, two = WorkItemRef("github", "acme/api", 1), WorkItemRef("local", "loop", 1)
    assert harness_choice.read(store, one) is None
    harness_choice.record(store, one, Choice("codex", "label"))
    harness_choice.record(store, two, Choice("default", "default"))
    harness_choice.record(store, one, Choice("fast", "project"))  # the next session's
    assert harness_choice.read(store, one) == Choice("fast", "project")
    assert harness_choice.read(store, two) == Choice("default", "default")


def test_a_live_session_keeps_its_recorded_harness_while_it_is_configured() -> None:
    cfg = config(GITHUB)
    assert harness_choice.in_force(cfg, Choice("codex", "label")) == "codex"
    assert harness_choice.in_force(cfg, Choice("gone", "label")) == DEFAULT_HARNESS
    assert harness_choice.in_force(cfg, None) == DEFAULT_HARNESS  # from before names


def test_config_check_prints_the_effective_settings_per_project(
    run_cli: Any, write_config: Any
) -> None:
    write_config(
        {
            "tracker": "github",
            "github": {"repositories": ["acme/api", "acme/web"]},
            "authorizedActors": ["alice"],
            "harnesses": {"codex": {"adapter": "codex", "extraArgs": ["--api-key=s3cr3t"]}},
            "projects": {"acme/api": {"harness": "codex", "authorizedActors": ["carol"]}},
        }
    )
    result = run_cli("config", "check", "-o", "json")
    assert result.exit_code == 0, result.output
    projects = json.loads(result.stdout)["effective"]["projects"]
    assert list(projects) == ["acme/api", "acme/web"]
    api, web = projects["acme/api"], projects["acme/web"]
    assert api["harness"] == "codex"
    assert api["adapter"] == "codex"
    assert api["authorizedActors"] == ["alice", "carol"]
    assert api["extraArgs"] == ["--api-key=<redacted>"]
    assert api["overridden"] == ["authorizedActors", "harness"]
    assert web["harness"] == "default"
    assert web["overridden"] == []
    assert "s3cr3t" not in result.stdout
    text = run_cli("config", "check", "projects.acme/api")
    assert text.exit_code == 0, text.output
    assert "harness: codex" in text.stdout


def test_repositories_are_read_under_their_projects_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`projects.P.triggerLabel` and `.authorizedActors` steer the poller per repository:
    one GitHub source per set of rules, one cursor for all (the fake GitHub)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fakegithub import FakeGitHub

    from loop_cli.github.grouped import GroupedSource
    from loop_cli.github.source import GitHubSource
    from loop_cli.runtime import build_source

    token = "ghp_projectsTEST"
    with FakeGitHub(token=token, login="loop-bot") as fake:
        fake.repo("acme/api")
        fake.repo("acme/web")
        cfg = config(
            {
                "tracker": "github",
                "github": {
                    "repositories": ["acme/api", "acme/web"],
                    "tokenEnv": "PROJECTS_GH_TOKEN",
                    "apiUrl": fake.api_url,
                },
                "authorizedActors": ["alice"],
                "projects": {"acme/api": {"triggerLabel": "agent", "authorizedActors": ["carol"]}},
            }
        )
        store = Store.open(tmp_path)
        monkeypatch.setenv("PROJECTS_GH_TOKEN", token)
        source = build_source(cfg, store)
        assert isinstance(source, GroupedSource)
        for sub in source.sources:
            assert isinstance(sub, GitHubSource)
            sub._clock = lambda: fake.now  # the fake's clock, as the source tests do
            # Closing references still route to every watched repository (issue 27.2).
            assert sub._configured == {"acme/api", "acme/web"}
        cursor = source.poll(None).cursor  # baselines both repositories
        fake.open_issue("acme/api", title="api by agent label", labels=("agent",))
        fake.open_issue("acme/web", title="web by agent label", labels=("agent",))
        fake.open_issue("acme/web", title="web by the-loop label", labels=("the-loop",))
        fake.tick(5)
        batch = source.poll(cursor)
        assert batch.errors == []
        opened = sorted(str(e.work_item) for e in batch.events)
        assert opened == ["github:acme/api#1", "github:acme/web#2"]
        cursor = batch.cursor
        assert set(json.loads(cursor or "{}")["repos"]) == {"acme/api", "acme/web"}
        fake.comment("acme/api", 1, "carol on api", user="carol")
        fake.comment("acme/web", 2, "carol on web", user="carol")
        fake.comment("acme/web", 2, "alice on web", user="alice")
        for _ in range(3):
            fake.tick(150)
            batch = source.poll(cursor)
            cursor = batch.cursor
            if batch.events:
                break
        bodies = sorted(e.body for e in batch.events)
        assert bodies == ["alice on web", "carol on api"]
        source.close()
        store.close()


def test_a_harness_label_on_github_picks_the_harness_of_the_next_session_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`the-loop:codex` read from the fake GitHub when a session is about to start; the
    live session keeps its harness when the label changes; closed, the next one follows
    the label."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fakegithub import FakeGitHub

    from loop_cli.config import LoadedConfig
    from loop_cli.runtime import Runtime

    token = "ghp_labelsTEST"
    with FakeGitHub(token=token, login="loop-bot") as fake:
        fake.open_issue("acme/api", labels=("the-loop", "the-loop:codex"))
        data = {
            "stateDir": str(tmp_path / "state"),
            "tracker": "github",
            "github": {
                "repositories": ["acme/api"],
                "tokenEnv": "LABELS_GH_TOKEN",
                "apiUrl": fake.api_url,
            },
            "harnesses": {"codex": {"adapter": "codex"}, "fast": {"adapter": "claude-code"}},
        }
        monkeypatch.setenv("LABELS_GH_TOKEN", token)
        rt = Runtime(LoadedConfig(config(data), None, "test"))
        ref = WorkItemRef("github", "acme/api", 1)
        try:
            fake.reset_log()
            assert rt.harness_for(ref) == "codex"
            assert fake.count("/repos/acme/api/issues/1") == 1
            assert harness_choice.read(rt.store, ref) == Choice("codex", "label")
            _, dispatcher = rt.dispatcher_for(ref.project, "codex")
            assert dispatcher.adapter.name == "codex"
            rt.store.registry.register(ref, harness="codex", conversation_id="c1", cwd=tmp_path)
            fake.label("acme/api", 1, "the-loop:fast")  # the last harness label wins
            fake.reset_log()
            assert rt.harness_for(ref) == "codex"  # live: its own harness, GitHub not asked
            assert fake.count("/repos/acme/api/issues/1") == 0
            rt.store.registry.close(ref)
            assert rt.harness_for(ref) == "fast"
            fake.fail_next(503, count=5)
            rt.store.registry.register(ref, harness="x", conversation_id=None, cwd=tmp_path)
            rt.store.registry.close(ref)
            from loop_cli.github.client import GitHubError

            with pytest.raises(GitHubError, match="503"):
                rt.harness_for(ref)  # the drain turns this into launch_unavailable (retried)
        finally:
            rt.close()


def test_a_projects_unreadable_env_file_is_a_warning_naming_its_key(
    run_cli: Any, write_config: Any, tmp_path: Path
) -> None:
    write_config({"projects": {"loop": {"env": {"file": str(tmp_path / "missing.env")}}}})
    result = run_cli("config", "check")
    assert result.exit_code == 0, result.output
    assert "projects.loop.env.file:" in result.stderr
    assert "the sessions of loop could not start" in result.stderr
    assert run_cli("config", "check", "--strict").exit_code == 2
