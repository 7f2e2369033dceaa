"""restart_sessions: the row/exit-code table, against a modelled tmux and registry.

The modelled tmux behaves like the real one where restart depends on it: a respawn
gives the pane a new pid whose environment is what the launcher would exec with, a
pane can die inside the survival window, and tmux can refuse a respawn.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from loop_cli.errors import UsageError
from loop_cli.rotation.launcher import EnvFileLauncher
from loop_cli.rotation.restart import (
    Outcome,
    RestartDeps,
    Row,
    exit_code,
    restart_sessions,
    select,
)
from loop_dispatch import LaunchSpec, WorkItemRef
from loop_dispatch.registry import SessionRecord
from loop_envstate import fingerprint, parse_text
from loop_tmux import Pane, RespawnResult, TmuxUnavailable

NEW = {"API_TOKEN": "new-token-value", "REGION": "eu"}
OLD = {"API_TOKEN": "old-token-value", "REGION": "eu"}


def record(n: int, cwd: Path, *, conversation: str | None = "conv", harness: str = "fake"):
    ref = WorkItemRef.parse(f"local:proj#{n}")
    now = datetime.now(timezone.utc)
    return SessionRecord(
        ref,
        ref.slug(),
        ref.tmux_name(),
        harness,
        conversation and f"{conversation}-{n}",
        cwd,
        "active",
        now,
        now,
    )


class FakeRegistry:
    def __init__(self, records):
        self.records = {r.work_item: r for r in records}

    def get(self, ref):
        return self.records.get(ref)

    def list(self, status=None):
        return [r for r in self.records.values() if status is None or r.status == status]

    def mark_started(self, ref):
        """As the registry does on a relaunch in place: the start time moves."""
        if ref not in self.records:
            return False
        self.records[ref] = replace(self.records[ref], started_at=datetime.now(timezone.utc))
        return True


@dataclass
class FakeTmux:
    """A tmux server model: session -> (pid, dead); pid -> environment held."""

    envs: dict[int, dict[str, str] | None] = field(default_factory=dict)
    sessions: dict[str, tuple[int, bool]] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)
    die_on_respawn: set[str] = field(default_factory=set)
    env_after_respawn: dict[str, dict[str, str] | None] = field(default_factory=dict)
    next_env: dict[str, str] | None = None
    silent_after_respawn: bool = False
    respawned: list[tuple[str, list[str], str, dict]] = field(default_factory=list)
    survivor_calls: list[list[str]] = field(default_factory=list)
    panes_calls: int = 0
    pids: itertools.count = field(default_factory=lambda: itertools.count(1000))

    def start(self, name: str, env: dict[str, str] | None) -> None:
        pid = next(self.pids)
        self.envs[pid] = env
        self.sessions[name] = (pid, False)

    def panes(self):
        self.panes_calls += 1
        if self.silent_after_respawn and self.respawned:
            raise TmuxUnavailable("tmux did not answer within 3s")
        return [
            Pane(session=name, pane_id=f"%{pid}", pid=pid, dead=dead, command="python")
            for name, (pid, dead) in self.sessions.items()
        ]

    def respawn(self, name, argv, cwd, env=None):
        self.respawned.append((name, list(argv), str(cwd), dict(env or {})))
        if name in self.refuse:
            return RespawnResult(ok=False, error="can't find pane: " + name)
        pid = next(self.pids)
        self.envs[pid] = self.env_after_respawn.get(name, self.next_env)
        self.sessions[name] = (pid, name in self.die_on_respawn)
        return RespawnResult(ok=True)

    def survivors(self, names, delay=1.0):
        names = list(names)
        self.survivor_calls.append(names)
        return {n: n in self.sessions and not self.sessions[n][1] for n in names}

    def reader(self, pid):
        return self.envs.get(pid)


class FakeAdapter:
    name = "fake"

    def __init__(self, can_resume=True):
        self.can_resume = can_resume

    def resume_argv(self, prompt, conversation_id):
        return ["/bin/sh", "-c", "sleep 60", "--resume", conversation_id, prompt]


class Events:
    def __init__(self):
        self.records = []

    def emit(self, type, **kw):
        self.records.append({"type": type, **kw})


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "app.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in NEW.items()))
    return parse_text(path.read_text(), path)


def make(tmp_path, records, tmux, **kw):
    adapter = kw.pop("adapter", FakeAdapter())
    events = Events()
    deps = RestartDeps(
        registry=FakeRegistry(records),
        tmux=tmux,
        launcher=EnvFileLauncher(tmp_path / "app.env"),
        adapter_for=lambda r: adapter if r.harness == adapter.name else None,
        events=events,
        reader=tmux.reader,
        launcher_check=kw.pop("launcher_check", lambda: None),
        survival_delay=0,
        verify_timeout=kw.pop("verify_timeout", 0),
        sleep=lambda seconds: None,
        **kw,
    )
    return deps, events


def outcomes(rows: list[Row]) -> dict[str, str]:
    return {r.ref: r.outcome.value for r in rows}


def test_stale_current_and_not_running_sessions(tmp_path, env_file):
    stale, current, gone = (record(n, tmp_path) for n in (1, 2, 3))
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(stale.tmux_name, dict(OLD))
    tmux.start(current.tmux_name, dict(NEW))
    deps, events = make(tmp_path, [stale, current, gone], tmux)

    rows = restart_sessions(select(True, []), env_file, deps)

    assert outcomes(rows) == {
        "local:proj#1": "restarted",
        "local:proj#2": "up-to-date",
        "local:proj#3": "skipped-not-running",
    }
    assert [r[0] for r in tmux.respawned] == [stale.tmux_name]
    assert "API_TOKEN" in rows[0].detail
    assert exit_code(rows) == 0
    assert [e["type"] for e in events.records] == ["session.env_restart"]
    assert events.records[0]["detail"]["stale_names"] == ["API_TOKEN"]


def test_relaunch_resumes_same_conversation_in_same_cwd_under_launcher(tmp_path, env_file):
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(rec.tmux_name, dict(OLD))
    deps, _ = make(tmp_path, [rec], tmux)

    restart_sessions(select(True, []), env_file, deps)

    ((name, argv, cwd, env),) = tmux.respawned
    assert (name, cwd, env) == (rec.tmux_name, str(tmp_path), {})
    assert argv[1:3] == ["exec", str(tmp_path / "app.env")]
    assert argv[argv.index("--") + 1 :][:5] == ["/bin/sh", "-c", "sleep 60", "--resume", "conv-1"]
    assert f"THE_LOOP_WORK_ITEM={rec.work_item}" in argv[: argv.index("--")]


def test_stale_rows_carry_both_fingerprints(tmp_path, env_file):
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(OLD))  # the relaunch somehow still holds the old value
    tmux.start(rec.tmux_name, dict(OLD))
    deps, _ = make(tmp_path, [rec], tmux)

    dry = restart_sessions(select(True, []), env_file, deps, dry_run=True)
    assert [r.outcome for r in dry] == [Outcome.WOULD_RESTART]
    assert [(n.name, n.file, n.process) for n in dry[0].stale] == [
        ("API_TOKEN", fingerprint(NEW["API_TOKEN"]), fingerprint(OLD["API_TOKEN"]))
    ]
    assert tmux.respawned == []

    rows = restart_sessions(select(True, []), env_file, deps)
    assert rows[0].outcome is Outcome.VERIFIED_STALE
    assert rows[0].stale[0].process == fingerprint(OLD["API_TOKEN"])
    assert exit_code(rows) == 1


def test_launcher_not_yet_execd_is_reread_until_it_holds_the_file(tmp_path, env_file):
    """Until the launcher execs, the pane pid still shows the inherited (old) env."""
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(OLD))
    tmux.start(rec.tmux_name, dict(OLD))
    reads = []
    base_reader = tmux.reader

    def reader(pid):
        reads.append(pid)
        if len(reads) == 4:  # drift read, then two reads before the exec
            tmux.envs[pid] = dict(NEW)
        return base_reader(pid)

    deps, _ = make(tmp_path, [rec], tmux, verify_timeout=30)
    deps.reader = reader

    rows = restart_sessions(select(True, []), env_file, deps)

    assert rows[0].outcome is Outcome.RESTARTED
    assert len(reads) == 4
    assert tmux.survivor_calls == [[rec.tmux_name]]


def test_force_relaunches_up_to_date_sessions(tmp_path, env_file):
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(rec.tmux_name, dict(NEW))
    deps, _ = make(tmp_path, [rec], tmux)

    assert outcomes(restart_sessions(select(True, []), env_file, deps)) == {
        "local:proj#1": "up-to-date"
    }
    rows = restart_sessions(select(True, []), env_file, deps, force=True)
    assert outcomes(rows) == {"local:proj#1": "restarted"}
    assert len(tmux.respawned) == 1


def test_unreadable_sessions_are_relaunched_and_may_stay_unverified(tmp_path, env_file):
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=None)  # /proc refuses, before and after
    tmux.start(rec.tmux_name, None)
    deps, _ = make(tmp_path, [rec], tmux)

    rows = restart_sessions(select(True, []), env_file, deps)

    assert rows[0].outcome is Outcome.UNVERIFIED
    assert len(tmux.respawned) == 1
    assert exit_code(rows) == 0  # unverified alone never fails


@pytest.mark.parametrize(
    ("setup", "expected", "detail"),
    [
        ({"adapter": FakeAdapter(can_resume=False)}, "skipped-not-resumable", "cannot resume"),
        ({"conversation": None}, "skipped-not-resumable", "no recorded conversation"),
        ({"harness": "other"}, "skipped-not-resumable", "not the configured one"),
        ({"launcher_check": lambda: "the launcher exited 2"}, "failed", "launcher exited 2"),
        ({"cwd": "missing"}, "failed", "working directory"),
        ({"binary": "no-such-harness-xyz"}, "failed", "not found on PATH"),
        ({"binary": "/nonexistent/harness"}, "failed", "does not exist"),
    ],
)
def test_sessions_that_cannot_relaunch_are_left_running(
    tmp_path, env_file, setup, expected, detail
):
    cwd = tmp_path / "missing" if setup.get("cwd") else tmp_path
    rec = record(
        1, cwd, conversation=setup.get("conversation", "conv"), harness=setup.get("harness", "fake")
    )
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(rec.tmux_name, dict(OLD))
    adapter = setup.get("adapter", FakeAdapter())
    if "binary" in setup:
        binary = setup["binary"]
        adapter.resume_argv = lambda prompt, cid: [binary, "--resume", cid]
    kw = {"launcher_check": setup["launcher_check"]} if "launcher_check" in setup else {}
    deps, events = make(tmp_path, [rec], tmux, adapter=adapter, **kw)

    rows = restart_sessions(select(True, []), env_file, deps)

    assert rows[0].outcome.value == expected
    assert detail in rows[0].detail
    assert "left running" in rows[0].detail
    assert tmux.respawned == []  # no pane touched
    assert exit_code(rows) == (1 if expected == "failed" else 0)
    assert [e["level"] for e in events.records] == (["error"] if expected == "failed" else [])


def test_refused_and_dying_relaunches_fail(tmp_path, env_file):
    refused, dies, fine = (record(n, tmp_path) for n in (1, 2, 3))
    tmux = FakeTmux(next_env=dict(NEW), refuse={refused.tmux_name}, die_on_respawn={dies.tmux_name})
    for rec in (refused, dies, fine):
        tmux.start(rec.tmux_name, dict(OLD))
    deps, events = make(tmp_path, [refused, dies, fine], tmux)

    rows = restart_sessions(select(True, []), env_file, deps)

    assert outcomes(rows) == {
        "local:proj#1": "failed",
        "local:proj#2": "failed",
        "local:proj#3": "restarted",
    }
    assert "can't find pane" in rows[0].detail  # tmux's own error carried through
    assert "exited within" in rows[1].detail
    assert exit_code(rows) == 1
    assert [e["level"] for e in events.records] == ["error", "error", "info"]


def test_one_shared_survival_window_and_one_read_per_phase(tmp_path, env_file):
    records = [record(n, tmp_path) for n in range(1, 21)]
    tmux = FakeTmux(next_env=dict(NEW))
    for rec in records:
        tmux.start(rec.tmux_name, dict(OLD))
    deps, _ = make(tmp_path, records, tmux)

    rows = restart_sessions(select(True, []), env_file, deps)

    assert {r.outcome for r in rows} == {Outcome.RESTARTED}
    assert tmux.survivor_calls == [[r.tmux_name for r in records]]
    assert tmux.panes_calls == 2  # drift before, one verification round after


def test_tmux_silent_after_relaunch_is_unverified_not_lost(tmp_path, env_file):
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW), silent_after_respawn=True)
    tmux.start(rec.tmux_name, dict(OLD))
    tmux.survivors = lambda names, delay=1.0: (_ for _ in ()).throw(TmuxUnavailable("silent"))
    deps, _ = make(tmp_path, [rec], tmux)

    rows = restart_sessions(select(True, []), env_file, deps)

    assert rows[0].outcome is Outcome.UNVERIFIED
    assert "did not answer" in rows[0].detail


def test_named_refs_include_unregistered_and_keep_order(tmp_path, env_file):
    rec = record(2, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(rec.tmux_name, dict(NEW))
    deps, _ = make(tmp_path, [rec], tmux)

    rows = restart_sessions(select(False, ["local:proj#9", "local:proj#2"]), env_file, deps)

    assert [(r.ref, r.outcome.value) for r in rows] == [
        ("local:proj#9", "skipped-unregistered"),
        ("local:proj#2", "up-to-date"),
    ]


def test_busy_item_lock_leaves_session_running(tmp_path, env_file):
    busy, free = record(1, tmp_path), record(2, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    for rec in (busy, free):
        tmux.start(rec.tmux_name, dict(OLD))
    taken = []

    @contextmanager
    def lock(ref):
        if ref == busy.work_item:
            raise TimeoutError(f"work item {ref} is locked by another process")
        taken.append(ref)
        yield

    deps, _ = make(tmp_path, [busy, free], tmux, lock=lock)
    rows = restart_sessions(select(True, []), env_file, deps)

    assert outcomes(rows) == {"local:proj#1": "failed", "local:proj#2": "restarted"}
    assert "busy" in rows[0].detail
    assert [r[0] for r in tmux.respawned] == [free.tmux_name]
    assert taken == [free.work_item]


def test_an_item_closed_between_selection_and_its_lock_is_never_relaunched(tmp_path, env_file):
    """Restart racing a close: the close lands while restart waits for the item's lock;
    under the lock the record is re-read, and the closed item is `skipped-closed`."""
    closing, other = record(1, tmp_path), record(2, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    for rec in (closing, other):
        tmux.start(rec.tmux_name, dict(OLD))
    deps, _ = make(tmp_path, [closing, other], tmux)

    @contextmanager
    def lock(ref):
        if ref == closing.work_item:  # the close ran while we waited for this lock
            deps.registry.records[ref] = replace(closing, status="closed")
        yield

    deps.lock = lock
    rows = restart_sessions(select(True, []), env_file, deps)

    assert outcomes(rows) == {"local:proj#1": "skipped-closed", "local:proj#2": "restarted"}
    assert [r[0] for r in tmux.respawned] == [other.tmux_name]


def test_no_value_in_rows_or_events(tmp_path, env_file):
    recs = [record(n, tmp_path) for n in (1, 2)]
    tmux = FakeTmux(next_env=dict(OLD), refuse={recs[1].tmux_name})
    for rec in recs:
        tmux.start(rec.tmux_name, dict(OLD))
    deps, events = make(tmp_path, recs, tmux)

    rows = restart_sessions(select(True, []), env_file, deps)

    text = repr([r.to_dict() for r in rows]) + repr(events.records)
    for value in (*NEW.values(), *OLD.values()):
        if value != "eu":
            assert value not in text


@pytest.mark.parametrize(
    ("outcome_values", "code"),
    [
        ([], 0),
        (["restarted", "up-to-date", "skipped-not-running"], 0),
        (["skipped-not-resumable", "skipped-unregistered", "would-restart"], 0),
        (["unverified"], 0),
        (["restarted", "failed"], 1),
        (["verified-stale", "unverified"], 1),
    ],
)
def test_exit_code_table(outcome_values, code):
    rows = [Row("local:p#1", "loop-x", Outcome(v), "") for v in outcome_values]
    assert exit_code(rows) == code


def test_selection_refusals():
    with pytest.raises(UsageError, match=r"--all.*ref"):
        select(False, [])
    with pytest.raises(UsageError, match="not both"):
        select(True, ["local:p#1"])
    assert select(False, ["local:p#1", "local:p#1"]).refs == (WorkItemRef.parse("local:p#1"),)


def test_launchspec_is_what_tmux_gets(tmp_path):
    launcher = EnvFileLauncher(tmp_path / "f.env", config_path=tmp_path / "c.yaml")
    spec = launcher(record(1, tmp_path), ["claude", "--resume", "x", "hi"])
    assert isinstance(spec, LaunchSpec)
    assert spec.env == {}


def _launcher_script(tmp_path: Path, ran: Path) -> Path:
    """A launcher program that leaves a mark when it is run."""
    script = tmp_path / "bin" / "loop-envstate"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\ntouch {ran}\nexit 0\n")
    script.chmod(0o755)
    return script


def test_a_dry_run_resolves_the_launcher_without_running_it(tmp_path, env_file, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no loop-envstate to fall back on
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(rec.tmux_name, dict(OLD))
    ran = tmp_path / "launcher-ran"
    script = _launcher_script(tmp_path, ran)
    deps, _ = make(tmp_path, [rec], tmux, launcher_check=None)
    deps.launcher = EnvFileLauncher(tmp_path / "app.env", python=str(script.parent / "python"))

    dry = restart_sessions(select(True, []), env_file, deps, dry_run=True)
    assert [r.outcome for r in dry] == [Outcome.WOULD_RESTART]
    assert not ran.exists()  # nothing was started for a plan

    script.chmod(0o644)  # the launcher can no longer be executed
    dry = restart_sessions(select(True, []), env_file, deps, dry_run=True)
    assert [r.outcome for r in dry] == [Outcome.FAILED]
    assert "is not an executable file" in dry[0].detail, dry[0].detail
    assert tmux.respawned == []


def test_a_dry_run_sees_a_launcher_whose_interpreter_is_gone(tmp_path, env_file, monkeypatch):
    """A venv whose Python was removed: the script is there and executable, its #! line
    names nothing; the dry run says so instead of promising a restart."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rec = record(1, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    tmux.start(rec.tmux_name, dict(OLD))
    script = _launcher_script(tmp_path, tmp_path / "ran")
    script.write_text(f"#!{tmp_path / 'gone' / 'python'}\nprint('never')\n")
    deps, _ = make(tmp_path, [rec], tmux, launcher_check=None)
    deps.launcher = EnvFileLauncher(tmp_path / "app.env", python=str(script.parent / "python"))

    dry = restart_sessions(select(True, []), env_file, deps, dry_run=True)
    assert [r.outcome for r in dry] == [Outcome.FAILED]
    assert "names an interpreter that is gone" in dry[0].detail, dry[0].detail


# -- a stop signal mid-run (issue 21, point 11) ------------------------------------------


def test_a_signal_in_the_survival_window_leaves_rows_and_records(tmp_path, env_file):
    """SIGINT while the relaunched harnesses are in their survival window: every
    session was relaunched, so each gets its row (unverified) and its record."""
    import signal

    from loop_cli.interrupts import Interrupted

    records = [record(n, tmp_path) for n in (1, 2, 3)]
    tmux = FakeTmux(next_env=dict(NEW))
    for rec in records:
        tmux.start(rec.tmux_name, dict(OLD))

    def interrupted_window(names, delay=1.0):
        raise Interrupted(signal.SIGINT)  # what the command's handler raises

    tmux.survivors = interrupted_window
    deps, events = make(tmp_path, records, tmux)

    with pytest.raises(Interrupted) as stop:
        restart_sessions(select(True, []), env_file, deps)

    rows = stop.value.partial
    assert stop.value.exit_code == 130
    assert {r.outcome for r in rows} == {Outcome.UNVERIFIED}
    assert all("interrupted (SIGINT) before its survival check" in r.detail for r in rows)
    assert [e["work_item"] for e in events.records] == [str(r.work_item) for r in records]
    assert {e["detail"]["outcome"] for e in events.records} == {"unverified"}
    assert all(e["detail"]["stale_names"] == ["API_TOKEN"] for e in events.records)


def test_a_signal_before_the_relaunch_touches_nothing(tmp_path, env_file):
    """SIGTERM while waiting for an item's lock: the sessions are left as they were,
    rows say `interrupted`, and no session record is written for them."""
    import signal

    from loop_cli.interrupts import Interrupted

    first, second = record(1, tmp_path), record(2, tmp_path)
    tmux = FakeTmux(next_env=dict(NEW))
    for rec in (first, second):
        tmux.start(rec.tmux_name, dict(OLD))

    @contextmanager
    def lock(ref):
        if ref == second.work_item:
            raise Interrupted(signal.SIGTERM)
        yield

    deps, events = make(tmp_path, [first, second], tmux, lock=lock)
    with pytest.raises(Interrupted) as stop:
        restart_sessions(select(True, []), env_file, deps)

    assert stop.value.exit_code == 143
    assert outcomes(stop.value.partial) == {
        "local:proj#1": "interrupted",
        "local:proj#2": "interrupted",
    }
    assert tmux.respawned == []
    assert events.records == []
