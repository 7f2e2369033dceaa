"""The poller watches its ground: its state directory deleted or replaced under it is
an error event and a non-zero exit (a supervisor then restarts it on the real state),
never a daemon polling a deleted database while a second one is accepted beside it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from inbox_rig import Rig
from integration_support import wait_for

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
