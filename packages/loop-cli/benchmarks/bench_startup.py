"""Benchmark: what an operator waits for, per command, on a real fleet.

For 10, 50 and 200 registered sessions, each live in its own tmux session (a private
socket, `-L loop-bench-startup-...`) under the env-file launcher, with the env file
rotated after the fleet started (so every session is stale and status's drift block
has real work): the medians of `the-loop --version`, `--help`, `status --format json`
and `sessions restart --all --dry-run` (and `status` once more under the claude-code
adapter, which reads every live pane's screen for a dialog), with the CPU time (user +
system) of the same runs, and the growth from 10 to 200. At 200 it also prints the
floor: the interpreter alone, the imports a typed status needs (stdlib, dataclasses,
msgspec) and a stdlib-only read of the same fleet (`floor_fleet_read.py`). Budgets
(issue 13): --version and --help under 60 ms, status at 200 under 120 ms, restart
--dry-run at 200 under 150 ms.

Wall time on a shared box moves with everyone else's load; CPU time is what the
command itself costs, so both are printed, with the load average before each size.
The interpreter's site-packages and the sources are byte-compiled first (pip does
that at install; `uv` and PYTHONDONTWRITEBYTECODE=1 leave it undone, and compiling
every module on every run would be measured instead of the command).

Run: `nox -s bench -- bench_startup` or `python packages/loop-cli/benchmarks/bench_startup.py`.
Only the tmux servers started here are killed, each by its own socket.
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

SIZES = (10, 50, 200)
RUNS = 11
HARNESS = ["/bin/sh", "-c", "exec sleep 3600", "harness", "{session_id}"]
BUDGETS_MS = {"--version": 60.0, "--help": 60.0, "status": 120.0, "restart --dry-run": 150.0}
BUDGET_AT = 200  # status and restart budgets hold at this many sessions


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(extra)
    return env


def the_loop() -> list[str]:
    script = Path(sys.executable).with_name("the-loop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_cli.entry"]


def compile_bytecode() -> None:
    """Byte-compile what the command imports, as an installed tool has it."""
    import loop_cli
    import loop_dispatch
    import loop_envstate
    import loop_tmux

    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    roots |= {
        str(Path(m.__file__).parent)
        for m in (loop_cli, loop_dispatch, loop_envstate, loop_tmux)
        if m.__file__
    }
    for root in sorted(roots):
        compileall.compile_dir(root, quiet=2, workers=1)


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds user+system, exit status) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Median wall and median CPU milliseconds over RUNS runs (one warm-up first)."""
    run_once(argv, env)
    walls, cpus = [], []
    for _ in range(RUNS):
        wall, cpu, _ = run_once(argv, env)
        walls.append(wall * 1000)
        cpus.append(cpu * 1000)
    return statistics.median(walls), statistics.median(cpus)


def build_fleet(root: Path, socket: str, n: int) -> Path:
    """Config, store and N live sessions under the env-file launcher; the env file is
    rotated afterwards. Returns the config file."""
    from loop_cli.config import load_config
    from loop_cli.runtime import Runtime
    from loop_dispatch import WorkItemRef

    env_file = root / "app.env"
    env_file.write_text(f"API_TOKEN=start-{uuid.uuid4().hex}\nREGION=eu\n")
    (root / "work").mkdir()
    config = root / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "stateDir": str(root / "state"),
                "routing": {"tmuxSocket": socket},
                "services": {"poller": False},
                "harness": {
                    "adapter": "generic",
                    "argv": HARNESS,
                    "resumeArgv": HARNESS,
                    "cwd": str(root / "work"),
                },
                "env": {"file": str(env_file)},
            }
        )
    )
    rt = Runtime(load_config(str(config)))
    try:
        for i in range(1, n + 1):
            ref = WorkItemRef.parse(f"local:bench#{i}")
            record = rt.store.registry.register(
                ref, harness="generic", conversation_id=str(uuid.uuid4()), cwd=root / "work"
            )
            assert record.conversation_id is not None
            spec = rt.launcher(record, rt.adapter.fresh_argv("", record.conversation_id))
            result = rt.tmux.spawn(record.tmux_name, spec.argv, record.cwd, spec.env)
            assert result.ok, result
        _wait_exec(rt, n)
    finally:
        rt.close()
    env_file.write_text(f"API_TOKEN=rotated-{uuid.uuid4().hex}\nREGION=eu\n")
    return config


def _wait_exec(rt: object, n: int, timeout: float = 120.0) -> None:
    """Until every pane runs the harness (the launcher has exec'd `sleep`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        panes = rt.tmux.panes()  # type: ignore[attr-defined]
        if sum(1 for p in panes if p.command == "sleep" and not p.dead) >= n:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the fleet of {n} did not start within {timeout:g}s")


def check_outputs(config: Path, n: int) -> None:
    """The commands measured do the whole job: every session seen live and stale."""
    env = _env(THE_LOOP_CONFIG=str(config))
    status = json.loads(
        subprocess.run(
            [*the_loop(), "status", "--format", "json"], env=env, capture_output=True, text=True
        ).stdout
    )
    assert status["sessions"]["live"] == n, status["sessions"]
    block = json.dumps(status.get("sessionEnvironment"))
    assert block != "null", "status has no env drift block"
    dry = subprocess.run(
        [*the_loop(), "sessions", "restart", "--all", "--dry-run", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
    )
    rows = json.loads(dry.stdout)["rows"]
    outcomes = {r["outcome"] for r in rows}
    assert len(rows) == n, len(rows)
    assert outcomes == {"would-restart"}, outcomes
    claude = json.loads(
        subprocess.run(
            [*the_loop(), "status", "--format", "json"],
            env=_env(THE_LOOP_CONFIG=str(claude_config(config))),
            capture_output=True,
            text=True,
        ).stdout
    )
    assert claude["sessions"]["live"] == n, claude["sessions"]
    assert "blocked" not in claude, claude["blocked"]


def claude_config(config: Path) -> Path:
    """The same fleet and store under the claude-code adapter: status then reads every
    live pane's screen for a dialog (the sessions run `sleep`, so none shows one)."""
    data = json.loads(config.read_text())
    data["harness"] = {"adapter": "claude-code", "binary": "sleep", "cwd": data["harness"]["cwd"]}
    path = config.with_name("claude.yaml")
    path.write_text(json.dumps(data))
    return path


def floor(config: Path, socket: str) -> None:
    """What this machine charges before the-loop's own code runs: the interpreter, the
    imports a typed status needs, and the stdlib-only fleet read (floor_fleet_read.py)."""
    env = _env()
    db = str(Path(json.loads(config.read_text())["stateDir"]) / "state.db")
    reader = str(Path(__file__).with_name("floor_fleet_read.py"))
    stdlib = "import json, sqlite3, hashlib, datetime, pathlib, subprocess"
    rows = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "+ stdlib imports": [sys.executable, "-c", stdlib],
        "+ dataclasses": [sys.executable, "-c", f"{stdlib}, dataclasses"],
        "+ msgspec": [sys.executable, "-c", f"{stdlib}, dataclasses, msgspec"],
        "stdlib fleet read": [sys.executable, reader, socket, db],
    }
    print(f"\nfloor at {BUDGET_AT} sessions (medians; each row is a whole process)")
    for label, argv in rows.items():
        wall, cpu = measure(argv, env)
        print(f"  {label:18} median {wall:7.1f} ms wall  {cpu:7.1f} ms cpu")


def bench() -> dict[int, dict[str, tuple[float, float]]]:
    from loop_tmux import Tmux

    commands = {
        "--version": ["--version"],
        "--help": ["--help"],
        "status": ["status", "--format", "json"],
        "restart --dry-run": ["sessions", "restart", "--all", "--dry-run"],
    }
    results: dict[int, dict[str, tuple[float, float]]] = {}
    for n in SIZES:
        root = Path(tempfile.mkdtemp(prefix="loop-bench-startup-"))
        socket = f"loop-bench-startup-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            config = build_fleet(root, socket, n)
            check_outputs(config, n)
            env = _env(THE_LOOP_CONFIG=str(config))
            load = os.getloadavg()[0]
            print(f"\n{n} sessions (load average {load:.2f} on {os.cpu_count()} cpus)")
            results[n] = {}
            runs = [(label, args, env) for label, args in commands.items()]
            claude = _env(THE_LOOP_CONFIG=str(claude_config(config)))
            runs.append(("status claude-code", ["status", "--format", "json"], claude))
            for label, args, run_env in runs:
                wall, cpu = measure([*the_loop(), *args], run_env)
                results[n][label] = (wall, cpu)
                print(f"  {label:18} median {wall:7.1f} ms wall  {cpu:7.1f} ms cpu")
            if n == BUDGET_AT:
                floor(config, socket)
        finally:
            Tmux(socket_name=socket, config_file="/dev/null").kill_server()
            shutil.rmtree(root, ignore_errors=True)
    return results


def report(results: dict[int, dict[str, tuple[float, float]]]) -> None:
    lo, hi = SIZES[0], SIZES[-1]
    print(f"\ngrowth {lo} -> {hi} sessions (x{hi // lo} sessions)")
    for label in results[lo]:
        (w0, c0), (w1, c1) = results[lo][label], results[hi][label]
        print(f"  {label:18} wall x{w1 / w0:.2f} (+{w1 - w0:.1f} ms)  cpu x{c1 / c0:.2f}")
    print(f"\nbudgets (at {BUDGET_AT} sessions for status and restart)")
    for label, budget in BUDGETS_MS.items():
        wall, cpu = results[BUDGET_AT if BUDGET_AT in results else hi][label]
        verdict = "met" if wall < budget else f"MISSED by {wall - budget:.1f} ms"
        print(f"  {label:18} budget {budget:5.0f} ms  wall {wall:6.1f}  cpu {cpu:6.1f}  {verdict}")


def main() -> None:
    compile_bytecode()
    base_wall, base_cpu = measure([sys.executable, "-c", "pass"], _env())
    print(f"python -c pass (floor)  median {base_wall:6.1f} ms wall  {base_cpu:6.1f} ms cpu")
    if shutil.which("tmux") is None:
        print("tmux not installed: the fleet benchmark is skipped")
        return
    report(bench())


if __name__ == "__main__":
    main()
