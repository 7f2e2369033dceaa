"""`the-loop demo`: the whole loop once, on a private tmux server and temporary state.

Each step is checked against what really happened (the demo agent's conversation file,
the registry, tmux's own answer), never against what the-loop says it did: the demo
passes only if every step was observed. The caller narrates through `on_step`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import DEMO_AGENT_MODULE, LoadedConfig, load_file
from .demo_agent import read_conversation
from .fleet import DEAD, LIVE, read_fleet
from .runtime import Runtime

FIRST_COMMENT = "Could you add a short README explaining what this project does?"
SECOND_COMMENT = "Thanks! Are you still there after that crash?"


@dataclass
class Step:
    title: str
    ok: bool
    observed: str


@dataclass
class DemoReport:
    workdir: Path
    socket: str
    config_path: Path
    ref: str = ""
    tmux_name: str = ""
    steps: list[Step] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    kept: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)

    def attach_command(self) -> str:
        return f"tmux -L {self.socket} attach-session -t ={self.tmux_name}"


class DemoFailed(Exception):
    """A step was not observed; the report says which."""


def write_demo_config(workdir: Path, socket: str) -> Path:
    agent = [sys.executable, "-m", DEMO_AGENT_MODULE, "--conversations", str(workdir / "agent")]
    data = {
        "stateDir": str(workdir / "state"),
        "tracker": "local",
        "harness": {
            "adapter": "generic",
            "argv": [*agent, "--session-id", "{session_id}", "{prompt}"],
            "resumeArgv": [*agent, "--resume", "{session_id}", "{prompt}"],
            "cwd": str(workdir / "work"),
        },
        "routing": {"tmuxSocket": socket},
        "polling": {"intervalSeconds": 1, "maxRetries": 3},
    }
    (workdir / "work").mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_real_config(workdir: Path, socket: str, kind: str, binary: str, model_url: str) -> Path:
    """The demo's config for a real harness against the loopback model API: its own
    home (`harness.stateDir`) prepared as docs/harnesses.md says, its env in an env file."""
    from .harness_setup import harness_env, prepare_home

    work, home = workdir / "work", workdir / "harness-home"
    work.mkdir(parents=True, exist_ok=True)
    key = "sk-loop-demo-" + secrets.token_hex(16)  # for the fake API only
    prepare_home(kind, home, [work.resolve()], model_url, key)
    env_file = workdir / "harness.env"
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in harness_env(kind, model_url, key).items()),
        encoding="utf-8",
    )
    env_file.chmod(0o600)
    data = {
        "stateDir": str(workdir / "state"),
        "tracker": "local",
        "harness": {"adapter": kind, "binary": binary, "cwd": str(work), "stateDir": str(home)},
        "env": {"file": str(env_file)},
        "routing": {"tmuxSocket": socket},
        "polling": {"intervalSeconds": 1, "maxRetries": 3},
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _wait(predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


class Demo:
    """Runs the steps; `run()` always cleans up unless `keep`."""

    def __init__(
        self,
        *,
        keep: bool = False,
        on_step: Callable[[Step], None] | None = None,
        timeout: float = 20.0,
        harness: str | None = None,
        binary: str | None = None,
    ) -> None:
        self.keep = keep
        self.harness = harness
        self.on_step = on_step or (lambda step: None)
        self.timeout = timeout
        workdir = Path(tempfile.mkdtemp(prefix="the-loop-demo-"))
        socket = f"loop-demo-{os.getpid()}-{secrets.token_hex(3)}"
        self.model: Any = None
        if harness is None:
            config = write_demo_config(workdir, socket)
        else:
            from .fakemodel import FakeModelServer

            self.model = FakeModelServer().start()
            program = binary or ("claude" if harness == "claude-code" else "codex")
            config = write_real_config(workdir, socket, harness, program, self.model.url)
        self.report = DemoReport(workdir, socket, config)
        self.rt: Runtime | None = None

    # -- steps -------------------------------------------------------------------------

    def _step(self, title: str, ok: bool, observed: str) -> None:
        step = Step(title, bool(ok), observed)
        self.report.steps.append(step)
        self.on_step(step)
        if not step.ok:
            raise DemoFailed(f"{title}: {observed}")

    def _conversation(self) -> list[dict[str, Any]]:
        assert self.rt is not None
        from loop_dispatch import WorkItemRef

        record = self.rt.store.registry.get(WorkItemRef.parse(self.report.ref))
        if record is None or not record.conversation_id:
            return []
        path = self.report.workdir / "agent" / f"{record.conversation_id}.jsonl"
        try:
            return read_conversation(path)
        except (OSError, ValueError):
            return []

    def _messages_with(self, needle: str) -> list[dict[str, Any]]:
        return [r for r in self._conversation() if needle in str(r.get("text", ""))]

    def _cycle(self) -> dict[str, Any]:
        from .poller import cycle_summary, drain_once, run_cycle

        assert self.rt is not None
        return cycle_summary(run_cycle(self.rt), drain_once(self.rt))

    def run(self) -> DemoReport:
        try:
            self._run_steps()
        except DemoFailed:
            pass
        finally:
            self._finish()
        return self.report

    def _run_steps(self) -> None:
        from .tracker import LocalTracker

        if shutil.which("tmux") is None:
            self._step("find tmux", False, "tmux is not installed (apt-get install tmux)")
        self.rt = Runtime(
            LoadedConfig(load_file(self.report.config_path), self.report.config_path, "--config")
        )
        rt = self.rt
        tracker = LocalTracker(rt.store)
        ref = tracker.open(
            "Demo: get to know the-loop",
            "Say hello, then wait for comments.",
            project="demo",
            author="newcomer",
        )
        self.report.ref = str(ref)
        self._step("open a local work item", True, f"{ref} opened in the local tracker")

        if self.harness is not None:
            self._real_steps(ref)
            return
        summary = self._cycle()
        record = rt.store.registry.get(ref)
        self.report.tmux_name = record.tmux_name if record else ref.tmux_name()
        started = _wait(
            lambda: [r for r in self._conversation() if r.get("event") == "start"], self.timeout
        )
        self._step(
            "a poll cycle spawns the demo agent",
            bool(record and started and summary.get("processed") == 1),
            f"tmux session {self.report.tmux_name} on socket {self.report.socket}; the agent "
            f"(pid {started[0]['pid'] if started else '?'}) started conversation "
            f"{record.conversation_id if record else '?'} with the item as its prompt",
        )

        tracker.comment(ref, FIRST_COMMENT, author="newcomer")
        self._cycle()
        got = _wait(lambda: self._messages_with(FIRST_COMMENT), self.timeout)
        self._step(
            "a comment is pasted into the running agent",
            bool(got) and got[0].get("via") == "paste" and got[0].get("pid") == started[0]["pid"],
            "the agent's conversation file holds the comment, received as a bracketed paste "
            "by the same process",
        )

        pids = rt.tmux.pane_pids(self.report.tmux_name)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        dead = _wait(
            lambda: read_fleet(rt.tmux).presence(self.report.tmux_name) == DEAD, self.timeout
        )
        self._step(
            "the agent is killed",
            bool(pids) and dead,
            f"SIGKILL to pid {', '.join(map(str, pids)) or '?'}; tmux reports the pane dead "
            "(its scrollback kept)",
        )

        tracker.comment(ref, SECOND_COMMENT, author="newcomer")
        self._cycle()
        resumed = _wait(
            lambda: [r for r in self._conversation() if r.get("event") == "resume"],
            self.timeout,
        )
        got = _wait(lambda: self._messages_with(SECOND_COMMENT), self.timeout)
        after = rt.store.registry.get(ref)
        live = read_fleet(rt.tmux).presence(self.report.tmux_name) == LIVE
        earlier = self._messages_with(FIRST_COMMENT)
        self._step(
            "the next comment resumes the same conversation",
            bool(
                resumed
                and got
                and earlier
                and live
                and after
                and record
                and after.conversation_id == record.conversation_id
                and resumed[0]["pid"] != started[0]["pid"]
            ),
            f"a new agent process (pid {resumed[0]['pid'] if resumed else '?'}) resumed "
            f"conversation {after.conversation_id if after else '?'}; the file holds both "
            "comments",
        )
        self.report.events = rt.event_log.read()

    def _seen(self, needle: str) -> list[list[str]]:
        """User turns of the model requests that carry `needle` (what the model saw)."""
        from .fakemodel import user_texts

        turns = (user_texts(r.body) for r in self.model.requests())
        return [t for t in turns if any(needle in x for x in t)]

    def _until(self, needle: str) -> list[list[str]]:
        def attempt() -> list[list[str]]:
            self._cycle()
            return self._seen(needle)

        rows: list[list[str]] = _wait(attempt, self.timeout * 3, interval=0.5)
        return rows

    def _real_steps(self, ref: Any) -> None:
        """The same story with a real CLI; the proof is what the model API received."""
        rt = self.rt
        assert rt is not None
        opened = self._until("Say hello, then wait for comments.")
        record = rt.store.registry.get(ref)
        self.report.tmux_name = record.tmux_name if record else ref.tmux_name()
        self._step(
            f"a poll cycle spawns {self.harness}",
            bool(opened and record and record.conversation_id),
            f"tmux session {self.report.tmux_name}; the model API received the item "
            f"(conversation {record.conversation_id if record else '?'})",
        )
        from .tracker import LocalTracker

        tracker = LocalTracker(rt.store)
        tracker.comment(ref, FIRST_COMMENT, author="newcomer")
        got = self._until(FIRST_COMMENT)
        confirmed = [e for e in rt.event_log.read() if e.get("type") == "dispatch.confirmed"]
        self._step(
            "a comment is pasted into the running agent",
            bool(got and confirmed),
            "the model API received the comment; the harness's own file confirmed it",
        )
        pids = rt.tmux.pane_pids(self.report.tmux_name)
        for pid in pids:
            os.killpg(pid, signal.SIGKILL)
        dead = _wait(
            lambda: read_fleet(rt.tmux).presence(self.report.tmux_name) == DEAD, self.timeout
        )
        self._step("the agent is killed", bool(pids) and dead, "SIGKILL; tmux reports it dead")
        tracker.comment(ref, SECOND_COMMENT, author="newcomer")
        got = self._until(SECOND_COMMENT)
        after = rt.store.registry.get(ref)
        self._step(
            "the next comment resumes the same conversation",
            bool(got and any(FIRST_COMMENT in t for t in got[-1]))
            and bool(after and record and after.conversation_id == record.conversation_id),
            "the model API received the new comment with the earlier turns, same conversation",
        )
        self.report.events = rt.event_log.read()

    def _finish(self) -> None:
        if self.model is not None:
            self.model.stop()
        if self.rt is not None:
            if not self.report.events:
                self.report.events = self.rt.event_log.read()
            self.rt.close()
        if self.keep:
            self.report.kept = True
            return
        # Our own private server, started by this demo: nothing else lives on it.
        from loop_tmux import Tmux

        Tmux(socket_name=self.report.socket, config_file="/dev/null").kill_server(timeout=10)
        shutil.rmtree(self.report.workdir, ignore_errors=True)
