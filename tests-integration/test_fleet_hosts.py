"""A fleet of two hosts on one shared PostgreSQL store, with real daemons and tmux.

Each "host" is a `the-loop poll start` daemon with its own host.name, its own private
tmux server and its own fake-harness record, sharing one database (a private cluster).
Comments arrive through the CLI (the local tracker's ingress: the inbox commit). Then
host A's daemon is killed with SIGKILL mid-stream: after its lease, its items move to
host B (`session.moved` for each), every comment is delivered (0 lost), per-item order
holds; A's own fence keeper ended A's agents when its lease ran out; A, started again,
clears its stale sessions (`session.stale_ended`) and delivers nothing more into them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from inbox_rig import Rig, fleet_host, marker, order_violations, tally

from loop_tmux import Presence, Tmux
from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

LEASE = 3.0
ITEMS = 4
PER_ITEM = 4


@pytest.fixture
def second_socket(new_tmux_socket: Callable[[], str]) -> str:
    """Host B's private server (loop_tmux.testing: killed at teardown, only it)."""
    return new_tmux_socket()


def _host(tmp: Path, socket: str, name: str, cluster, url: str, cap: int) -> Rig:
    return fleet_host(
        tmp, socket, name, cluster, url, capacity=cap, lease=LEASE, interval=1.0, max_backoff=1.0
    )


def _events(rig: Rig, type_: str) -> list[dict]:
    return rig.events(type_)


def test_a_killed_host_moves_its_items_with_nothing_lost_and_ends_its_stale_agents(
    tmp_path: Path, tmux_socket: str, second_socket: str, pg_cluster
) -> None:
    url = pg_cluster.create_database()
    a = _host(tmp_path / "a", tmux_socket, "host-a", pg_cluster, url, cap=ITEMS)
    b = _host(tmp_path / "b", second_socket, "host-b", pg_cluster, url, cap=ITEMS)
    try:
        pa, pb = a.poller(), b.poller()
        pa.start()
        pb.start()
        refs = [b.cli("item", "open", f"fleet {n}").stdout.strip() for n in range(ITEMS)]
        sent: list[str] = []
        number = {ref: int(ref.rsplit("#", 1)[1]) for ref in refs}

        def comment(round_: int) -> None:
            for ref in refs:
                mark = marker(number[ref], round_)
                b.cli("item", "comment", ref, f"round {round_}: {mark}", "--author", "alice")
                sent.append(mark)

        for round_ in range(PER_ITEM // 2):
            comment(round_)
        placed = wait_for(lambda: _placements(b), timeout=60)
        on_a = sorted(ref for ref, host in placed.items() if host == "host-a")
        assert on_a, f"nothing was placed on host-a: {placed}"
        assert sorted(placed.values()).count("host-b") >= 1, placed
        # Wait until A has delivered what it had, then kill it mid-stream.
        wait_for(lambda: _delivered(a, b, sent) >= len(sent) - 2, timeout=90)
        pa.kill9()
        for round_ in range(PER_ITEM // 2, PER_ITEM):
            comment(round_)
        counts = wait_for(
            lambda: (c := _counts(a, b)) and all(c[m] >= 1 for m in sent) and c,
            timeout=120,
            interval=0.5,
        )
        result = tally(sent, counts)
        print(f"fleet kill -9: {result}, moved {len(on_a)} items from host-a")
        assert result["lost"] == 0, (result, pb.logs())
        assert not order_violations(a)
        assert not order_violations(b)
        moved = {e["workItem"] for e in _events(b, "session.moved")}
        assert moved == set(on_a)
        for event in _events(b, "session.moved"):
            assert event["detail"]["from_host"] == "host-a"
            assert event["detail"]["reason"] == "host_lease_expired"
        assert set(_placements(b).values()) == {"host-b"}
        # A comes back: its lease lapsed, its items are gone; it ends its stale agents.
        tmux_a = Tmux(socket_name=tmux_socket, config_file="/dev/null")
        names = {ref: _tmux_name(b, ref) for ref in on_a}
        # A's fence keeper ended its agents when A's lease ran out (before B could take
        # the items); the panes stay, dead, with their scrollback.
        assert all(tmux_a.probe(n) is Presence.DEAD for n in names.values())
        before_a = a.marker_counts()
        pa.start()
        assert wait_for(
            lambda: all(tmux_a.probe(n) is Presence.ABSENT for n in names.values()), timeout=60
        ), pa.logs()
        ended = wait_for(
            lambda: (
                {e["detail"]["tmux_name"] for e in _events(a, "session.stale_ended")}
                == set(names.values())
            ),
            timeout=30,
        )
        assert ended, _events(a, "session.stale_ended")
        comment(PER_ITEM)
        assert wait_for(lambda: all(_counts(a, b)[m] >= 1 for m in sent), timeout=60)
        assert a.marker_counts() == before_a  # nothing more reached host-a's old agents
        assert tally(sent, _counts(a, b))["lost"] == 0
    finally:
        a.close()
        b.close()


def _placements(rig: Rig) -> dict[str, str]:
    import json

    done = rig.cli("sessions", "list", "--format", "json", check=False)
    if done.returncode != 0:
        return {}
    rows = json.loads(done.stdout or "[]")
    return {r["ref"]: r["host"] for r in rows if r.get("host")}


def _tmux_name(rig: Rig, ref: str) -> str:
    import json

    rows = json.loads(rig.cli("sessions", "list", "--format", "json").stdout)
    return next(r["tmuxName"] for r in rows if r["ref"] == ref)


def _counts(a: Rig, b: Rig):
    return a.marker_counts() + b.marker_counts()


def _delivered(a: Rig, b: Rig, sent: list[str]) -> int:
    counts = _counts(a, b)
    return sum(1 for m in sent if counts[m] >= 1)
