"""`the-loop gh-webhook start` refusals, through click's runner (no server started)."""

from __future__ import annotations

import pytest

from loop_cli.commands.webhook import is_loopback, resolve_secret
from loop_cli.errors import UsageError


def test_refuses_to_start_without_a_secret(write_config, run_cli, monkeypatch) -> None:
    monkeypatch.delenv("HOOK_SECRET", raising=False)
    write_config({"webhook": {"secretEnv": "HOOK_SECRET", "port": 1}})
    result = run_cli("gh-webhook", "start")
    assert result.exit_code == 2
    assert "webhook.secretEnv=HOOK_SECRET" in result.output
    assert "Traceback" not in result.output


def test_insecure_mode_only_on_loopback(write_config, run_cli, monkeypatch) -> None:
    monkeypatch.delenv("THE_LOOP_WEBHOOK_SECRET", raising=False)
    write_config({})
    result = run_cli("gh-webhook", "start", "--insecure-no-signature", "--host", "0.0.0.0")
    assert result.exit_code == 2
    assert "loopback" in result.output


def test_port_in_use_is_a_one_line_error(write_config, run_cli, monkeypatch) -> None:
    import socket

    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "x")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        write_config({"webhook": {"port": port}})
        result = run_cli("gh-webhook", "start")
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_secret_comes_from_the_named_variable(monkeypatch) -> None:
    monkeypatch.setenv("MY_HOOK", "v@lue")
    assert resolve_secret("MY_HOOK", False, "0.0.0.0") == b"v@lue"
    monkeypatch.setenv("MY_HOOK", "")
    with pytest.raises(UsageError) as err:
        resolve_secret("MY_HOOK", False, "127.0.0.1")
    assert "v@lue" not in str(err.value)
    assert resolve_secret("MY_HOOK", True, "127.0.0.1") is None


def test_route_refuses_a_harness_that_cannot_start(write_config, run_cli, monkeypatch) -> None:
    """--route dispatches: a missing harness program would use up each delivery."""
    import socket

    monkeypatch.setenv("THE_LOOP_WEBHOOK_SECRET", "x")
    with socket.socket() as taken:  # were the check skipped, binding would fail (exit 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        write_config({"webhook": {"port": port}, "harness": {"argv": ["no-such-agent-9q", "x"]}})
        result = run_cli("gh-webhook", "start", "--route")
    assert result.exit_code == 2, result.output
    assert "harness.argv[0]: harness binary 'no-such-agent-9q' is not found" in result.output
