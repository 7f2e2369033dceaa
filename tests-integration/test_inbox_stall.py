"""A tmux server that stops answering is not a failure of the events sent to it.

The private tmux server of each test is SIGSTOPped (its pid, never another server's;
SIGCONT always follows in a `finally`) while the real daemons run: comments accepted
during the stall wait in the inbox and are delivered once, in order, when tmux answers
again; a spawn tmux carries out late is adopted; a close ends its agent once tmux
answers; a SIGTERM during the stall stops the poller promptly. Counts are printed
(run with `-s`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from inbox_rig import (
    MARK_RE,
    REPO,
    TMUX_TIMEOUT,
    Rig,
    comment_body,
    marker,
    new_guid,
    order_violations,
    post,
    proc_gone,
    tally,
    the_loop,
    wait_delivered,
)

from loop_dispatch import WorkItemRef
from loop_tmux import Tmux
from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

INTERVAL = 1.0
MAX_RETRIES = 3
MAX_BACKOFF = 2.0
OLD_WINDOW = MAX_RETRIES * INTERVAL  # before the inbox: polling.maxRetries x interval
STALL = 10 * OLD_WINDOW
PER_ITEM = 4
STALL_BOUND = MAX_BACKOFF + TMUX_TIMEOUT  # one backoff step + one tmux timeout


def opening(n: int) -> str:
    """The marker in the title of the n-th item a test opens (its opening event)."""
    return marker(900 + n, 0)


def _open_items(rig: Rig, count: int) -> list[WorkItemRef]:
    """`the-loop item open`, `count` at once; refs in item order. Item n's title
    carries `opening(n)`."""
    opened: list[str] = []

    def one(n: int) -> None:
        opened.append(rig.cli("item", "open", f"item {n}: {opening(n)}").stdout.strip())

    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(opened) == count, opened
    return [WorkItemRef.parse(r) for r in sorted(opened)]


def _failed(rig: Rig, ref: str, reason: str | None = None, kind: str | None = None) -> list[dict]:
    return [
        e
        for e in rig.events("dispatch.failed")
        if e.get("workItem") == ref
        and (reason is None or e["detail"].get("reason") == reason)
        and (kind is None or e["detail"].get("kind") == kind)
    ]


def _delivery_times(rig: Rig) -> dict[str, float]:
    """Marker -> the wall time the harness recorded it (first arrival)."""
    out: dict[str, float] = {}
    for text, record in rig.received():
        for m in MARK_RE.finditer(text):
            out.setdefault(m.group(0), float(record["ts"]))
    return out


@dataclass
class StallSeen:
    """What one stall run observed, after the thaw."""

    result: dict[str, int]
    duplicated: int
    respawned: int
    starts: int
    sessions: int
    gave_up: int
    order: list[str]
    strangers: set[int]
    latest: float
    line: str


def _observe_stall(
    rig: Rig, label: str, sent: list[str], thawed: float, sessions: int, harness_pids: set[int]
) -> StallSeen:
    """After the thaw: what reached the agents, how, and how soon."""
    wait_delivered(rig, sent, timeout=STALL_BOUND + 60)
    time.sleep(MAX_BACKOFF)  # a late second paste would land within one backoff step
    counts = rig.marker_counts()
    result = tally(sent, counts)
    times = _delivery_times(rig)
    latest = max((times[m] - thawed for m in sent if m in times), default=float("nan"))
    duplicated = result["twice"] + result["more"]
    respawned = len(rig.events("session.respawned"))
    starts = len(rig.starts())
    order = order_violations(rig)
    gave_up = len(rig.events("inbox.gave_up"))
    pids = {record["pid"] for _, record in rig.received() if record.get("event") == "message"}
    line = (
        f"{label}: stalled {STALL:g}s (old give-up window {OLD_WINDOW:g}s); sent={len(sent)} "
        f"delivered once={result['once']} duplicated={duplicated} lost={result['lost']} "
        f"respawned={respawned} harness starts={starts} (before: {sessions}) "
        f"gave up={gave_up} order violations={len(order)}; last delivery "
        f"{latest:.1f}s after the thaw (bound {STALL_BOUND:g}s + 3s)"
    )
    print("\n" + line)
    return StallSeen(
        result=result,
        duplicated=duplicated,
        respawned=respawned,
        starts=starts,
        sessions=sessions,
        gave_up=gave_up,
        order=order,
        strangers=pids - harness_pids,
        latest=latest,
        line=line,
    )


def _assert_stall(seen: StallSeen | BaseException) -> None:
    """0 lost, 0 duplicated, 0 respawned, in order, within one backoff step (+ tmux)."""
    if isinstance(seen, BaseException):
        raise seen
    line = seen.line
    assert seen.result["lost"] == 0, line
    assert seen.duplicated == 0, line
    assert seen.respawned == 0, line
    assert seen.starts == seen.sessions, line
    assert seen.gave_up == 0, line
    assert seen.order == [], f"{line}: {seen.order[:5]}"
    assert not seen.strangers, f"{line}: pastes reached other processes {seen.strangers}"
    assert seen.latest <= STALL_BOUND + 3.0, line


def _poller_stall(tmp: Path, socket_name: str) -> StallSeen:
    rig = Rig(tmp, socket_name, interval=INTERVAL, max_retries=MAX_RETRIES, max_backoff=MAX_BACKOFF)
    refs = _open_items(rig, 3)
    poller = rig.poller()
    try:
        poller.start()
        assert wait_for(lambda: len(rig.starts()) == len(refs), timeout=60), poller.log()
        harness_pids = {s["pid"] for s in rig.starts()}
        sent = [opening(n) for n in range(len(refs))]
        with rig.stalled():
            stopped = time.monotonic()
            for k in range(1, PER_ITEM + 1):
                for ref in refs:
                    text = f"comment {k}: {marker(ref.number, k)}"
                    rig.cli("item", "comment", str(ref), text)
                    sent.append(marker(ref.number, k))
            # The stall is felt (attempts fail transiently) and outlasts the old window.
            assert wait_for(lambda: _failed(rig, str(refs[0])), timeout=STALL), poller.log()
            time.sleep(max(0.0, stopped + STALL - time.monotonic()))
            thawed = time.time()
        seen = _observe_stall(rig, "poller path", sent, thawed, len(refs), harness_pids)
        assert poller.alive(), poller.log()
        return seen
    finally:
        rig.close()


def _webhook_stall(tmp: Path, socket_name: str) -> StallSeen:
    rig = Rig(
        tmp,
        socket_name,
        tracker="github",
        interval=INTERVAL,
        max_retries=MAX_RETRIES,
        max_backoff=MAX_BACKOFF,
    )
    items = (21, 22, 23)
    receiver = rig.webhook()
    comment_id = iter(range(700_000, 800_000))
    try:
        receiver.start()
        for item in items:  # each item is opened by its first comment
            r = post(
                receiver.url, comment_body(item, next(comment_id), marker(item, 0)), new_guid()
            )
            assert r.status_code == 202, r.text
        assert wait_for(lambda: len(rig.starts()) == len(items), timeout=60), receiver.log()
        harness_pids = {s["pid"] for s in rig.starts()}
        sent = [marker(item, 0) for item in items]
        with rig.stalled():
            stopped = time.monotonic()
            for k in range(1, PER_ITEM + 1):
                for item in items:
                    body = comment_body(item, next(comment_id), f"comment {k}: {marker(item, k)}")
                    asked = time.monotonic()
                    r = post(receiver.url, body, new_guid())
                    # Accepting needs the store only, never tmux.
                    assert r.status_code == 202, r.text
                    assert time.monotonic() - asked < 5.0
                    sent.append(marker(item, k))
            ref = f"github:{REPO}#{items[0]}"
            assert wait_for(
                lambda: [e for e in rig.events("dispatch.failed") if e.get("workItem") == ref],
                timeout=STALL,
            ), receiver.log()
            time.sleep(max(0.0, stopped + STALL - time.monotonic()))
            thawed = time.time()
        seen = _observe_stall(rig, "webhook-only path", sent, thawed, len(items), harness_pids)
        assert receiver.alive(), receiver.log()
        return seen
    finally:
        rig.close()


@pytest.fixture(scope="module")
def stalls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both paths stalled at once (one deployment and private tmux server each), so the
    two 30 s stalls cost the suite 30 s; each path's test asserts on its own run."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    runs = {"poller": _poller_stall, "webhook": _webhook_stall}
    sockets = {k: f"loop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}" for k in runs}
    seen: dict[str, Any] = {}
    started = time.monotonic()

    def run(kind: str) -> None:
        try:
            seen[kind] = runs[kind](tmp_path_factory.mktemp(f"stall-{kind}"), sockets[kind])
        except BaseException as exc:  # handed to that path's test
            seen[kind] = exc

    threads = [threading.Thread(target=run, args=(kind,)) for kind in runs]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(STALL + 240)
        print(f"\nboth stall runs took {time.monotonic() - started:.1f}s")
        yield seen
    finally:
        for name in sockets.values():
            Tmux(socket_name=name, config_file="/dev/null").kill_server(timeout=15)


def test_poller_path_outlasts_a_tmux_stall_of_ten_old_give_up_windows(
    stalls: dict[str, Any],
) -> None:
    _assert_stall(stalls.get("poller", AssertionError("the poller run did not finish")))


def test_webhook_only_path_outlasts_a_tmux_stall_of_ten_old_give_up_windows(
    stalls: dict[str, Any],
) -> None:
    _assert_stall(stalls.get("webhook", AssertionError("the webhook run did not finish")))


# -- a spawn tmux carries out late ---------------------------------------------------------

WRAPPER = """#!/bin/sh
# The real tmux, except that the first new-session after the flag file appears finds
# the server stopped (SIGSTOP of the test's own server, by the pid the test wrote).
case " $* " in
  *" new-session "*)
    if rm "$LOOP_TEST_STOP_FLAG" 2>/dev/null; then kill -STOP "$(cat "$LOOP_TEST_PID_FILE")"; fi ;;
esac
exec {real} "$@"
"""


@dataclass
class LateSpawn:
    """What one late-new-session run observed (shared by the tests below)."""

    adopted: list[dict]
    failures: list[str]
    starts: list[dict]
    follow: list[dict]
    opening: int
    respawned: list[dict]
    line: str


def _late_spawn(tmp: Path, socket_name: str) -> LateSpawn:
    real = shutil.which("tmux")
    assert real is not None
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "tmux"
    wrapper.write_text(WRAPPER.format(real=real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    flag, pid_file = tmp / "stop-flag", tmp / "tmux.pid"
    rig = Rig(
        tmp,
        socket_name,
        max_backoff=MAX_BACKOFF,
        path_prefix=bin_dir,
        extra_env={"LOOP_TEST_STOP_FLAG": str(flag), "LOOP_TEST_PID_FILE": str(pid_file)},
    )
    started = time.monotonic()
    _open_items(rig, 1)
    poller = rig.poller()
    pid = None
    try:
        poller.start()
        assert wait_for(lambda: len(rig.starts()) == 1, timeout=60), poller.log()
        pid = rig.tmux_pid()
        assert pid
        pid_file.write_text(str(pid))
        flag.touch()
        opened = rig.cli("item", "open", f"second {marker(2, 0)}").stdout.strip()
        second = str(WorkItemRef.parse(opened))
        try:
            assert wait_for(lambda: not flag.exists(), timeout=30), "no new-session was sent"
            # The spawn times out (tmux stopped under it) and is rolled back, retried later.
            assert wait_for(lambda: _failed(rig, second), timeout=TMUX_TIMEOUT + 30), poller.log()
        finally:
            flag.unlink(missing_ok=True)
            os.kill(pid, signal.SIGCONT)
        adopted = wait_for(
            lambda: [e for e in rig.events("session.adopted") if e["workItem"] == second],
            timeout=TMUX_TIMEOUT + 30,
        )
        failures = [e["detail"].get("reason") for e in _failed(rig, second)]
        assert adopted, f"not adopted; failures for {second}: {failures}; {poller.log()}"
        rig.cli("item", "comment", second, f"follow-up {marker(2, 1)}")
        assert wait_for(lambda: rig.marker_counts()[marker(2, 1)], timeout=30), poller.log()
        time.sleep(MAX_BACKOFF)  # a late second paste would land within one backoff step
        starts = [s for s in rig.starts() if marker(2, 0) in (s.get("prompt") or "")]
        follow = [r for t, r in rig.received() if marker(2, 1) in t]
        opening = rig.marker_counts()[marker(2, 0)]
        line = (
            f"late new-session: adopted={len(adopted)} failures before={failures} "
            f"harness starts for the item={len(starts)} follow-up pastes={len(follow)} "
            f"opening received {opening} time(s) in {time.monotonic() - started:.1f}s"
        )
        print("\n" + line)
        return LateSpawn(
            adopted=adopted,
            failures=failures,
            starts=starts,
            follow=follow,
            opening=opening,
            respawned=rig.events("session.respawned"),
            line=line,
        )
    finally:
        flag.unlink(missing_ok=True)
        if pid:
            os.kill(pid, signal.SIGCONT)
        rig.close()


@pytest.fixture(scope="module")
def late_spawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LateSpawn]:
    """One run of the scenario on a private tmux server of its own (killed after)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    socket_name = f"loop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        yield _late_spawn(tmp_path_factory.mktemp("late-spawn"), socket_name)
    finally:
        Tmux(socket_name=socket_name, config_file="/dev/null").kill_server(timeout=15)


def test_a_new_session_tmux_carries_out_late_is_adopted(late_spawn: LateSpawn) -> None:
    """The agent tmux started late is adopted; the follow-up reaches that same agent."""
    seen = late_spawn
    assert seen.adopted, seen.line
    assert "occupied_unregistered" not in seen.failures, seen.line
    assert len(seen.starts) == 1, seen.line
    assert len(seen.follow) == 1, seen.line
    assert seen.follow[0]["pid"] == seen.starts[0]["pid"], seen.line
    assert seen.follow[0]["session_id"] == seen.starts[0]["session_id"], seen.line
    assert seen.respawned == [], seen.line


def test_an_adopted_late_spawn_receives_its_opening_event_once(late_spawn: LateSpawn) -> None:
    assert late_spawn.opening == 1, late_spawn.line


# -- close during a stall; restart racing a close --------------------------------------------


def test_a_close_during_a_stall_ends_the_agent_once_tmux_answers(
    tmp_path: Path, tmux_socket: str
) -> None:
    rig = Rig(tmp_path, tmux_socket, max_backoff=MAX_BACKOFF)
    started = time.monotonic()
    (ref,) = _open_items(rig, 1)
    poller = rig.poller()
    try:
        poller.start()
        assert wait_for(lambda: len(rig.starts()) == 1, timeout=60), poller.log()
        agent = rig.starts()[0]["pid"]
        with rig.stalled():
            rig.cli("item", "close", str(ref))
            # The close is attempted while tmux is silent (failed, or settled blindly).
            assert wait_for(
                lambda: _failed(rig, str(ref), kind="closed") or rig.events("session.closed"),
                timeout=30,
            ), poller.log()
            assert not proc_gone(agent)
            thawed = time.monotonic()
        gone = wait_for(lambda: proc_gone(agent), timeout=MAX_BACKOFF + 2 * TMUX_TIMEOUT)
        took = time.monotonic() - thawed
        sessions = json.loads(rig.cli("sessions", "list", "--format", "json").stdout)
        exits = [r for r in rig.records() if r.get("event") == "exit" and r["pid"] == agent]
        line = (
            f"close during a stall: agent gone={bool(gone)} {took:.1f}s after the thaw; "
            f"record={[s['status'] for s in sessions]}; harness exit records={exits}; "
            f"failed attempts={len(_failed(rig, str(ref), kind='closed'))}; "
            f"in {time.monotonic() - started:.1f}s"
        )
        print("\n" + line)
        assert gone, line
        assert [s["status"] for s in sessions] == ["closed"], line
        assert rig.events("session.closed"), line
    finally:
        rig.close()


def test_restart_racing_a_close_never_relaunches_the_closed_item(
    tmp_path: Path, tmux_socket: str
) -> None:
    from loop_dispatch.lock import item_lock
    from loop_dispatch.store import Store

    env_file = tmp_path / "agent.env"
    env_file.write_text("ROTATED_NAME=first\n")
    rig = Rig(tmp_path, tmux_socket, env_file=env_file)
    started = time.monotonic()
    refs = _open_items(rig, 2)
    for ref in refs:
        rig.cli("sessions", "start", str(ref))
    store = Store.open(rig.state)
    try:
        order = [r.work_item for r in store.registry.list("active")]
        assert order == refs
        held, closing = order
        closing_name = store.registry.get(closing).tmux_name
        with item_lock(rig.state / "locks", held, timeout=10) as held_path:
            # Restart selects both (both active), then waits for the held item's lock.
            restart = subprocess.Popen(
                [*the_loop(), "sessions", "restart", "--all", "--force"],
                env=rig.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            fd_dir = Path(f"/proc/{restart.pid}/fd")

            def waits_on_lock() -> bool:
                try:
                    return any(os.readlink(fd) == str(held_path) for fd in fd_dir.iterdir())
                except OSError:
                    return False

            assert wait_for(waits_on_lock, timeout=30), "restart never reached the item locks"
            rig.cli("sessions", "stop", str(closing))  # the close wins the race
        out, _ = restart.communicate(timeout=60)
        record = store.registry.get(closing)
        live = Tmux(socket_name=rig.socket_name).pane_pids(closing_name)
        line = (
            f"restart racing a close: closed item record={record.status if record else None} "
            f"live pids in {closing_name}={live}; restart said: {out.strip()[-600:]} "
            f"in {time.monotonic() - started:.1f}s"
        )
        print("\n" + line)
        assert record is not None, line
        assert record.status == "closed", line
        assert live == [], line
        assert "skipped-closed" in out, line
    finally:
        store.close()
        rig.close()


# -- SIGTERM during a stall --------------------------------------------------------------------


def _tmux_children(pid: int) -> list[int]:
    """The tmux client processes `pid` is waiting on (its attempts under way in tmux)."""
    out = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_file.read_text()
        except OSError:
            continue
        comm = text[text.find("(") + 1 : text.rfind(")")]
        fields = text[text.rfind(")") + 2 :].split()
        if comm.startswith("tmux") and fields[1] == str(pid):
            out.append(int(stat_file.parent.name))
    return out


def _settled(rig: Rig, store: Any, refs: list[WorkItemRef]) -> bool:
    """Every item's opening spawned and nothing left open in the inbox."""
    spawned = {e["workItem"] for e in rig.events("session.spawned")}
    if not all(str(ref) in spawned for ref in refs):
        return False
    inbox = getattr(store, "inbox", None)  # (absent before the inbox: spawned suffices)
    return inbox is None or not inbox.entries(("pending", "claimed"))


@dataclass
class Stopped:
    """What one SIGTERM-during-a-stall run observed (shared by the tests below)."""

    took: float
    code: int
    in_tmux: int
    result: dict[str, int]
    line: str


def _sigterm_during_stall(tmp: Path, socket_name: str) -> Stopped:
    from loop_cli.tracker import LocalTracker
    from loop_dispatch.store import Store

    rig = Rig(tmp, socket_name, max_backoff=MAX_BACKOFF)
    started = time.monotonic()
    refs = _open_items(rig, 3)
    poller = rig.poller()
    store = Store.open(rig.state)
    try:
        poller.start()
        assert wait_for(lambda: len(rig.starts()) == len(refs), timeout=60), poller.log()
        # The openings are settled (spawned, survived) before the stall: the attempts
        # under way at the signal are the comments' pastes.
        assert wait_for(lambda: _settled(rig, store, refs), timeout=60), poller.log()
        sent = [opening(n) for n in range(len(refs))]
        assert poller.proc is not None
        daemon = poller.proc
        tracker = LocalTracker(store)
        with rig.stalled():
            for k in range(1, 3):
                for ref in refs:
                    tracker.comment(ref, f"comment {k}: {marker(ref.number, k)}")
                    sent.append(marker(ref.number, k))
            # Attempts are under way, waiting in tmux, when the signal comes (every item's
            # where they run concurrently).
            assert wait_for(lambda: _tmux_children(daemon.pid), timeout=30), poller.log()
            wait_for(lambda: len(_tmux_children(daemon.pid)) >= len(refs), timeout=3)
            in_tmux = len(_tmux_children(daemon.pid))
            asked = time.monotonic()
            daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(timeout=60)
            finally:
                took = time.monotonic() - asked
        # Nothing is lost by stopping: a new poller delivers what was waiting.
        poller.start()
        wait_delivered(rig, sent, timeout=60)
        time.sleep(MAX_BACKOFF)  # a late second paste would land within one backoff step
        result = tally(sent, rig.marker_counts())
        line = (
            f"SIGTERM during a stall: {in_tmux} attempts waiting in tmux; exited {code} after "
            f"{took:.1f}s (bound 2s + one tmux timeout {TMUX_TIMEOUT:g}s, asserted < 15s); "
            f"after a restart: sent={result['sent']} once={result['once']} "
            f"twice={result['twice']} more={result['more']} lost={result['lost']} "
            f"in {time.monotonic() - started:.1f}s"
        )
        print("\n" + line)
        return Stopped(took=took, code=code, in_tmux=in_tmux, result=result, line=line)
    finally:
        rig.close()
        store.close()


@pytest.fixture(scope="module")
def sigterm_in_stall(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stopped]:
    """One run of the scenario on a private tmux server of its own (killed after)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    socket_name = f"loop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        yield _sigterm_during_stall(tmp_path_factory.mktemp("sigterm"), socket_name)
    finally:
        Tmux(socket_name=socket_name, config_file="/dev/null").kill_server(timeout=15)


def test_sigterm_stops_the_poller_promptly_during_a_stall(sigterm_in_stall: Stopped) -> None:
    seen = sigterm_in_stall
    assert seen.took < 15.0, seen.line
    assert seen.code == 0, seen.line
    assert seen.result["lost"] == 0, seen.line


def test_sigterm_during_a_stall_duplicates_nothing(sigterm_in_stall: Stopped) -> None:
    seen = sigterm_in_stall
    assert seen.result["twice"] + seen.result["more"] == 0, seen.line
