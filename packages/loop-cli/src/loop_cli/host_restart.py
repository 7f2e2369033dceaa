"""`sessions restart --host NAME` / `--all-hosts`: each host restarts its own sessions.

A host's tmux sessions can only be relaunched on that host. The command therefore
writes one restart request per named host into the shared store
(`loop_dispatch.hostrestarts`) and waits, bounded, for the answers; each host's worker
(`poll start`) takes the requests for its host name, runs the very restart
`sessions restart --all` runs there (its own sessions: the items placed on it), and
records the outcome counts. A host whose lease ran out is reported at once (its
request stays queued, for when it comes back); a live host that does not answer
within the wait is reported too. Nothing travels by ssh.

On the single-host SQLite store there are no other hosts: `--host` names this host
(and `--all-hosts` means it), and the restart runs here, in the command.

Core functions return values and never print; the command renders them.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import LoopError, UsageError
from .rotation.restart import (
    SKIPPED_BUSY_EXIT,
    Rollout,
    Row,
    Selection,
    exit_code,
    restart_sessions,
)

if TYPE_CHECKING:
    from loop_dispatch.hostrestarts import RestartRequest
    from loop_envstate import EnvFile

    from .runtime import Runtime

EVENT_SOURCE = "sessions.restart"
POLL_SECONDS = 0.25


@dataclass(frozen=True)
class HostAnswer:
    """What became of one host's request when the command stopped waiting.

    `state`: "done" (the host answered: see `result`), "expired" (the host's lease had
    run out: nothing will act on it until the host is back), "no-answer" (live, but it
    did not finish within the wait).
    """

    host: str
    request_id: int
    state: str
    result: dict[str, Any] | None
    request_state: str  # the stored request's own: pending, taken or done

    @property
    def skipped_busy(self) -> bool:
        """The host left a session running because it stayed mid-turn (its exit 3)."""
        return bool(self.result and self.result.get("counts", {}).get("skipped-busy"))

    @property
    def failed(self) -> bool:
        if self.state != "done" or self.result is None:
            return True
        code = int(self.result.get("exitCode", 1))
        return bool(self.result.get("error")) or code not in (0, SKIPPED_BUSY_EXIT)

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "requestId": self.request_id,
            "state": self.state,
            "requestState": self.request_state,
            "result": self.result,
        }


def this_host_selection(rt: Runtime) -> Selection:
    """`--all` as this host means it: every active session (on a fleet's shared store,
    those of the items placed on this host; another host's panes are not here)."""
    if not rt.fleet:
        return Selection(True)
    from loop_dispatch.hosts import Hosts

    placed = set(Hosts(rt.store).placed_on(rt.host_name))
    active = rt.store.registry.list("active")
    refs = tuple(r.work_item for r in active if str(r.work_item) in placed)
    return Selection(False, refs)


def counts(rows: Sequence[Row]) -> dict[str, int]:
    """Outcome -> sessions, the only thing a request's result keeps of the rows."""
    return dict(Counter(r.outcome.value for r in rows))


def restart_here(
    rt: Runtime, env: EnvFile, *, force: bool, dry_run: bool, how: Rollout | None = None
) -> list[Row]:
    """This host's own sessions, restarted as `sessions restart --all` does."""
    return restart_sessions(
        this_host_selection(rt), env, rt.restart_deps(), dry_run=dry_run, force=force, how=how
    )


def rollout_options(how: Rollout) -> dict[str, Any]:
    """A request's rollout options as stored (JSON)."""
    return {"waitIdle": how.wait_idle, "busy": how.busy, "maxParallel": how.max_parallel}


def rollout_from(options: dict[str, Any]) -> Rollout:
    """The rollout a request asks for (the defaults for an older request without
    options); UsageError for options this host cannot honour."""
    if options.get("error"):
        raise UsageError(f"restart request options: {options['error']}")
    try:
        return Rollout(
            wait_idle=float(options.get("waitIdle", Rollout.wait_idle)),
            busy=str(options.get("busy", Rollout.busy)),
            max_parallel=int(options.get("maxParallel", Rollout.max_parallel)),
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(f"restart request options: {exc}") from None


def target_hosts(rt: Runtime, names: Sequence[str], all_hosts: bool) -> list[str]:
    """The hosts to ask, validated: every name must be a host of this store. Raises
    UsageError (one line) for an unknown name or an empty fleet."""
    this = rt.host_name
    if not rt.fleet:
        for name in names:
            if name != this:
                raise UsageError(
                    f"--host {name}: not a host of this store; the SQLite state store has "
                    f"one host, this one ({this}); a fleet needs store.url (docs/scale-out.md)"
                )
        return [this]
    from loop_dispatch.hosts import Hosts

    known = [h.name for h in Hosts(rt.store).list()]
    if all_hosts:
        if not known:
            raise UsageError("--all-hosts: no host of this fleet has run a worker yet")
        return known
    chosen: list[str] = []
    for name in names:
        if name not in known:
            listed = ", ".join(known) or "none yet"
            raise UsageError(f"--host {name}: unknown host (hosts of this fleet: {listed})")
        if name not in chosen:
            chosen.append(name)
    return chosen


def request_restarts(
    rt: Runtime,
    hosts: Sequence[str],
    *,
    force: bool,
    dry_run: bool,
    wait: float,
    how: Rollout | None = None,
    on_answer: Callable[[HostAnswer], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[HostAnswer]:
    """Write one request per host, then wait up to `wait` seconds for their answers
    (each handed to `on_answer` as it comes). A host whose lease has run out (before
    or during the wait) is answered at once as "expired"; its request stays queued."""
    from loop_dispatch.hostrestarts import RestartRequests
    from loop_dispatch.hosts import Hosts

    requests = RestartRequests(rt.store)
    by = f"{rt.host_name}/{os.getpid()}"
    options = None if how is None else rollout_options(how)
    made = {
        r.id: r
        for r in requests.request(hosts, by=by, force=force, dry_run=dry_run, options=options)
    }
    answers: dict[int, HostAnswer] = {}

    def answer(request: RestartRequest, state: str) -> None:
        got = HostAnswer(request.host, request.id, state, request.result, request.state)
        answers[request.id] = got
        if on_answer is not None:
            on_answer(got)

    deadline = time.monotonic() + max(0.0, wait)
    while True:
        waiting = [i for i in made if i not in answers]
        if not waiting:
            break
        live = {h.name for h in Hosts(rt.store).list() if h.live}
        for request in requests.get(waiting):
            if request.state == "done":
                answer(request, "done")
            elif request.host not in live and request.state == "pending":
                answer(request, "expired")
        if len(answers) == len(made) or time.monotonic() >= deadline:
            break
        sleep(POLL_SECONDS)
    for request in requests.get([i for i in made if i not in answers]):
        answer(request, "done" if request.state == "done" else "no-answer")
    return [answers[i] for i in sorted(made)]


def serve_requests(rt: Runtime) -> list[RestartRequest]:
    """The worker's side: take this host's pending requests, restart this host's own
    sessions for each, record the counts. Returns the requests it finished.

    A restart that cannot run at all (no env file, the file unreadable) is recorded
    with its one-line reason, never raised: the worker goes on.
    """
    from loop_dispatch.hostrestarts import RestartRequests, summary
    from loop_dispatch.hosts import host_owner

    from .rotation.launcher import require_env_file

    requests = RestartRequests(rt.store)
    done = []
    for request in requests.take(rt.host_name, host_owner(rt.host_name)):
        try:
            env = require_env_file(rt.config)
            how = rollout_from(request.options)
            rows = restart_here(rt, env, force=request.force, dry_run=request.dry_run, how=how)
            result = summary(counts(rows), exit_code=exit_code(rows))
        except LoopError as exc:
            result = summary({}, exit_code=exc.exit_code, error=str(exc))
        except Exception as exc:  # recorded for the asker; the worker goes on
            result = summary({}, exit_code=1, error=f"{type(exc).__name__}: {exc}")
        requests.finish(request.id, result)
        rt.event_log.emit(
            "host.restart_request",
            level="error" if result["exitCode"] else "info",
            source=EVENT_SOURCE,
            detail={
                "host": rt.host_name,
                "request_id": request.id,
                "requested_by": request.requested_by,
                "force": request.force,
                "dry_run": request.dry_run,
                "options": request.options,
                **result,
            },
        )
        done.append(request)
    return done
