"""One webhook receiver of a fleet, for the acceptance test: the real receiver app
(`loop_cli.webhook.app.create_app`, signature check, de-duplication, the inbox commit
before the 202) served by the real `serve` (uvicorn) on loopback, committing into the
shared PostgreSQL store. It runs no drain: the hosts' workers dispatch.

    python fleet_receiver.py URL PORT_FILE   (password in $FLEET_PG_PASSWORD,
                                              secret in $HOOK_SECRET)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loop_cli.webhook.app import create_app
from loop_cli.webhook.seen import InboxAccept
from loop_cli.webhook.server import serve
from loop_dispatch.store import Store


def main() -> None:
    url, port_file = sys.argv[1], Path(sys.argv[2])
    store = Store.open(url=url, password=os.environ["FLEET_PG_PASSWORD"])
    app = create_app(
        os.environ["HOOK_SECRET"].encode(),
        InboxAccept(store),
        authorized_actors=["alice"],
        trigger_label="the-loop",
        repositories=["octo/app"],
    )
    serve(app, "127.0.0.1", 0, on_started=lambda port: port_file.write_text(str(port)))
    store.close()


if __name__ == "__main__":
    main()
