"""The poller watches its ground: its state directory deleted or replaced under it is
an error event and a non-zero exit (a supervisor then restarts it on the real state),
never a daemon polling a deleted database while a second one is accepted beside it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from inbox_rig import Daemon, Rig

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]


@pytest.mark.parametrize("change", ["deleted", "replaced"])
def test_poller_exits_non_zero_when_its_state_directory_goes(
    tmp_path: Path, tmux_socket: str, change: str
) -> None:
    rig = Rig(tmp_path, tmux_socket)
    poller = rig.poller()
    started = time.monotonic()
    try:
        poller.start()
        assert poller.proc is not None
        if change == "deleted":
            shutil.rmtree(rig.state)
        else:
            rig.state.rename(tmp_path / "state.old")
            rig.state.mkdir()
        changed = time.monotonic()
        exited = wait_for(lambda: poller.proc.poll() is not None, timeout=30)
        took = time.monotonic() - changed
        lost = rig.events("daemon.state_lost")
        line = (
            f"state directory {change}: exited={poller.proc.returncode} {took:.1f}s later; "
            f"daemon.state_lost events={[(e['level'], e['detail']) for e in lost]}; "
            f"in {time.monotonic() - started:.1f}s"
        )
        print("\n" + line)
        assert exited, f"{line}\n{poller.log()}"
        assert poller.proc.returncode != 0, f"{line}\n{poller.log()}"
        assert lost, line
        assert all(e["level"] == "error" for e in lost), line
        assert str(rig.state) in poller.log(), poller.log()
    finally:
        rig.close()


def _status(rig: Rig) -> tuple[int, dict]:
    import json

    done = rig.cli("status", "--format", "json", check=False)
    return done.returncode, json.loads(done.stdout)


def _failing(data: dict) -> dict[str, dict]:
    return {c["check"]: c for c in data["health"] if c["state"] != "ok"}


def test_status_is_not_ok_while_the_env_file_is_gone(tmp_path: Path, tmux_socket: str) -> None:
    """Issue 21 point 1, as reported: `env.file` moved away under a running `poll start`.
    Every cycle now fails and nothing can be delivered, so status must say so (JSON
    `ok: false`, a failing `poll-cycles` check naming the file, exit 1) and say it again
    is fine once the file is back. The daemon's log names each refused delivery."""
    env_file = tmp_path / "agent.env"
    env_file.write_text("REGION=eu\n")
    rig = Rig(tmp_path, tmux_socket, env_file=env_file, interval=0.5)
    poller = rig.poller()
    try:
        poller.start()
        ref = rig.cli("item", "open", "healthy").stdout.strip()
        assert wait_for(rig.starts, timeout=30), poller.log()
        assert wait_for(lambda: _status(rig)[0] == 0, timeout=30), _status(rig)

        env_file.rename(tmp_path / "agent.env.moved")
        rig.cli("item", "comment", ref, "while the file is gone")
        assert wait_for(lambda: _status(rig)[0] == 1, timeout=30), _status(rig)
        code, data = _status(rig)
        assert code == 1, data
        assert data["ok"] is False
        cycles = _failing(data)["poll-cycles"]
        assert "poll cycles failed" in cycles["reason"]
        assert str(env_file) in cycles["reason"]
        assert cycles["remedy"]
        text = rig.cli("status", check=False).stdout
        assert "health:    NOT OK" in text
        assert "poll-cycles: the last" in text
        assert "remedy:" in text
        # The daemon's own log: the refused delivery with its ref, delivery id and reason.
        assert wait_for(lambda: "reason=launch_unavailable" in poller.err.read_text()), poller.log()
        (line,) = [
            x for x in poller.err.read_text().splitlines() if "reason=launch_unavailable" in x
        ][:1]
        assert f" dispatch.failed {ref} comment:local:" in line

        (tmp_path / "agent.env.moved").rename(env_file)
        assert wait_for(lambda: _status(rig)[0] == 0, timeout=30), _status(rig)
    finally:
        rig.close()


def test_poll_start_logs_decisions_and_no_idle_cycles(tmp_path: Path, tmux_socket: str) -> None:
    """Issue 21 point 2: at the default level a real `poll start` logs its spawn and its
    delivery (ref, delivery id) and nothing per idle cycle; its stop is one line."""
    import signal
    import subprocess

    from inbox_rig import the_loop

    rig = Rig(tmp_path, tmux_socket, interval=0.3)
    ref = rig.cli("item", "open", "log me").stdout.strip()
    err_path = tmp_path / "poller.err"
    with open(err_path, "wb") as err, open(tmp_path / "poller.out", "wb") as out:
        proc = subprocess.Popen([*the_loop(), "poll", "start"], env=rig.env, stdout=out, stderr=err)
    try:
        assert wait_for(lambda: " session.spawned " in err_path.read_text(), timeout=30)
        rig.cli("item", "comment", ref, "a second message")
        assert wait_for(lambda: " dispatch.delivered " in err_path.read_text(), timeout=30)
        time.sleep(1.5)  # several idle cycles
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    lines = err_path.read_text().splitlines()
    assert proc.returncode == 0, lines
    assert any(f" INFO session.spawned {ref} opened:local:1 " in x for x in lines), lines
    assert any(f" INFO dispatch.delivered {ref} comment:local:" in x for x in lines), lines
    assert not [x for x in lines if "poll.cycle" in x or "poll cycle" in x], lines
    assert "stopped after" in lines[-1]
    assert (tmp_path / "poller.out").read_text() == ""  # the log is stderr alone
    assert "a second message" not in "\n".join(lines)  # bodies never logged


def test_webhook_logs_json_lines(tmp_path: Path, tmux_socket: str) -> None:
    """`gh-webhook start --log-format json`: every line one JSON object, its decisions
    (a refused delivery here) as the event log's records."""
    import json

    import httpx

    rig = Rig(tmp_path, tmux_socket)
    hook = Daemon(
        rig, "webhook", ["gh-webhook", "start", "--route", "--port", "0", "--log-format", "json"]
    )
    rig.daemons.append(hook)
    try:
        hook.start()
        answer = httpx.post(
            f"{hook.url}/",
            content=b"{}",
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "issues",
                "X-Hub-Signature-256": "sha256=00",
            },
        )
        assert answer.status_code == 401
        assert wait_for(lambda: "webhook.rejected" in hook.err.read_text(), timeout=15)
    finally:
        assert hook.stop() == 0
    records = [json.loads(x) for x in hook.err.read_text().splitlines() if x.strip()]
    rejected = [r for r in records if r.get("type") == "webhook.rejected"]
    assert rejected
    assert rejected[0]["detail"]["status"] == 401
    messages = [r.get("message", "") for r in records]
    assert any(m.startswith("gh-webhook listening on http://127.0.0.1:") for m in messages)
    assert messages[-1] == "gh-webhook stopped"
