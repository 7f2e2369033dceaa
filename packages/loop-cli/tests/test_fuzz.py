"""Issue 10: generated hostile input (hypothesis) over webhook bodies, payload paths,
env files, config files and CLI arguments. Thousands of cases: never a traceback,
never a 500, the receiver alive after all of them, every refusal one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakegithub import payloads, served

from loop_cli.config import parse_text as parse_config
from loop_cli.errors import ConfigError
from loop_cli.webhook.app import create_app
from loop_cli.webhook.payload import PayloadError, to_event
from loop_cli.webhook.verify import sign
from loop_dispatch import Event
from loop_envstate import EnvFileError, parse_text

SECRET = b"fuzz-secret"
QUICK = settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _template(kind: str) -> dict[str, Any]:
    if kind == "issue_comment":
        return payloads.issue_comment("Octo/App", number=3, comment_id=9, body="hi")
    issue = payloads.issue_json("Octo/App", 3, labels=("the-loop",))
    return {
        "action": "labeled",
        "label": {"name": "the-loop"},
        "repository": {"full_name": "Octo/App"},
        "issue": issue,
        "sender": {"login": "alice"},
    }


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    return out


def _replace(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    copy = dict(obj)
    copy[path[0]] = _replace(copy[path[0]], path[1:], value)
    return copy


@st.composite
def mutated_payload(draw: st.DrawFn) -> tuple[str, Any]:
    """A real payload with one field (anywhere) replaced by an arbitrary JSON value."""
    kind = draw(st.sampled_from(["issue_comment", "issues"]))
    base = _template(kind)
    path = draw(st.sampled_from(_paths(base)))
    return kind, _replace(base, path, draw(json_value | st.integers(min_value=10**9)))


@QUICK
@given(mutated_payload())
def test_payload_paths_give_an_event_an_ignore_or_one_line(case: tuple[str, Any]) -> None:
    from loop_cli.github.rules import Ignored, Rules

    kind, payload = case
    rules = Rules.build("the-loop", ["alice"], "loop-bot", ["octo/app"])
    try:
        result = to_event(kind, payload, rules)
    except PayloadError as exc:
        refusal = str(exc)
        assert refusal
        assert "\n" not in refusal
        return
    assert isinstance(result, (Event, Ignored))
    if isinstance(result, Event):  # whatever was accepted can be written and read back
        assert type(result.work_item).parse(str(result.work_item)) == result.work_item
        assert Event.from_dict(result.to_dict()) == result


@pytest.fixture(scope="module")
def receiver():
    accepted: list[Event] = []

    def accept(guid: str, kind: str, event: Event) -> str:
        accepted.append(event)
        return "accepted"

    app = create_app(
        SECRET, accept, authorized_actors=["alice"], trigger_label="the-loop", max_body=256 * 1024
    )
    with served(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client
        assert client.get("/healthz").json()["status"] == "ok"  # alive after all of it


body_strategy = (
    st.binary(max_size=2048)
    | json_value.map(lambda v: json.dumps(v).encode())
    | mutated_payload().map(lambda case: json.dumps(case[1]).encode())
    | st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n)
)


@QUICK
@given(body_strategy, st.sampled_from(["issue_comment", "issues", "ping", "push", ""]))
def test_signed_webhook_bodies_never_500(receiver: httpx.Client, body: bytes, kind: str) -> None:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": kind,
        "X-GitHub-Delivery": "fuzz",
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    answer = receiver.post("/", content=body, headers=headers)
    assert answer.status_code in (200, 202, 400, 413), answer.text
    reason = answer.json().get("reason", "")
    assert "\n" not in reason


@QUICK
@given(st.text(max_size=400))
def test_env_files_parse_or_refuse_in_one_line(text: str) -> None:
    try:
        env = parse_text(text, "fuzz.env")
    except EnvFileError as exc:
        refusal = str(exc)
        assert "\n" not in refusal
        return
    assert all(isinstance(n, int) for n in env.malformed)
    for value in env.values.values():  # a value never shows up in what is reported
        assert isinstance(value, str)


config_keys = st.sampled_from(
    ["harness", "webhook", "github", "routing", "env", "stateDir", "passEnv", "adapter", "port"]
)
yaml_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.tuples(config_keys, st.integers(0, 2), json_leaf.map(json.dumps)), max_size=8).map(
        lambda rows: "".join(f"{'  ' * d}{k}: {v}\n" for k, d, v in rows)
    ),
)


@QUICK
@given(yaml_text)
def test_config_files_validate_or_refuse_one_line_each(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    try:
        parse_config(text, path)
    except ConfigError as exc:
        lines = str(exc).splitlines()
        assert lines
        assert all(str(path) in line for line in lines)


SAFE_COMMANDS = [
    ["item", "open"],
    ["item", "comment", "local:loop#1"],
    ["item", "show"],
    ["item", "close"],
    ["sessions", "reset", "--dry-run"],
    ["events", "--item"],
    ["inbox", "list", "--state"],
    ["config", "check"],
]
arg_text = st.text(max_size=40) | st.binary(max_size=12).map(
    lambda b: b.decode("utf-8", "surrogateescape")
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SAFE_COMMANDS), st.lists(arg_text, min_size=1, max_size=2))
def test_cli_arguments_are_handled_or_refused_in_one_line(
    write_config, command: list[str], args: list[str]
) -> None:
    from loop_cli.main import cli

    write_config({"routing": {"tmuxSocket": "loop-fuzz-never-started"}})
    result = CliRunner().invoke(cli, [*command, *args])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) <= 1 or all(line.startswith("Error:") for line in errors)
