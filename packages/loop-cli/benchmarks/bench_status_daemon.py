"""`the-loop status` with the poll daemon up, beside the reference tool's `status`
(issue 26: at 200 sessions ours must cost at most a tenth of the reference's).

Three figures, medians of RUNS runs each on this machine: ours asking the running
daemon over api.sock, ours computing alone (`THE_LOOP_STATUS_LOCAL=1`), and the
reference tool's `status` (the-loop 20.x, github.com/MadaraUchiha-314/the-loop: its
`the-loop` console script from `$LOOP_REFERENCE_BIN`, else `the-loop` of a venv at
/tmp/ref-venv) over a registry of as many sessions. Without the reference, its line is
skipped with a message naming what is missing. Our tmux server is private
(`-L loop-bench-api-...`) and killed at the end, and the daemon is stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_cli import _env, _spawn_fleet, the_loop

from loop_tmux import Tmux

SESSIONS = 200
RUNS = 15
GOAL = 0.10
REFERENCE_ENV = "LOOP_REFERENCE_BIN"
REFERENCE_DEFAULT = Path("/tmp/ref-venv/bin/the-loop")
# Registers sessions in the reference's own registry, through its own API, in its venv.
REFERENCE_SEED = """
import sys
from the_loop.sessions.registry import Session, SessionRegistry, WorkItemRef
registry = SessionRegistry(".the-loop/sessions")
for n in range(1, int(sys.argv[1]) + 1):
    ref = WorkItemRef.parse(f"github:acme/app#{n}")
    registry.register(Session(ref, "claude-code", f"conv-{n}", "/tmp", tmux_target=f"app-{n}"))
"""


def _reference() -> Path | None:
    found = os.environ.get(REFERENCE_ENV)
    path = Path(found) if found else REFERENCE_DEFAULT
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _our_fleet(root: Path, socket: str) -> Path:
    from loop_dispatch import WorkItemRef
    from loop_dispatch.store import Store

    root.mkdir(parents=True)
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "stateDir": str(root / "state"),
                "routing": {"tmuxSocket": socket},
                "harness": {"cwd": str(root)},
                "polling": {"intervalSeconds": 30},
            }
        )
    )
    store = Store.open(root / "state")
    refs = [WorkItemRef("local", "bench", i + 1) for i in range(SESSIONS)]
    for ref in refs:
        store.registry.register(
            ref, harness="generic", conversation_id=str(uuid.uuid4()), cwd=str(root)
        )
    store.close()
    _spawn_fleet(socket, [ref.tmux_name() for ref in refs])
    return config


def _wait_for_socket(path: Path, daemon: subprocess.Popen[bytes], timeout: float = 60) -> None:
    from loop_cli.api.client import get_json

    deadline = time.monotonic() + timeout
    while get_json(path, "/api/attention") is None:
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the poll daemon did not serve its API")
        time.sleep(0.1)


def _wall(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    return time.perf_counter() - start


def _seed_reference(binary: Path, root: Path) -> None:
    (root / ".the-loop").mkdir(parents=True)
    (root / ".the-loop" / "cli-config.yaml").write_text(
        "service:\n  enabled: false\npolling:\n  enabled: true\n"
    )
    python = binary.with_name("python")
    subprocess.run(
        [str(python), "-c", REFERENCE_SEED, str(SESSIONS)], cwd=root, check=True, env=_env()
    )


def bench(root: Path, binary: Path | None) -> dict[str, float]:
    """Medians of ours (served, alone) and the reference's, their runs interleaved so
    a machine busy with other work weighs on all three alike."""
    socket = f"loop-bench-api-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    config = _our_fleet(root / "ours", socket)
    env = _env(THE_LOOP_CONFIG=str(config), XDG_CACHE_HOME=str(root / "cache"))
    # As installed (pip compiles every module at install time; the reference's are):
    # an editable checkout under PYTHONDONTWRITEBYTECODE would compile ours at each run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if binary is not None:
        _seed_reference(binary, root / "reference")
    daemon = subprocess.Popen(
        [*the_loop(), "poll", "start"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_socket(root / "ours" / "state" / "api.sock", daemon)
        argv = [*the_loop(), "status"]
        check = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert f"{SESSIONS} live" in check.stdout, check.stdout[-800:]
        times: dict[str, list[float]] = {"python": [], "served": [], "alone": [], "reference": []}
        alone_env = {**env, "THE_LOOP_STATUS_LOCAL": "1"}
        floor = [sys.executable, "-c", "import _socket"]  # any Python client's floor
        for _ in range(2):  # warm: the byte code written, the daemon's snapshot made
            subprocess.run(argv, env=env, capture_output=True, check=False)
            subprocess.run(argv, env=alone_env, capture_output=True, check=False)
        for _ in range(RUNS):
            times["python"].append(_wall(floor, env))
            times["served"].append(_wall(argv, env))
            times["alone"].append(_wall(argv, alone_env))
            if binary is not None:
                ref = [str(binary), "status"]
                times["reference"].append(_wall(ref, _env(), cwd=root / "reference"))
        return {k: statistics.median(v) for k, v in times.items() if v}
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        Tmux(socket_name=socket, config_file="/dev/null").kill_server()


def main() -> None:
    if not shutil.which("tmux"):
        print("tmux not installed: the status-through-the-daemon benchmark is skipped")
        return
    binary = _reference()
    root = Path(tempfile.mkdtemp(prefix="loop-bench-api-"))
    try:
        found = bench(root, binary)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"the-loop status at {SESSIONS} sessions ({RUNS} runs each, interleaved, median)")
    print(f"  ours, asking the poll daemon   {found['served'] * 1000:7.1f} ms")
    print(f"  ours, computing alone          {found['alone'] * 1000:7.1f} ms")
    print(f"  python -c 'import _socket'     {found['python'] * 1000:7.1f} ms (the floor)")
    if binary is None:
        print(
            f"  reference: skipped (no reference the-loop: set ${REFERENCE_ENV} to the "
            "`the-loop` of a venv with github.com/MadaraUchiha-314/the-loop's cli "
            f"installed, or install it at {REFERENCE_DEFAULT})"
        )
        return
    reference = found["reference"]
    ratio = found["served"] / reference
    print(f"  reference ({binary})  {reference * 1000:7.1f} ms")
    print(
        f"  ratio ours-with-daemon / reference: {ratio:.3f} (goal <= {GOAL:.2f}: "
        f"{'met' if ratio <= GOAL else 'NOT met'}); computing alone: "
        f"{found['alone'] / reference:.3f}; the Python floor alone: "
        f"{found['python'] / reference:.3f}"
    )


if __name__ == "__main__":
    main()
