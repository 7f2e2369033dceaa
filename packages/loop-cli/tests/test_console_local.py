"""The ticket is the console on the local tracker (issue 24): `item comment REF
"the-loop pause"` is run, never pasted, and answered with a reply; later comments wait
(state `paused` in `inbox list`, `sessions list`, `status`); `sessions resume` releases
them in order. Real CLI, real tmux on a private socket, the bundled demo agent."""

from __future__ import annotations

import json

from loop_dispatch.store import Store


def _record(isolated, ref):
    from loop_dispatch import WorkItemRef

    store = Store.open(isolated / "state")
    try:
        return store.registry.get(WorkItemRef.parse(ref))
    finally:
        store.close()


def _texts(conversation, rec) -> list[str]:
    return [str(r.get("text")) for r in conversation(rec.conversation_id)]


def test_pause_comment_holds_and_resume_releases_in_order(
    run_cli, loop_config, isolated, conversation, wait
):
    ref = run_cli("item", "open", "Make it green").output.strip()
    assert run_cli("poll", "--once").exit_code == 0
    rec = _record(isolated, ref)
    assert wait(lambda: any("Make it green" in t for t in _texts(conversation, rec)))
    assert run_cli("item", "comment", ref, "the-loop pause").exit_code == 0
    assert run_cli("poll", "--once").exit_code == 0
    run_cli("item", "comment", ref, "one, while paused")
    run_cli("item", "comment", ref, "two, while paused")
    run_cli("item", "comment", ref, "> the-loop resume (quoted: held like any comment)")
    assert run_cli("poll", "--once").exit_code == 0
    paused = json.loads(run_cli("inbox", "list", "--state", "paused", "-o", "json").output)
    assert [r["state"] for r in paused] == ["paused"] * 3
    (row,) = json.loads(run_cli("sessions", "list", "-o", "json").output)
    assert (row["hold"], row["held"]) == ("paused", 3)
    status = json.loads(run_cli("status", "-o", "json").output)
    assert status["inbox"]["paused"] == 3
    assert not any("paused" in t for t in _texts(conversation, rec))
    # the reply is the-loop's, marked, and never read back as a comment or command
    show = json.loads(run_cli("item", "show", ref, "--format", "json").output)
    replies = [a for a in show["activity"] if a.get("author") == "the-loop"]
    assert len(replies) == 1
    assert "paused" in replies[0]["body"]
    resumed = run_cli("sessions", "resume", ref, "-o", "json")
    assert resumed.exit_code == 0, resumed.output
    assert "3 held event(s) released" in json.loads(resumed.output)["detail"]
    assert run_cli("poll", "--once").exit_code == 0
    assert wait(lambda: sum("quoted: held" in t for t in _texts(conversation, rec)) == 1)
    texts = _texts(conversation, rec)
    got = [i for i, t in enumerate(texts) if "while paused" in t or "quoted: held" in t]
    assert [texts[i].count("one, while") for i in got] == [1, 0, 0]
    assert not any("the-loop pause" in t for t in texts)
    again = run_cli("sessions", "resume", ref)
    assert again.exit_code == 1
    assert "neither paused nor stopped" in again.output


def test_require_start_command_is_a_validated_key(write_config, run_cli):
    write_config({"github": {"requireStartCommand": True}})
    shown = run_cli("config", "check", "github.requireStartCommand")
    assert shown.exit_code == 0, shown.output
    assert "true" in shown.output
    write_config({"github": {"requireStartCommand": "sometimes"}})
    bad = run_cli("config", "check")
    assert bad.exit_code == 2
    assert "requireStartCommand" in bad.output


def test_the_status_word_replies_with_the_sessions_environment(
    run_cli, write_config, tmux_socket, isolated, conversation, wait
):
    """`the-loop status` on the ticket: live, and whether the agent runs on the env file's
    current values (stale: the names, never a value)."""
    (isolated / "work").mkdir()
    env_file = isolated / "agent.env"
    env_file.write_text("API_KEY=first-value\n")
    write_config(
        {
            "routing": {"tmuxSocket": tmux_socket},
            "harness": {"cwd": str(isolated / "work")},
            "env": {"file": str(env_file)},
        }
    )
    ref = run_cli("item", "open", "Env").output.strip()
    assert run_cli("poll", "--once").exit_code == 0
    rec = _record(isolated, ref)
    assert wait(lambda: any("Env" in t for t in _texts(conversation, rec)))

    def reply_to_status() -> str:
        run_cli("item", "comment", ref, "the-loop status")
        assert run_cli("poll", "--once").exit_code == 0
        show = json.loads(run_cli("item", "show", ref, "--format", "json").output)
        return [a for a in show["activity"] if a.get("author") == "the-loop"][-1]["body"]

    first = reply_to_status()
    assert "status: live" in first
    assert "environment up to date" in first
    env_file.write_text("API_KEY=rotated-value\n")
    second = reply_to_status()
    assert "environment stale (API_KEY)" in second
    assert "rotated-value" not in second
    assert "first-value" not in second


def test_sessions_restart_comment_relaunches_in_place_and_records_the_word(
    run_cli, loop_config, isolated, tmux_socket, conversation, wait
):
    import subprocess

    ref = run_cli("item", "open", "Relaunch me").output.strip()
    assert run_cli("poll", "--once").exit_code == 0
    rec = _record(isolated, ref)
    assert wait(lambda: any("Relaunch me" in t for t in _texts(conversation, rec)))

    def pane_pid() -> str:
        return subprocess.run(
            [
                "tmux",
                "-L",
                tmux_socket,
                "list-panes",
                "-t",
                f"={rec.tmux_name}",
                "-F",
                "#{pane_pid}",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()

    before = pane_pid()
    done = run_cli("sessions", "restart", ref, "--comment", "-o", "json")
    assert done.exit_code == 0, done.output
    assert [r["outcome"] for r in json.loads(done.output)] == ["restarted"]
    assert wait(lambda: pane_pid() not in ("", before))
    after = pane_pid()
    assert _record(isolated, ref).conversation_id == rec.conversation_id  # resumed
    show = json.loads(run_cli("item", "show", ref, "--format", "json").output)
    posted = [a for a in show["activity"] if "the-loop restart" in str(a.get("body"))]
    assert len(posted) == 1
    assert run_cli("poll", "--once").exit_code == 0  # the posted word is not run again
    assert pane_pid() == after
    assert not any("the-loop restart" in t for t in _texts(conversation, rec))
    refused = run_cli("sessions", "restart", "--all", "--comment")
    assert refused.exit_code == 2
    assert "--comment restarts the work items named" in refused.output
