"""The work no `status` can skip, with nothing but the standard library: one tmux call
for every pane, each pane's /proc environment, one read of the session registry and
JSON out. `bench_startup` times it beside the real command, as the floor a status on
this machine stands on before it loads any config or typed model.

Run: `python floor_fleet_read.py TMUX_SOCKET STATE_DB`.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys


def main(socket: str, db: str) -> None:
    registry = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    sessions = registry.execute("SELECT * FROM sessions").fetchall()
    listing = subprocess.run(
        ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{session_name}\t#{pane_pid}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    held: dict[str, int] = {}
    for line in listing.splitlines():
        name, _, pid = line.partition("\t")
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                held[name] = environ.read().count(b"\0")
        except OSError:
            continue
    sys.stdout.write(json.dumps({"registered": len(sessions), "environments": held}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
