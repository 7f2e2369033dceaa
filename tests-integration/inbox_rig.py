"""A rig for the inbox acceptance tests: the-loop as an operator runs it, with faults.

One `Rig` is one deployment: a config file, a state directory, a private tmux server
(`-L`, the test's own), the fake harness recording what reached it, and the real
daemons (`poll start`, `gh-webhook start --route`) as subprocesses of the venv's
`the-loop`. Faults are real: `kill -9` of a daemon, SIGSTOP of the tmux server this
test started (always resumed in a `finally`).

What counts as delivered is the fake harness's own record (its first prompt and every
paste), keyed by a unique marker in each comment body: never the-loop's own account.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from loop_cli.webhook.verify import sign
from loop_tmux.testing import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "loop-cli" / "tests"))
from fakegithub import payloads

HERE = Path(__file__).resolve().parent
FAKE_HARNESS = HERE / "harness" / "fake_harness.py"
SECRET = "inbox-rig-secret-7Qx"
REPO = "octo/app"
TMUX_TIMEOUT = 10.0  # loop-tmux's default command timeout (the daemons use it)

MARK_RE = re.compile(r"MK-(\d+)-(\d+)-KM")


def marker(item: int, seq: int) -> str:
    """The unique text a comment carries: its item and its place in that item's order."""
    return f"MK-{item}-{seq}-KM"


def the_loop() -> list[str]:
    """The venv's `the-loop` (the console script), else the module."""
    script = Path(sys.executable).parent / "the-loop"
    return [str(script)] if script.exists() else [sys.executable, "-m", "loop_cli.main"]


def proc_gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie its parent has not reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].startswith("Z")


class Daemon:
    """One the-loop daemon subprocess; its output goes to files (never a full pipe)."""

    def __init__(self, rig: Rig, kind: str, args: Sequence[str]) -> None:
        self.rig = rig
        self.kind = kind
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.url = ""

    @property
    def out(self) -> Path:
        return self.rig.tmp / f"{self.kind}-{self.runs}.out"

    @property
    def err(self) -> Path:
        return self.rig.tmp / f"{self.kind}-{self.runs}.err"

    def start(self, timeout: float = 60.0) -> None:
        self.runs += 1
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [*the_loop(), *self.args], env=self.rig.env, stdout=out, stderr=err
            )
        if self.kind == "webhook":
            found = wait_for(self._listening, timeout=timeout)
            if not found:
                self.stop()
                raise AssertionError(f"gh-webhook did not start: {self.log()}")
            self.url = found
        else:
            # A cycle is logged at debug only when idle (or a fleet host's standby): the
            # rig's poller runs at that level.
            if not wait_for(self._cycled, timeout=timeout):
                self.stop()
                raise AssertionError(f"poll start did not start: {self.log()}")

    def _cycled(self) -> bool:
        log = self.err.read_text()
        return " poll.cycle " in log or " poll cycle at " in log

    def _listening(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.kind} exited {self.proc.returncode}: {self.log()}")
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.err.read_text())
        return m.group(1) if m else ""

    def log(self) -> str:
        return (self.out.read_text() + self.err.read_text())[-3000:]

    def logs(self) -> str:
        """Every run's output (for a failure message)."""
        parts = []
        for n in range(1, self.runs + 1):
            for suffix in ("out", "err"):
                path = self.rig.tmp / f"{self.kind}-{n}.{suffix}"
                if path.exists():
                    parts.append(f"--- {path.name}\n{path.read_text()[-1500:]}")
        return "\n".join(parts)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)


class Rig:
    """One deployment of the-loop under test (see the module docstring)."""

    def __init__(
        self,
        tmp: Path,
        socket_name: str,
        *,
        tracker: str = "local",
        interval: float = 1.0,
        max_retries: int = 3,
        max_backoff: float = 2.0,
        concurrency: int = 4,
        env_file: Path | None = None,
        path_prefix: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        self.socket_name = socket_name
        self.convo = tmp / "conversations"
        self.convo.mkdir(exist_ok=True)
        self.work = tmp / "work"
        self.work.mkdir(exist_ok=True)
        self.state = tmp / "state"
        self.events_path = tmp / "events.jsonl"  # outside the state dir (it may be deleted)
        config: dict[str, Any] = {
            "stateDir": str(self.state),
            "tracker": tracker,
            "authorizedActors": ["alice"],
            "harness": {
                "adapter": "claude-code",
                "binary": str(FAKE_HARNESS),
                "cwd": str(self.work),
                # the agents' server holds an allowlist only (docs/security.md)
                "passEnv": [
                    "FAKE_HARNESS_DIR",
                    "FAKE_HARNESS_EXIT_AFTER",
                    "FAKE_HARNESS_FAIL_RESUME",
                    *sorted(extra_env or {}),  # a test's own tmux wrapper reads these
                ],
                "stateDir": str(tmp / "claude"),
            },
            "routing": {"tmuxSocket": socket_name},
            "polling": {"intervalSeconds": interval, "maxRetries": max_retries},
            "delivery": {
                "backoffSeconds": min(0.5, max_backoff),
                "maxBackoffSeconds": max_backoff,
                "concurrency": concurrency,
            },
            "eventLog": {"path": str(self.events_path)},
            "webhook": {"secretEnv": "HOOK_SECRET", "maxBodyBytes": 65536},
        }
        if tracker == "github":
            config["github"] = {"repositories": [REPO], "tokenEnv": "NO_TOKEN_HERE"}
        if env_file is not None:
            config["env"] = {"file": str(env_file)}
        self.config_path = tmp / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env.pop("NO_TOKEN_HERE", None)
        self.env.update(
            THE_LOOP_CONFIG=str(self.config_path),
            HOOK_SECRET=SECRET,
            FAKE_HARNESS_DIR=str(self.convo),
            HOME=str(tmp),
            PYTHONUNBUFFERED="1",
        )
        if path_prefix is not None:
            self.env["PATH"] = f"{path_prefix}{os.pathsep}{self.env.get('PATH', '')}"
        self.env.update(extra_env or {})
        self.daemons: list[Daemon] = []

    # -- processes ----------------------------------------------------------------------

    def cli(
        self, *args: str, timeout: float = 90.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*the_loop(), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"the-loop {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}"
            )
        return done

    def poller(self) -> Daemon:
        daemon = Daemon(self, "poller", ["poll", "start", "--log-level", "debug"])
        self.daemons.append(daemon)
        return daemon

    def webhook(self) -> Daemon:
        daemon = Daemon(self, "webhook", ["gh-webhook", "start", "--route", "--port", "0"])
        self.daemons.append(daemon)
        return daemon

    def close(self) -> None:
        for daemon in self.daemons:
            with contextlib.suppress(Exception):
                daemon.stop()
        self._await_fence_keepers()

    def _await_fence_keepers(self) -> None:
        """A stopped fleet worker's fence keeper guards its last deadline (at most one
        lease) and then leaves by itself: wait for this rig's keepers to go, so none
        outlives the test; one still there past the lease and a margin is killed."""
        import psutil

        lease = float(
            (yaml.safe_load(self.config_path.read_text()).get("host") or {}).get(
                "leaseSeconds", 30.0
            )
        )
        mine = f"--socket-name {self.socket_name}"
        keepers = []
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if "loop_dispatch.fencekeeper" in line and mine in line:
                keepers.append(proc)
        _gone, alive = psutil.wait_procs(keepers, timeout=lease + 5.0)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()

    # -- the private tmux server ----------------------------------------------------------

    def tmux_pid(self) -> int | None:
        done = subprocess.run(
            ["tmux", "-L", self.socket_name, "display-message", "-p", "#{pid}"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
            env=self.env,
        )
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else None

    @contextlib.contextmanager
    def stalled(self, pid: int | None = None) -> Iterator[int]:
        """SIGSTOP this test's tmux server for the block; SIGCONT always follows."""
        pid = pid or self.tmux_pid()
        assert pid, "no tmux server runs on the test's socket"
        os.kill(pid, signal.SIGSTOP)
        try:
            yield pid
        finally:
            os.kill(pid, signal.SIGCONT)

    # -- what reached the harness ----------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """Every fake-harness record, per conversation file in file order."""
        out: list[dict[str, Any]] = []
        for path in sorted(self.convo.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    record["file"] = path.name
                    out.append(record)
        return out

    def received(self) -> list[tuple[str, dict[str, Any]]]:
        """(text, record) for every first prompt and paste the harnesses received."""
        out = []
        for record in self.records():
            if record.get("event") == "start" and record.get("prompt"):
                out.append((record["prompt"], record))
            elif record.get("event") == "message":
                out.append((record["text"], record))
        return out

    def marker_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for text, _ in self.received():
            for m in MARK_RE.finditer(text):
                counts[m.group(0)] += 1
        return counts

    def starts(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == "start"]

    # -- the event log ----------------------------------------------------------------------

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        out = []
        for line in self.events_path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if type_ is None or record.get("type") == type_:
                    out.append(record)
        return out


def fleet_host(
    tmp: Path,
    socket: str,
    name: str,
    cluster: Any,
    url: str,
    *,
    capacity: int,
    lease: float = 3.0,
    **rig_options: Any,
) -> Rig:
    """One host of a fleet: a Rig whose config names the shared database (password by
    variable name) and this host (`host.name`, lease, capacity)."""
    tmp.mkdir()
    rig = Rig(tmp, socket, **rig_options)
    config = yaml.safe_load(rig.config_path.read_text())
    config["store"] = {"url": url, "passwordEnv": "FLEET_PG_PASSWORD"}
    config["host"] = {"name": name, "leaseSeconds": lease, "maxSessions": capacity}
    rig.config_path.write_text(yaml.safe_dump(config))
    rig.env["FLEET_PG_PASSWORD"] = cluster.password
    return rig


def pane_pids(socket: str) -> dict[str, int]:
    """Session name -> its live pane's pid, on one private tmux server (one call)."""
    from loop_tmux import Tmux

    panes = Tmux(socket_name=socket, config_file="/dev/null").panes()
    return {p.session: p.pid for p in panes if not p.dead and p.session.startswith("loop-")}


def tally(sent: Sequence[str], counts: Counter[str]) -> dict[str, int]:
    """sent / delivered once / twice / more / lost, over the markers sent."""
    return {
        "sent": len(sent),
        "once": sum(1 for m in sent if counts[m] == 1),
        "twice": sum(1 for m in sent if counts[m] == 2),
        "more": sum(1 for m in sent if counts[m] > 2),
        "lost": sum(1 for m in sent if counts[m] == 0),
    }


def wait_delivered(
    rig: Rig, sent: Sequence[str], *, timeout: float, quiet: float = 15.0
) -> Counter[str]:
    """Wait until every marker in `sent` reached a harness, or nothing new arrived for
    `quiet` seconds (a lost event never arrives), or `timeout`; returns the counts."""
    deadline = time.monotonic() + timeout
    last, changed = -1, time.monotonic()
    while True:
        counts = rig.marker_counts()
        if all(counts[m] for m in sent):
            return counts
        total = sum(counts.values())
        now = time.monotonic()
        if total != last:
            last, changed = total, now
        if now >= deadline or now - changed >= quiet:
            return counts
        time.sleep(0.25)


def paste_times(rig: Rig) -> dict[str, list[float]]:
    """Marker -> the wall times the harnesses recorded it, oldest first."""
    out: dict[str, list[float]] = {}
    for text, record in rig.received():
        for m in MARK_RE.finditer(text):
            out.setdefault(m.group(0), []).append(float(record["ts"]))
    return {k: sorted(v) for k, v in out.items()}


def duplicates_by_kill(
    rig: Rig, sent: Sequence[str], kills: Sequence[float]
) -> tuple[list[list[str]], list[str]]:
    """Each repeated paste blamed on the kill that fell between it and its repeat (a
    crash between a paste and its settle); a repeat with no kill in between is
    unexplained. `kills` are wall times (time.time()) of the SIGKILLs. Returns
    (markers repeated per kill, unexplained markers)."""
    times = paste_times(rig)
    per_kill: list[list[str]] = [[] for _ in kills]
    unexplained = []
    for m in sent:
        seen = times.get(m, [])
        for first, again in itertools.pairwise(seen):
            # (a killed daemon's last tmux client may finish its paste just after the kill)
            blamed = [n for n, k in enumerate(kills) if first - 1.0 <= k <= again]
            if blamed:
                per_kill[blamed[0]].append(m)
            else:
                unexplained.append(m)
    return per_kill, unexplained


def items_of(markers: Sequence[str]) -> list[int]:
    return [int(m.group(1)) for m in map(MARK_RE.fullmatch, markers) if m]


def order_violations(rig: Rig) -> list[str]:
    """Per item, the markers in the order its harness received them must ascend."""
    last: dict[int, int] = {}
    bad = []
    for text, record in rig.received():
        for m in MARK_RE.finditer(text):
            item, seq = int(m.group(1)), int(m.group(2))
            if seq < last.get(item, -1):
                bad.append(f"item {item}: {seq} after {last[item]} ({record['file']})")
            last[item] = max(seq, last.get(item, -1))
    return bad


# -- GitHub-shaped deliveries -------------------------------------------------------------


def comment_body(number: int, comment_id: int, text: str) -> bytes:
    payload = payloads.issue_comment(REPO, number=number, comment_id=comment_id, body=text)
    return json.dumps(payload).encode()


def post(url: str, body: bytes, guid: str, *, timeout: float = 10.0) -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": guid,
        "X-Hub-Signature-256": sign(SECRET.encode(), body),
    }
    return httpx.post(url + "/", content=body, headers=headers, timeout=timeout)


def new_guid() -> str:
    return str(uuid.uuid4())


def elapsed_since(start: float) -> float:
    return round(time.monotonic() - start, 1)
