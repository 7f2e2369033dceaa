"""The Tmux client: tri-state probes, collision-safe spawn, respawn, delivery, fleet reads."""

from __future__ import annotations

import itertools
import os
import re
import signal
import stat
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from . import commands, paste, runner, versions
from . import names as naming
from .errors import TmuxCapabilityWarning, TmuxUnavailable
from .presence import Presence
from .results import (
    DeliverResult,
    Observation,
    Pane,
    PaneView,
    RespawnResult,
    SpawnOutcome,
    SpawnResult,
)

# The session's spawn token (a user option set by spawn) is read in the same call.
TOKEN_OPTION = "@loop_spawn_token"  # noqa: S105 (an option NAME)
_PANE_FORMAT = (
    "#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_current_command}\t"
    "#{" + TOKEN_OPTION + "}\t#{session_name}"
)
_VIEW_FIELDS = "#{alternate_on}\t#{pane_dead}\t#{pane_pid}\t#{pane_current_command}"
_VIEW_FORMAT = "loop-tmux-view\t" + _VIEW_FIELDS
_OBSERVE_PANES = "loop-tmux-pane\t#{pane_dead}"
_OBSERVE_FORMAT = "loop-tmux-observe\t#{" + TOKEN_OPTION + "}\t" + _VIEW_FIELDS
# tmux refuses a command line of over 16 KiB ("command too long"); batches stay below.
_BATCH_BYTES = 12_000
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DEAD_MARK = "loop-tmux:pane-dead"
_POLL = 0.05
_EXIT_POLL = 0.005
_EXIT_WAIT_MAX = 2.0


class Tmux:
    """A client for one tmux server, fixed at construction (default, ``-L`` or ``-S``).

    Every method runs tmux with a timeout; ``probe_timeout`` bounds liveness reads,
    ``timeout`` everything else, and each call may override them. ``width``/``height``
    size new sessions; ``history_limit`` sets the SERVER-GLOBAL history-limit before each
    spawn (tmux reads it when a pane is created), so use it with a dedicated socket.

    ``server_env`` (see `environment.allowlisted`) is the whole environment every tmux
    client runs with, so a server this client starts holds only it; each spawn also
    empties the server's ``update-environment``, so an attaching client adds nothing.
    None keeps the caller's environment (minus TMUX), as tmux itself would.
    """

    def __init__(
        self,
        binary: str = "tmux",
        socket_name: str | None = None,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        timeout: float = 10.0,
        probe_timeout: float = 3.0,
        config_file: str | os.PathLike[str] | None = None,
        width: int | None = None,
        height: int | None = None,
        history_limit: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        server_env: Mapping[str, str] | None = None,
    ) -> None:
        if socket_name is not None and socket_path is not None:
            raise ValueError("give socket_name or socket_path, not both")
        self.binary = binary
        self.socket_name = socket_name
        self.socket_path = None if socket_path is None else os.fspath(socket_path)
        self.timeout = timeout
        self.probe_timeout = probe_timeout
        self.width = width
        self.height = height
        self.history_limit = history_limit
        self._sleep = sleep
        self.server_env = None if server_env is None else dict(server_env)
        self._base = [binary]
        if socket_name is not None:
            self._base += ["-L", socket_name]
        if self.socket_path is not None:
            self._base += ["-S", self.socket_path]
        if config_file is not None:
            self._base += ["-f", os.fspath(config_file)]
        self._version: tuple[int, int] | None = None
        self._version_known = False
        self._warned: set[str] = set()
        self._buffers = itertools.count()

    def __repr__(self) -> str:
        where = self.socket_name or self.socket_path or "default"
        return f"Tmux(binary={self.binary!r}, server={where!r})"

    # -- plumbing -------------------------------------------------------------------

    def _run(
        self, args: Sequence[str], timeout: float | None = None, stdin: bytes | None = None
    ) -> runner.Answer:
        return runner.run(
            [*self._base, *args],
            self.timeout if timeout is None else timeout,
            stdin,
            env=self.server_env,
        )

    def version(self) -> tuple[int, int] | None:
        """(major, minor) of the tmux binary, read once per client; None if unknown."""
        if not self._version_known:
            answer = runner.run([self.binary, "-V"], self.probe_timeout)
            if answer.ok:
                self._version = versions.parse_version(answer.stdout)
                self._version_known = True
        return self._version

    def _env_flags(self, env: Mapping[str, str] | None, verb: str) -> list[str]:
        """``-e`` flags when this tmux has them for ``verb``; else warn once and drop env."""
        flags = commands.env_flags(env)
        if not flags:
            return []
        needed = versions.NEW_SESSION_ENV if verb == "new-session" else versions.RESPAWN_PANE_ENV
        version = self.version()
        if versions.supports(version, needed):
            return flags
        if verb not in self._warned:
            self._warned.add(verb)
            have = ".".join(map(str, version)) if version else "unknown"
            want = ".".join(map(str, needed))
            warnings.warn(
                f"tmux {have} has no {verb} -e (needs {want}); "
                f"starting without the {len(flags) // 2} environment entries",
                TmuxCapabilityWarning,
                stacklevel=3,
            )
        return []

    # -- reads ----------------------------------------------------------------------

    def _read(self, args: Sequence[str], timeout: float) -> runner.Answer:
        """Run a read-only tmux command, asking once more when the answer is one a server
        gives while exiting after its last session was killed: that state is a clean "no
        server" moments later, not UNKNOWN. The second ask waits (without running tmux)
        until the server stops accepting connections, so a probe costs at most two tmux
        processes however slow the exit is on a loaded machine."""
        answer = self._run(args, timeout)
        if runner.is_transient(answer):
            self._await_server_exit(min(timeout, _EXIT_WAIT_MAX))
            answer = self._run(args, timeout)
        return answer

    def _await_server_exit(self, limit: float) -> None:
        """Wait up to `limit` seconds until nothing accepts connections on this client's
        server socket (an exiting server closes it last). A bare connect: no tmux
        process, no command sent."""
        path = self._server_socket()
        deadline = time.monotonic() + limit
        while _accepts(path) and time.monotonic() < deadline:
            time.sleep(_EXIT_POLL)

    def _probe(self, name: str, timeout: float | None = None) -> tuple[Presence, str | None]:
        args = ["list-panes", "-s", "-t", naming.pane_target(name), "-F", "#{pane_dead}"]
        answer = self._read(args, self.probe_timeout if timeout is None else timeout)
        if answer.ok:
            flags = answer.stdout.split()
            if "0" in flags:
                return Presence.LIVE, None
            if flags and all(flag == "1" for flag in flags):
                return Presence.DEAD, None
            return Presence.UNKNOWN, f"unexpected list-panes output {answer.stdout[:80]!r}"
        if runner.says_absent(answer):
            return Presence.ABSENT, answer.error
        return Presence.UNKNOWN, answer.error

    def probe(self, name: str, *, timeout: float | None = None) -> Presence:
        """ABSENT, DEAD, LIVE or UNKNOWN; silence is UNKNOWN, never ABSENT (AC1)."""
        return self._probe(name, timeout)[0]

    def panes(self, *, timeout: float | None = None) -> list[Pane]:
        """Every pane of the server in ONE tmux call; [] when no server runs."""
        answer = self._read(
            ["list-panes", "-a", "-F", _PANE_FORMAT], self.timeout if timeout is None else timeout
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return []
            raise TmuxUnavailable(answer.error)
        result = []
        for line in answer.stdout.splitlines():
            fields = line.split("\t", 5)
            if len(fields) != 6:
                continue
            pane_id, pid, dead, command, token, session = fields
            result.append(
                Pane(
                    session=session,
                    pane_id=pane_id,
                    pid=int(pid) if pid.isdigit() else 0,
                    dead=dead == "1",
                    command=command,
                    token=token,
                )
            )
        return result

    def pane_view(
        self, name: str, *, capture: bool = False, timeout: float | None = None
    ) -> PaneView | None:
        """The session's pane as its program left it, in ONE tmux call; None when absent.

        With ``capture`` the visible screen's text comes along (``capture-pane -p``), so
        a caller can tell a start-up or dialog screen from a ready one. Raises
        TmuxUnavailable when tmux does not answer.
        """
        target = naming.pane_target(name)
        # display-message answers for a missing target too: has-session makes it definite.
        parts: list[list[str]] = [
            ["has-session", "-t", naming.session_target(name)],
            ["display-message", "-p", "-t", target, _VIEW_FORMAT],
        ]
        if capture:
            parts.append(["capture-pane", "-p", "-t", target])
        answer = self._read(
            commands.chain(*parts), self.probe_timeout if timeout is None else timeout
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return None
            raise TmuxUnavailable(answer.error)
        head, _, screen = answer.stdout.partition("\n")
        mark, _, fields = head.partition("\t")
        if mark != "loop-tmux-view":
            raise TmuxUnavailable(f"unexpected display-message output {head[:80]!r}")
        return _view(fields, screen if capture else None)

    def observe(
        self, name: str, *, capture: bool = False, timeout: float | None = None
    ) -> Observation:
        """Presence, spawn token, dead flag and (with ``capture``) the screen in ONE tmux
        call, for a caller that would otherwise probe, read the token and view the pane
        one call each. Never raises for silence: an unanswered call is UNKNOWN."""
        target = naming.pane_target(name)
        parts: list[list[str]] = [
            ["has-session", "-t", naming.session_target(name)],
            ["list-panes", "-s", "-t", target, "-F", _OBSERVE_PANES],
            ["display-message", "-p", "-t", target, _OBSERVE_FORMAT],
        ]
        if capture:
            parts.append(["capture-pane", "-p", "-t", target])
        answer = self._read(
            commands.chain(*parts), self.probe_timeout if timeout is None else timeout
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return Observation(presence=Presence.ABSENT, error=answer.error)
            return Observation(presence=Presence.UNKNOWN, error=answer.error)
        return _observation(answer.stdout, capture)

    def scrollback(self, name: str, lines: int, *, timeout: float | None = None) -> str | None:
        """The pane's last `lines` lines of text (history and screen, wrapped lines
        joined, the blank rows under the last output dropped) in ONE tmux call; None
        when the session is absent. Raises TmuxUnavailable when tmux does not answer.
        The text is as the program drew it: a caller that shows it neutralises it."""
        if lines < 1:
            raise ValueError("lines must be at least 1")
        target = naming.pane_target(name)
        answer = self._read(
            commands.chain(
                ["has-session", "-t", naming.session_target(name)],
                ["capture-pane", "-p", "-J", "-S", f"-{lines}", "-t", target],
            ),
            self.probe_timeout if timeout is None else timeout,
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return None
            raise TmuxUnavailable(answer.error)
        rows = answer.stdout.rstrip("\n").split("\n")
        while rows and not rows[-1].strip():
            rows.pop()
        return "\n".join(rows[-lines:])

    def pane_views(
        self, names: Iterable[str], *, capture: bool = False, timeout: float | None = None
    ) -> dict[str, PaneView | None]:
        """`pane_view` for many sessions in as few tmux calls as tmux's command-line limit
        allows: one call per session made `status` take seconds on a fleet of 200.

        tmux ends a command list at its first error, so a session gone since the caller
        listed it ends its batch: the views read before it are kept, it is absent (tmux
        said so) and the rest go on in the next call. Each view's header and end line
        carry a random mark made for that call, so no screen text can pass for either.
        Raises TmuxUnavailable when tmux does not answer.
        """
        if isinstance(names, str):
            raise TypeError("pane_views takes an iterable of session names, not one name")
        pending = list(dict.fromkeys(naming.check_name(n) for n in names))
        if not capture and pending:
            return self._listed_views(pending, timeout)
        views: dict[str, PaneView | None] = {}
        while pending:
            answered, ran = self._views(pending, capture, timeout)
            views.update(answered)
            pending = pending[len(answered) :]
            if ran is None:  # no server at all: every session is absent
                views.update(dict.fromkeys(pending))
                break
            if not ran and pending:  # tmux stopped at this one: it said "no such session"
                views[pending.pop(0)] = None
        return views

    def _listed_views(self, names: list[str], timeout: float | None) -> dict[str, PaneView | None]:
        """Views without screens: every pane of the server in ONE `list-panes -a` (a
        display-message per session costs five times as much at 200 sessions), each
        session's active pane of its current window, as `pane_view` targets it. The
        random mark starts every line tmux formats; the command, the one field a
        program names itself, comes last and whole."""
        mark = "loop-tmux-views-" + os.urandom(8).hex()
        form = f"{mark}\t#{{window_active}}#{{pane_active}}\t#{{session_name}}\t{_VIEW_FIELDS}"
        answer = self._read(
            ["list-panes", "-a", "-F", form], self.probe_timeout if timeout is None else timeout
        )
        if not answer.ok:
            if runner.says_no_server(answer):
                return dict.fromkeys(names)
            raise TmuxUnavailable(answer.error)
        wanted = set(names)
        found: dict[str, PaneView] = {}
        for line in answer.stdout.split("\n"):
            parts = line.split("\t", 3)
            if len(parts) == 4 and parts[0] == mark and parts[1] == "11" and parts[2] in wanted:
                found[parts[2]] = _view(parts[3], None)
        return {name: found.get(name) for name in names}

    def _views(
        self, pending: list[str], capture: bool, timeout: float | None
    ) -> tuple[dict[str, PaneView], bool | None]:
        """One tmux call for as many of `pending` as fit in it: the views read whole, in
        order, and whether that batch ran whole (True), stopped at an absent session
        (False: the first one not answered) or found no server (None)."""
        mark = "loop-tmux-views-" + os.urandom(8).hex()
        parts: list[list[str]] = []
        batch: list[str] = []
        size = 0
        for name in pending:
            target = naming.pane_target(name)
            index = len(batch)
            commands_for = [
                ["has-session", "-t", naming.session_target(name)],
                ["display-message", "-p", "-t", target, f"{mark}\t{index}\t{_VIEW_FIELDS}"],
            ]
            if capture:  # the end line tells a whole screen from one cut by an error
                commands_for.append(["capture-pane", "-p", "-t", target])
                commands_for.append(["display-message", "-p", "-t", target, f"{mark}-end\t{index}"])
            size += sum(len(arg.encode()) + 3 for command in commands_for for arg in command)
            if batch and size > _BATCH_BYTES:
                break
            batch.append(name)
            parts += commands_for
        answer = self._read(
            commands.chain(*parts), self.probe_timeout if timeout is None else timeout
        )
        if not answer.ok and not runner.says_absent(answer):
            raise TmuxUnavailable(answer.error)
        if runner.says_no_server(answer):
            return {}, None
        views: dict[str, PaneView] = {}
        for index, (head, screen, ended) in enumerate(_split_views(answer.stdout, mark)):
            number, _, fields = head.partition("\t")
            if index >= len(batch) or number != str(index):
                raise TmuxUnavailable(f"unexpected display-message output {head[:80]!r}")
            if capture and not ended:
                break  # cut by the error: this session is the absent one
            views[batch[index]] = _view(fields, screen if capture else None)
        if answer.ok and len(views) != len(batch):
            raise TmuxUnavailable(f"tmux answered {len(views)} of {len(batch)} pane views")
        if not answer.ok and len(views) >= len(batch):
            raise TmuxUnavailable(answer.error)  # an error after every view: not an absence
        return views, answer.ok

    def session_token(self, name: str, *, timeout: float | None = None) -> str | None:
        """The spawn token the session was created with; None when absent or unset.

        Raises TmuxUnavailable when tmux does not answer.
        """
        answer = self._read(
            ["show-options", "-qv", "-t", naming.pane_target(name), TOKEN_OPTION],
            self.probe_timeout if timeout is None else timeout,
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return None
            raise TmuxUnavailable(answer.error)
        return answer.stdout.strip() or None

    def global_environment(self, *, timeout: float | None = None) -> dict[str, str] | None:
        """The server's global environment (`show-environment -g`); None when no server runs.

        Names tmux marks removed (`-NAME`) are left out. The mapping holds values: the
        caller decides what may be shown of them (the-loop shows fingerprints only).
        Raises TmuxUnavailable when tmux does not answer.
        """
        answer = self._read(
            ["show-environment", "-g"], self.timeout if timeout is None else timeout
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return None
            raise TmuxUnavailable(answer.error)
        return parse_environment(answer.stdout)

    def pane_pids(self, name: str, *, timeout: float | None = None) -> list[int]:
        """Pids of the session's live panes (pid > 0); [] when the session is absent.

        Raises TmuxUnavailable when tmux does not answer: "no pids" would be a lie.
        """
        answer = self._read(
            ["list-panes", "-s", "-t", naming.pane_target(name), "-F", "#{pane_dead} #{pane_pid}"],
            self.probe_timeout if timeout is None else timeout,
        )
        if not answer.ok:
            if runner.says_absent(answer):
                return []
            raise TmuxUnavailable(answer.error)
        pids = []
        for line in answer.stdout.splitlines():
            dead, _, pid = line.partition(" ")
            if dead == "0" and pid.isdigit() and int(pid) > 0:
                pids.append(int(pid))
        return pids

    def survivors(
        self,
        names: Iterable[str],
        delay: float = 1.0,
        *,
        sleep: Callable[[float], None] | None = None,
    ) -> dict[str, bool]:
        """For each name: is a pane of it still running after ``delay``?

        One wait and one ``panes()`` read for the whole fleet. Raises TmuxUnavailable
        when tmux does not answer (a "did not survive" verdict from silence would
        trigger a needless relaunch).
        """
        wanted = [naming.check_name(n) for n in names]
        (sleep or self._sleep)(delay)
        live = {pane.session for pane in self.panes() if not pane.dead and pane.pid > 0}
        return {name: name in live for name in wanted}

    def survived(
        self, name: str, delay: float = 1.0, *, sleep: Callable[[float], None] | None = None
    ) -> bool:
        """Is the session's pane still running after ``delay``? (survivors of one)."""
        return self.survivors([name], delay, sleep=sleep)[name]

    # -- actions --------------------------------------------------------------------

    def kill(self, name: str, *, timeout: float | None = None) -> bool:
        """kill-session on the exact name; True when tmux says it is gone (or was).

        tmux's word is not verified here; spawn verifies its clears with a probe.
        """
        answer = self._run(["kill-session", "-t", naming.session_target(name)], timeout)
        return answer.ok or runner.says_absent(answer)

    def kill_server(self, *, timeout: float | None = None) -> bool:
        """Kill the private server this client is bound to and remove its socket file.

        For whoever owns a server outright (test and bench fixtures, the demo): tmux
        3.3a leaves the socket file behind after kill-server, and they pile up in
        /tmp/tmux-<uid>/. Refuses the default server (neither socket_name nor
        socket_path set): that one is an operator's. Returns True once no server
        answers on the socket (killed, or none ran) and its socket file is gone; False
        when tmux did not answer (a stopped server), in which case nothing is removed.
        Only a socket is ever unlinked, never another kind of file at that path.
        """
        socket = self._socket_file()
        if socket is None:
            raise ValueError(
                "refusing to kill the default tmux server: this client has no "
                "socket_name or socket_path"
            )
        limit = self.timeout if timeout is None else timeout
        if not self._run(["kill-server"], limit).answered:
            return False
        # The server exits asynchronously; wait (bounded) until nothing answers.
        deadline = time.monotonic() + limit
        check = self._run(["list-sessions"], self.probe_timeout)
        while not runner.says_absent(check):
            if not (check.ok or runner.is_transient(check)) or time.monotonic() >= deadline:
                return False
            self._sleep(_POLL)
            check = self._run(["list-sessions"], self.probe_timeout)
        _remove_socket(socket)
        return True

    def _socket_file(self) -> str | None:
        """The socket of a private server (where tmux puts it), None for the default one."""
        if self.socket_path is None and self.socket_name is None:
            return None
        return self._server_socket()

    def _server_socket(self) -> str:
        """Where this client's server listens: `-S` path, else tmux's own rule for `-L`
        names and the default server ($TMUX_TMPDIR or /tmp, then tmux-UID/NAME)."""
        if self.socket_path is not None:
            return self.socket_path
        base = os.environ.get("TMUX_TMPDIR") or "/tmp"  # noqa: S108 -- tmux's own default
        return os.path.join(base, f"tmux-{os.getuid()}", self.socket_name or "default")

    def _clear(self, name: str) -> tuple[Presence, str | None]:
        """Kill a DEAD occupant and report what a fresh probe sees afterwards."""
        answer = self._run(["kill-session", "-t", naming.session_target(name)])
        presence, why = self._probe(name)
        if presence is not Presence.ABSENT and not answer.ok and not runner.says_absent(answer):
            why = answer.error
        return presence, why

    def _new_session(
        self, name: str, program: list[str], cwd: str, env_flags: list[str], token: str | None
    ) -> runner.Answer:
        """One invocation: [global history-limit ;] new-session ; remain-on-exit on
        [; the spawn token]: the session never exists without its token."""
        size: list[str] = []
        if self.width:
            size += ["-x", str(self.width)]
        if self.height:
            size += ["-y", str(self.height)]
        new = ["new-session", "-d", "-s", name, "-c", commands.directory_arg(cwd)]
        new += ["-P", "-F", "#{pane_pid}", *size, *env_flags, "--", *program]
        # remain-on-exit is set in the same command queue as new-session: the server
        # handles the child's exit only between queue runs, so even a program that exits
        # at once leaves a DEAD pane rather than no session.
        keep = ["set-option", "-w", "-t", naming.pane_target(name), "remain-on-exit", "on"]
        tail = [keep]
        if token is not None:
            tail.append(["set-option", "-t", naming.pane_target(name), TOKEN_OPTION, token])
        head: list[list[str]] = []
        if self.server_env is not None:
            # Before new-session: the session is created without any client variable.
            head.append(["set-option", "-g", "update-environment", ""])
        if self.history_limit is not None:
            # history-limit is read when a pane is created, so it must be set before
            # new-session, and only the server-global value is there yet.
            head.append(["set-option", "-g", "history-limit", str(self.history_limit)])
        return self._run(commands.chain(*head, new, *tail))

    @staticmethod
    def _spawned(answer: runner.Answer, cleared: bool) -> SpawnResult:
        first = answer.stdout.split()
        pid = int(first[0]) if first and first[0].isdigit() else None
        return SpawnResult(outcome=SpawnOutcome.SPAWNED, error=None, cleared=cleared, pid=pid)

    def _clear_for_spawn(self, name: str) -> SpawnResult | None:
        """Clear a DEAD occupant; None when cleared, else the result to return."""
        after, why = self._clear(name)
        if after is Presence.ABSENT:
            return None
        if after is Presence.LIVE:
            return SpawnResult(outcome=SpawnOutcome.OCCUPIED_LIVE, error=f"session {name} is live")
        return SpawnResult(
            outcome=SpawnOutcome.OCCUPIED_UNCLEARABLE,
            error=f"session {name} could not be cleared (probe after kill: {after.value}"
            + (f"; {why})" if why else ")"),
        )

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        cwd: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        *,
        token: str | None = None,
    ) -> SpawnResult:
        """Start ``argv`` in a new detached session ``name``, never over a live one.

        ``token`` (letters, digits, ``-``, ``_``) is set as the session's user option
        ``@loop_spawn_token`` in the same tmux command that creates it, so a session
        tmux creates late (after the call timed out) can still be recognised as ours.

        LIVE occupant: occupied-live, untouched (AC3). DEAD occupant: killed, the kill
        verified by a probe, else occupied-unclearable (AC4). ``duplicate session`` from
        new-session: one re-probe and at most one clear-and-retry (AC5). UNKNOWN
        pre-flight: failed, nothing killed.
        """
        naming.check_name(name)
        if token is not None and not _TOKEN_RE.fullmatch(token):
            raise ValueError("a spawn token is 1-64 letters, digits, '-' or '_'")
        program = commands.program_args(argv)
        directory = os.fspath(cwd)
        flags = self._env_flags(env, "new-session")
        if not Path(directory).is_dir():
            return SpawnResult(
                outcome=SpawnOutcome.FAILED, error=f"working directory {directory} does not exist"
            )

        presence, why = self._probe(name)
        if presence is Presence.UNKNOWN:
            reason = f"pre-flight probe of {name} got no usable answer ({why}); nothing killed"
            return SpawnResult(outcome=SpawnOutcome.FAILED, error=reason, answered=False)
        if presence is Presence.LIVE:
            return SpawnResult(outcome=SpawnOutcome.OCCUPIED_LIVE, error=f"session {name} is live")
        cleared = False
        if presence is Presence.DEAD:
            refusal = self._clear_for_spawn(name)
            if refusal is not None:
                return refusal
            cleared = True

        answer = self._new_session(name, program, directory, flags, token)
        if answer.ok:
            return self._spawned(answer, cleared)
        if not answer.answered:
            return SpawnResult(
                outcome=SpawnOutcome.FAILED,
                error=f"{answer.error} (new-session: tmux may still carry it out when it resumes)",
                answered=False,
            )
        duplicate = "duplicate session" in answer.stderr
        if not duplicate and not runner.is_transient(answer):
            return SpawnResult(outcome=SpawnOutcome.FAILED, error=answer.error)

        # Either the pre-flight missed an occupant (duplicate session), or new-session
        # reached a server that was exiting after its last session went (its sessions
        # went with it). Decide once from a fresh probe; retry at most once.
        presence, why = self._probe(name)
        if presence is Presence.LIVE:
            return SpawnResult(outcome=SpawnOutcome.OCCUPIED_LIVE, error=f"session {name} is live")
        if presence is Presence.UNKNOWN:
            if not duplicate:
                return SpawnResult(
                    outcome=SpawnOutcome.FAILED,
                    error=f"{answer.error}; re-probe: {why}",
                    answered=False,
                )
            return SpawnResult(
                outcome=SpawnOutcome.OCCUPIED_UNCLEARABLE,
                error=f"duplicate session {name}, and the re-probe got no usable answer ({why})",
            )
        if presence is Presence.DEAD:
            refusal = self._clear_for_spawn(name)
            if refusal is not None:
                return refusal
            cleared = True
        retry = self._new_session(name, program, directory, flags, token)
        if retry.ok:
            return self._spawned(retry, cleared)
        if "duplicate session" in retry.stderr:
            return SpawnResult(
                outcome=SpawnOutcome.OCCUPIED_UNCLEARABLE,
                error=f"duplicate session {name} again after one clear-and-retry",
            )
        return SpawnResult(outcome=SpawnOutcome.FAILED, error=retry.error)

    def respawn(
        self,
        name: str,
        argv: Sequence[str],
        cwd: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
    ) -> RespawnResult:
        """Replace the program in the session's pane (``respawn-pane -k``) in place.

        The session keeps its name, window and attached clients; the pane's scrollback
        does NOT survive (tmux clears the pane's screen and history on respawn).
        """
        naming.check_name(name)
        program = commands.program_args(argv)
        directory = os.fspath(cwd)
        flags = self._env_flags(env, "respawn-pane")
        if not Path(directory).is_dir():
            return RespawnResult(ok=False, error=f"working directory {directory} does not exist")
        answer = self._run(
            commands.chain(
                [
                    "respawn-pane",
                    "-k",
                    "-t",
                    naming.pane_target(name),
                    "-c",
                    commands.directory_arg(directory),
                    *flags,
                    "--",
                    *program,
                ]
            )
        )
        if answer.ok:
            return RespawnResult(ok=True)
        if not answer.answered:
            late = f"{answer.error} (respawn-pane: tmux may still carry it out when it resumes)"
            return RespawnResult(ok=False, error=late)
        return RespawnResult(
            ok=False, error=answer.error, session_missing=runner.says_absent(answer)
        )

    def deliver(self, name: str, text: str, *, timeout: float | None = None) -> DeliverResult:
        """Paste ``text`` as a bracketed paste into the session's pane, then press Enter.

        One tmux process: the text is loaded from stdin into a uniquely named buffer, and a
        server-side ``if-shell -F '#{pane_dead}'`` pastes (deleting the buffers) only into
        a live pane: tmux 3.3a crashes the whole server when pasting into a dead pane.
        A pane in a mode (an operator scrolling in copy mode) is taken out of it first, or
        the paste would arrive unbracketed. Enter is a pasted CR rather than ``send-keys``
        so nothing a mode or a read-only client does can swallow it. ``session_missing``
        only on a definite ABSENT/DEAD (AC2).
        """
        target = naming.pane_target(name)
        data = paste.encode(text)
        buffer = f"loop-tmux-{os.getpid()}-{next(self._buffers)}-{uuid.uuid4().hex[:8]}"
        enter = buffer + "-enter"
        buffers = [buffer, enter] if data else [enter]
        parts: list[list[str]] = [["has-session", "-t", naming.session_target(name)]]
        live = ""
        if data:
            parts.append(["load-buffer", "-b", buffer, "-"])
            live = f"paste-buffer -p -r -d -b {buffer} -t {target} ; "
        parts.append(["set-buffer", "-b", enter, "\r"])
        # A pane in copy mode (an operator scrolling) would take the paste unbracketed:
        # leave the mode first, in the same command-queue run as the paste.
        leave = (
            f"copy-mode -q -t {target}"
            if versions.supports(self.version(), versions.COPY_MODE_QUIT)
            else f"send-keys -t {target} -X cancel"
        )
        parts.append(["if-shell", "-F", "-t", target, "#{pane_in_mode}", leave])
        live += f"paste-buffer -d -b {enter} -t {target}"
        dead = " ; ".join(
            [f"display-message -p {_DEAD_MARK}"] + [f"delete-buffer -b {b}" for b in buffers]
        )
        parts.append(["if-shell", "-F", "-t", target, "#{pane_dead}", dead, live])
        answer = self._run(commands.chain(*parts), timeout, stdin=data)
        if answer.ok:
            if _DEAD_MARK in answer.stdout:
                return DeliverResult(
                    ok=False, session_missing=True, error=f"session {name} is dead"
                )
            return DeliverResult(ok=True)
        if answer.answered:
            # A buffer may be left loaded if the session vanished mid-command.
            for leftover in buffers:
                self._run(["delete-buffer", "-b", leftover], self.probe_timeout)
        if runner.says_absent(answer):
            return DeliverResult(ok=False, session_missing=True, error=answer.error)
        return DeliverResult(ok=False, session_missing=False, error=answer.error)

    def terminate(self, name: str, grace: float = 5.0) -> bool:
        """SIGTERM the pane's live programs, SIGKILL what outlives ``grace``; keep the pane.

        Each pane pid is signalled as a process group when it leads one (tmux starts every
        pane program as a session leader, so its non-daemonised children go too), else
        alone. remain-on-exit keeps the pane and its scrollback. Returns True when no live
        pid remains; False when tmux did not answer or something survived SIGKILL.
        """
        if not isinstance(name, str) or not naming.TERMINATE_NAME_RE.fullmatch(name):
            raise ValueError(f"refusing to terminate {name!r}: not a loop-* session name")
        try:
            pids = self.pane_pids(name)
        except TmuxUnavailable:
            return False
        if not pids:
            return True
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_running(pid) for pid in pids):
            self._sleep(_POLL)
        for pid in pids:
            if _running(pid):
                _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + min(2.0, self.timeout)
        while time.monotonic() < deadline:
            try:
                if not self.pane_pids(name):
                    return True
            except TmuxUnavailable:
                return False
            self._sleep(_POLL)
        # tmux has not marked the pane dead yet, but the kernel says every pid is gone.
        return not any(_running(pid) for pid in pids)


def _signal(pid: int, signum: signal.Signals) -> None:
    """Signal the pid's process group if it leads one, else the pid; ignore the gone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _accepts(path: str) -> bool:
    """Whether a server accepts connections on the unix socket at `path` now."""
    import socket  # only on this rare path: keeps `import loop_tmux` light

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(path)
        except (BlockingIOError, TimeoutError):
            return True  # a listener whose backlog is full (busy, or stopped)
        except OSError:
            return False  # refused, gone, too long a path, not a socket: nobody to wait for
    return True


def _remove_socket(path: str) -> None:
    """Unlink ``path`` if it is a socket; anything else there is not ours to remove."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def parse_environment(text: str) -> dict[str, str]:
    """`show-environment` lines: NAME=VALUE is set, `-NAME` is marked removed (skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and not name.startswith("-"):
            out[name] = value
    return out


def _running(pid: int) -> bool:
    """Whether pid exists and is not a zombie (tmux reaps its panes asynchronously)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _view(fields: str, screen: str | None) -> PaneView:
    """A PaneView from display-message's `_VIEW_FIELDS` answer."""
    parts = fields.split("\t", 3)
    if len(parts) != 4:
        raise TmuxUnavailable(f"unexpected display-message output {fields[:80]!r}")
    alternate, dead, pid, command = parts
    return PaneView(
        alternate_on=alternate == "1",
        command=command,
        dead=dead == "1",
        pid=int(pid) if pid.isdigit() else 0,
        screen=screen,
    )


def _observation(stdout: str, capture: bool) -> Observation:
    """An Observation from `observe`'s answer: one pane line per pane, then the view."""
    flags: list[str] = []
    lines = stdout.split("\n")
    while lines and lines[0].startswith("loop-tmux-pane\t"):
        flags.append(lines.pop(0).partition("\t")[2])
    head = lines.pop(0) if lines else ""
    mark, _, rest = head.partition("\t")
    token, _, fields = rest.partition("\t")
    if mark != "loop-tmux-observe" or not flags:
        unexpected = f"unexpected observe output {stdout[:80]!r}"
        return Observation(presence=Presence.UNKNOWN, error=unexpected)
    try:
        view = _view(fields, "\n".join(lines) if capture else None)
    except TmuxUnavailable as exc:
        return Observation(presence=Presence.UNKNOWN, error=str(exc))
    if "0" in flags:
        presence = Presence.LIVE
    elif all(flag == "1" for flag in flags):
        presence = Presence.DEAD
    else:
        return Observation(presence=Presence.UNKNOWN, error=f"unexpected pane flags {flags!r}")
    return Observation(presence=presence, token=token.strip(), view=view)


def _split_views(stdout: str, mark: str) -> list[tuple[str, str, bool]]:
    """(header after the mark, screen text up to the end line, whether the end line
    came) for each view. Lines are split at newlines only, as `pane_view` splits them:
    a program name may hold a carriage return or another line separator."""
    head_prefix, end_prefix = mark + "\t", mark + "-end\t"
    views: list[tuple[str, list[str], bool]] = []
    lines = stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the output starts no line
    for line in lines:
        if line.startswith(head_prefix):
            views.append((line[len(head_prefix) :], [], False))
        elif views and not views[-1][2]:
            head, screen, _ = views[-1]
            if line.startswith(end_prefix) and head.partition("\t")[0] == line[len(end_prefix) :]:
                views[-1] = (head, screen, True)
            else:
                screen.append(line + "\n")
    return [(head, "".join(screen), ended) for head, screen, ended in views]
