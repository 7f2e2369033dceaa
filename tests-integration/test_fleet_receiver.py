"""A fleet host that runs both daemons: `poll start` (its worker) and `gh-webhook start
--route` (a receiver behind the load balancer), under the same host.name, on one shared
PostgreSQL store and one private tmux server.

On a fleet a receiver only commits into the shared inbox and the hosts' workers
deliver; a receiver that drained as well would hold this host's lease a second time
(refused: a live host name) or deliver beside the worker. Counted from what the
harnesses recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from inbox_rig import comment_body, fleet_host, marker, new_guid, post, tally

from loop_tmux.testing import wait_for

pytestmark = [pytest.mark.tmux, pytest.mark.slow]

ITEMS = 3
PER_ITEM = 4


def test_a_receiver_beside_its_hosts_worker_commits_and_the_worker_delivers(
    tmp_path: Path, tmux_socket: str, pg_cluster
) -> None:
    url = pg_cluster.create_database()
    common = {"capacity": ITEMS + 1, "lease": 3.0, "interval": 1.0, "max_backoff": 1.0}
    worker_rig = fleet_host(tmp_path / "worker", tmux_socket, "host-a", pg_cluster, url, **common)
    receiver_rig = fleet_host(
        tmp_path / "receiver", tmux_socket, "host-a", pg_cluster, url, tracker="github", **common
    )
    try:
        alone = receiver_rig.webhook()  # before any worker: it commits, and says nothing drains
        alone.start()
        assert "no live host worker on this fleet's store" in alone.log()
        alone.stop()
        worker, receiver = worker_rig.poller(), receiver_rig.webhook()
        worker.start()
        receiver.start()
        assert "committing to the fleet's shared inbox" in receiver.log()
        assert "no live host worker" not in receiver.log()
        sent: list[str] = []
        answers = []
        for seq in range(PER_ITEM):
            for item in range(1, ITEMS + 1):
                mark = marker(item, seq)
                sent.append(mark)
                body = comment_body(item, 700_000 + seq * 10 + item, f"comment {mark}")
                answers.append(post(receiver.url, body, new_guid()).status_code)
        assert answers == [202] * len(sent)

        def all_delivered() -> bool:
            counts = worker_rig.marker_counts()
            return all(counts[m] >= 1 for m in sent)

        delivered = wait_for(all_delivered, timeout=90)
        counts = tally(sent, worker_rig.marker_counts())
        assert delivered, (counts, worker.logs(), receiver.logs())
        assert counts == {"sent": len(sent), "once": len(sent), "twice": 0, "more": 0, "lost": 0}, (
            counts
        )
        assert worker.alive(), worker.logs()
        assert receiver.alive(), receiver.logs()
        assert not receiver_rig.records()  # the receiver's side started no harness of its own
        assert "conflict" not in (worker.logs() + receiver.logs()).lower()
    finally:
        receiver_rig.close()
        worker_rig.close()
