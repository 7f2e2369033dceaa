"""loop_tmux.testing: the pytest plugin every suite with loop-tmux installed gets."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loop_tmux import Tmux
from loop_tmux.testing import finished_records, wait_for, wait_until

pytest_plugins = ["pytester"]


def test_wait_for_returns_the_first_truthy_value() -> None:
    values = iter([0, "", "found", "later"])
    assert wait_for(lambda: next(values), timeout=5, interval=0.001) == "found"


def test_wait_for_returns_the_last_value_at_its_deadline() -> None:
    calls: list[int] = []

    def never() -> int:
        calls.append(1)
        return 0

    assert wait_for(never, timeout=0.05, interval=0.01) == 0
    assert len(calls) >= 2  # polled, not asked once


def test_wait_until_fails_the_test_naming_what_never_happened() -> None:
    with pytest.raises(pytest.fail.Exception, match="waiting for the pane to print"):
        wait_until(lambda: None, "the pane to print", timeout=0.05, interval=0.01)
    assert wait_until(lambda: [1], "a list") == [1]


def test_importing_loop_tmux_imports_neither_pytest_nor_the_plugin() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, loop_tmux; "
            "print('pytest' in sys.modules, 'loop_tmux.testing' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "False"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_suite_without_conftest_gets_a_private_server_killed_at_teardown(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The entry point registers the plugin: a bare test file uses the fixtures; after
    its run the private server is gone, and a bystander server on another socket (as an
    operator's would be) still runs."""
    record = tmp_path / "socket-name"
    bystander = f"loop-test-bystander-{tmp_path.name}"
    subprocess.run(
        ["tmux", "-L", bystander, "-f", "/dev/null", "new-session", "-d", "-s", "b", "sleep 60"],
        check=True,
        timeout=30,
    )
    try:
        pytester.makepyfile(
            f"""
            from pathlib import Path

            def test_uses_the_private_server(tmux_socket, tmux_server, new_tmux_socket):
                Path({str(record)!r}).write_text(tmux_socket)
                assert tmux_server.socket_name == tmux_socket
                assert new_tmux_socket() != tmux_socket
                assert tmux_server.spawn("loop-a", ["sleep", "60"], "/").ok
                assert tmux_server.probe("loop-a").name == "LIVE"

            def test_the_fake(tmux_fake):
                client, state = tmux_fake
                state.add_session("loop-f")
                assert client.probe("loop-f").name == "LIVE"
            """
        )
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=2)
        name = record.read_text()
        gone = subprocess.run(["tmux", "-L", name, "list-sessions"], capture_output=True)
        assert gone.returncode != 0  # its server was killed at teardown
        alive = subprocess.run(["tmux", "-L", bystander, "list-sessions"], capture_output=True)
        assert alive.returncode == 0  # only that server
    finally:
        Tmux(socket_name=bystander, config_file="/dev/null").kill_server(timeout=15)


def test_finished_records_leave_a_line_still_being_written_for_the_next_poll(tmp_path):
    """A reader that polls a live writer's file sees whole records only: the piece after
    the last newline (part of an append) waits, and a blank line is no record."""
    path = tmp_path / "log.jsonl"
    assert finished_records(path) == []
    path.write_bytes(b'{"n": 1}\n\n{"n": 2}\n{"n": 3, "text": "half')
    assert finished_records(path) == [{"n": 1}, {"n": 2}]
    with path.open("ab") as handle:
        handle.write(b' done"}\n')
    assert finished_records(path) == [{"n": 1}, {"n": 2}, {"n": 3, "text": "half done"}]
