"""One item, one host: fencing a worker that is frozen or cut off, clocks that disagree,
a crashed worker's restart. Real PostgreSQL, real `poll start` workers, each with its own
private tmux server and fake-harness record; a loopback TCP proxy stands for the network
between a host and its database.

What is counted is the harnesses' own record (sent, once, twice, lost) and, sampled
every 0.1 s on both tmux servers, the seconds during which one item had a live agent on
two hosts at once: it must be 0.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from inbox_rig import Rig, fleet_host, marker, pane_pids, tally
from tcp_proxy import TcpProxy

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

LEASE = 3.0
MARGIN = 5.0  # loop_dispatch.fence.TAKEOVER_MARGIN_SECONDS
ITEMS = 3


def _host(
    tmp: Path, socket: str, name: str, cluster, url: str, lease: float = LEASE, **options
) -> Rig:
    return fleet_host(
        tmp, socket, name, cluster, url, capacity=ITEMS, lease=lease, interval=1.0,
        max_backoff=1.0, **options,
    )  # fmt: skip


class Overlap:
    """Samples both hosts' live `loop-*` sessions; sums the time one name is live on both."""

    def __init__(self, socket_a: str, socket_b: str) -> None:
        self.sockets = (socket_a, socket_b)
        self.seconds = 0.0
        self.items: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                a, b = (set(pane_pids(s)) for s in self.sockets)
            except Exception:
                a, b = set(), set()
            now = time.monotonic()
            if a & b:
                self.seconds += now - last
                self.items |= a & b
            last = now
            self._stop.wait(0.1)

    @contextmanager
    def watching(self) -> Iterator[Overlap]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=30)


def _placements(rig: Rig) -> dict[str, str]:
    done = rig.cli("sessions", "list", "--format", "json", check=False)
    rows = json.loads(done.stdout or "[]") if done.returncode == 0 else []
    return {r["ref"]: r["host"] for r in rows if r.get("host")}


def _open_items(rig: Rig, n: int) -> list[str]:
    return [rig.cli("item", "open", f"fenced {k}").stdout.strip() for k in range(n)]


def _comment(rig: Rig, refs: list[str], round_: int, sent: list[str]) -> None:
    for ref in refs:
        mark = marker(int(ref.rsplit("#", 1)[1]), round_)
        rig.cli("item", "comment", ref, f"round {round_}: {mark}", "--author", "alice")
        sent.append(mark)


def _all_arrived(a: Rig, b: Rig, sent: list[str], timeout: float) -> dict[str, int]:
    def counts():
        c = a.marker_counts() + b.marker_counts()
        return c if all(c[m] >= 1 for m in sent) else None

    wait_for(counts, timeout=timeout, interval=0.5)
    return tally(sent, a.marker_counts() + b.marker_counts())


def _items_on_a(a: Rig, b: Rig, refs: list[str], sent: list[str]) -> None:
    """Start with every item on host-a: only A runs while the items get their first
    event; B starts once A's agents hold them."""
    _comment(a, refs, 0, sent)
    assert wait_for(lambda: len(pane_pids(a.socket_name)) == len(refs), timeout=60)
    assert set(_placements(a).values()) == {"host-a"}
    assert _all_arrived(a, b, sent, 30)["lost"] == 0


def test_a_frozen_worker_ends_its_agents_before_another_host_takes_its_items(
    tmp_path: Path, tmux_socket: str, extra_socket, pg_cluster
) -> None:
    """SIGSTOP host-a's worker mid-stream for 14 s (lease 3 s): its fence keeper ends
    its agents by its own deadline, host-b takes the items only after lease + margin,
    and A, resumed, pastes nothing it had claimed (it had lapsed)."""
    url = pg_cluster.create_database()
    socket_b = extra_socket()
    a = _host(tmp_path / "a", tmux_socket, "host-a", pg_cluster, url)
    b = _host(tmp_path / "b", socket_b, "host-b", pg_cluster, url)
    try:
        pa, pb = a.poller(), b.poller()
        pa.start()
        refs = _open_items(a, ITEMS)
        sent: list[str] = []
        _items_on_a(a, b, refs, sent)
        pb.start()
        with Overlap(tmux_socket, socket_b).watching() as overlap:
            assert pa.proc is not None
            _comment(b, refs, 1, sent)  # in flight as A freezes
            os.kill(pa.proc.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            try:
                _comment(b, refs, 2, sent)
                moved = wait_for(
                    lambda: set(_placements(b).values()) == {"host-b"}, timeout=40, interval=0.5
                )
                assert moved, _placements(b)
                took = time.monotonic() - frozen
                time.sleep(max(0.0, 14.0 - (time.monotonic() - frozen)))
            finally:
                os.kill(pa.proc.pid, signal.SIGCONT)
            _comment(b, refs, 3, sent)
            result = _all_arrived(a, b, sent, 60)
            time.sleep(2.0)  # anything A would still paste after its thaw
        result = tally(sent, a.marker_counts() + b.marker_counts())
        print(
            f"SIGSTOP: {result}; items moved {took:.1f}s after the freeze; "
            f"two agents for one item: {overlap.seconds:.1f}s {sorted(overlap.items)}"
        )
        assert took >= LEASE, took  # never before the lease could have run out
        assert overlap.seconds == 0.0, (overlap.items, pa.logs())
        assert (result["lost"], result["twice"], result["more"]) == (0, 0, 0), result
        assert pa.alive(), pa.logs()  # it carries on (its items are elsewhere now)
    finally:
        a.close()
        b.close()


def test_a_worker_cut_off_from_the_database_ends_its_agents_before_they_move(
    tmp_path: Path, tmux_socket: str, extra_socket, pg_cluster
) -> None:
    """host-a reaches PostgreSQL through a proxy that stops forwarding for 14 s (its
    calls hang, they do not fail): A's agents end by its own deadline, B takes the
    items after lease + margin, nothing is delivered twice, A recovers."""
    url = pg_cluster.create_database()
    proxy = TcpProxy(pg_cluster.port)
    socket_b = extra_socket()
    a = _host(tmp_path / "a", tmux_socket, "host-a", pg_cluster, proxy.url(url))
    b = _host(tmp_path / "b", socket_b, "host-b", pg_cluster, url)
    try:
        pa, pb = a.poller(), b.poller()
        pa.start()
        refs = _open_items(a, ITEMS)
        sent: list[str] = []
        _items_on_a(a, b, refs, sent)
        pb.start()
        with Overlap(tmux_socket, socket_b).watching() as overlap:
            with proxy.paused():
                cut = time.monotonic()
                _comment(b, refs, 1, sent)
                moved = wait_for(
                    lambda: set(_placements(b).values()) == {"host-b"}, timeout=40, interval=0.5
                )
                assert moved, _placements(b)
                took = time.monotonic() - cut
                assert not pane_pids(tmux_socket)  # A's agents ended: none live
                time.sleep(max(0.0, 14.0 - (time.monotonic() - cut)))
            _comment(b, refs, 2, sent)
            result = _all_arrived(a, b, sent, 60)
            time.sleep(2.0)
        result = tally(sent, a.marker_counts() + b.marker_counts())
        print(
            f"cut off: {result}; items moved {took:.1f}s after the cut; "
            f"two agents for one item: {overlap.seconds:.1f}s {sorted(overlap.items)}"
        )
        assert overlap.seconds == 0.0, (overlap.items, pa.logs())
        assert (result["lost"], result["twice"], result["more"]) == (0, 0, 0), result
        assert wait_for(lambda: a.events("session.stale_ended"), timeout=30), pa.logs()
        assert pa.alive(), pa.logs()
    finally:
        a.close()
        b.close()
        proxy.close()


def test_a_host_whose_clock_runs_30s_ahead_takes_nothing_from_a_live_host(
    tmp_path: Path, tmux_socket: str, extra_socket, pg_cluster
) -> None:
    """host-b's wall clock is 30 s ahead (THE_LOOP_TEST_CLOCK_SKEW, test-only): leases
    are compared on the database's clock, so B sees A live and takes none of its items."""
    url = pg_cluster.create_database()
    socket_b = extra_socket()
    a = _host(tmp_path / "a", tmux_socket, "host-a", pg_cluster, url)
    b = _host(
        tmp_path / "b", socket_b, "host-b", pg_cluster, url,
        extra_env={"THE_LOOP_TEST_CLOCK_SKEW": "30"},
    )  # fmt: skip
    try:
        pa, pb = a.poller(), b.poller()
        pa.start()
        refs = _open_items(a, ITEMS)
        sent: list[str] = []
        _items_on_a(a, b, refs, sent)
        pb.start()
        with Overlap(tmux_socket, socket_b).watching() as overlap:
            for round_ in range(1, 4):
                _comment(a, refs, round_, sent)
                time.sleep(LEASE)
            result = _all_arrived(a, b, sent, 60)
            time.sleep(2.0)
        result = tally(sent, a.marker_counts() + b.marker_counts())
        placed = _placements(a)
        print(
            f"clock +30s: {result}; placements {sorted(placed.values())}; "
            f"two agents for one item: {overlap.seconds:.1f}s"
        )
        assert set(placed.values()) == {"host-a"}, placed
        assert not b.events("session.moved")
        assert overlap.seconds == 0.0, overlap.items
        assert (result["lost"], result["twice"], result["more"]) == (0, 0, 0), result
    finally:
        a.close()
        b.close()


def test_a_killed_worker_restarts_at_once_and_a_second_one_is_refused_in_one_line(
    tmp_path: Path, tmux_socket: str, extra_socket, pg_cluster
) -> None:
    """kill -9, then the restart (as systemd would, at once): accepted at once, its
    agents kept (the dead worker's keeper leaves them to it). A second worker under the
    same host name, elsewhere, is refused in one line (exit 1, no traceback)."""
    url = pg_cluster.create_database()
    lease = 10.0  # as in the issue: the old code refused restarts for up to 10 s
    a = _host(tmp_path / "a", tmux_socket, "host-a", pg_cluster, url, lease=lease)
    twin = _host(tmp_path / "twin", extra_socket(), "host-a", pg_cluster, url, lease=lease)
    try:
        pa = a.poller()
        pa.start()
        refs = _open_items(a, 1)
        sent: list[str] = []
        _comment(a, refs, 0, sent)
        assert wait_for(lambda: pane_pids(tmux_socket), timeout=60)
        before = pane_pids(tmux_socket)
        pa.kill9()
        killed = time.monotonic()
        refused: list[str] = []
        while True:  # restart as a supervisor would, counting refusals
            try:
                pa.start(timeout=15)
                time.sleep(2.0)  # a refusal may come from its first renewal
                if pa.alive():
                    break
                refused.append(pa.log()[-300:])
            except AssertionError as exc:
                refused.append(str(exc)[-300:])
                assert time.monotonic() - killed < 40, refused
        up = time.monotonic() - killed
        print(f"kill -9 then restart: {len(refused)} refused start(s), serving {up:.1f}s after")
        assert refused == [], refused
        time.sleep(max(0.0, lease + 1.0 - (time.monotonic() - killed)))  # its last deadline
        assert pane_pids(tmux_socket) == before  # its agent was left to the new worker
        _comment(a, refs, 1, sent)
        assert wait_for(lambda: all(a.marker_counts()[m] for m in sent), timeout=30)
        assert tally(sent, a.marker_counts())["once"] == len(sent)
        assert pane_pids(tmux_socket) == before  # delivered into the same agent
        second = twin.cli("poll", "start", check=False, timeout=60)
        lines = second.stderr.strip().splitlines()
        print(f"second worker: exit {second.returncode}: {lines}")
        assert second.returncode == 1, second.stderr
        assert "Traceback" not in second.stderr
        assert len(lines) == 1, lines
        assert "host.name" in lines[0], lines
    finally:
        a.close()
        twin.close()
