"""A modelled fake tmux for the failure paths a real server cannot be forced into.

Run as a program (``python -m loop_tmux.fake ARGS``, usually through the ``tmux`` shim
that :func:`install_fake_tmux` writes), it answers the subset of tmux that
:class:`loop_tmux.Tmux` uses, with tmux 3.3a's texts and exit codes, from a JSON table
of sessions kept in a state file. It models which sessions exist and whether their panes
are dead (seed 002, Requirement 7.2): it never answers "live" for a name it does not
hold. Faults are injected through the state file (see :class:`FakeState`):

- ``hang``: command names (or ``"*"``) that never answer, like a SIGSTOPped server;
- ``kill_noop``: names (or ``"*"``) whose kill-session exits 0 but leaves the session;
- ``duplicate``: ``{name: {"times": n, "occupant": "live"|"dead"|null}}`` -- new-session
  of a name the table does not hold answers ``duplicate session`` (n times), after
  creating the given occupant, like a racing creator after a clean pre-flight;
- ``fail``: ``{command: "error text"}`` -- that command fails with tmux's exit status 1
  (or ``{command: {"text": ..., "after": n, "times": m}}``: only its calls n+1 to n+m,
  every call from n+1 on when ``times`` is absent);
- ``flaky``: ``{command: {"every": n, "text": "error text"}}`` -- every n-th call of
  that command fails with that text (a server that answers, but not always);
- ``late``: command names whose invocation is carried out and then never answered,
  like a command queued to a SIGSTOPped server that runs it once it resumes;
- ``version``: what ``tmux -V`` prints (an old version also refuses ``-e``).

Pane pids are above the kernel's pid_max, so nothing can ever signal a real process
through the fake. Every invocation is appended to ``log``; pasted text and keys go to
``typed[session]``. Pasting into a dead pane empties the table and fails with "server
exited unexpectedly", as tmux 3.3a's server really crashes there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_ENV = "LOOP_TMUX_FAKE_STATE"
_FORMAT_KEYS = (
    "pane_in_mode",
    "pane_dead",
    "pane_pid",
    "pane_id",
    "pane_current_command",
    "session_name",
    "alternate_on",
    "window_active",
    "pane_active",
)


class TmuxExit(Exception):
    """A fake tmux command failed: ``message`` goes to stderr, the exit status is 1."""


def _pid_base() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1000
    except (OSError, ValueError):
        return 2**22 + 1000


def empty_state() -> dict[str, Any]:
    return {
        "sessions": {},
        "buffers": {},
        "typed": {},
        "log": [],
        "next_pane": 0,
        "next_pid": _pid_base(),
        "faults": {},
    }


class FakeState:
    """Read and edit a fake tmux's state file from tests (locked like the fake itself)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.exists():
            self.path.write_text(json.dumps(empty_state()))

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        """Yield the state under the lock and write it back afterwards."""
        with _locked(self.path) as state:
            yield state

    def read(self) -> dict[str, Any]:
        with _locked(self.path) as state:
            return state

    def add_session(
        self, name: str, *, dead: bool = False, command: str = "sleep", panes: int = 1
    ) -> None:
        with self.edit() as state:
            _create(state, name, [command], "/", {}, dead=dead, panes=panes)

    def set_dead(self, name: str, dead: bool = True) -> None:
        with self.edit() as state:
            for pane in state["sessions"][name]["panes"]:
                pane["dead"] = dead

    def set_screen(self, name: str, screen: str) -> None:
        """What `capture-pane -p` prints for the session's first pane."""
        with self.edit() as state:
            state["sessions"][name]["panes"][0]["screen"] = screen

    def set_fault(self, key: str, value: Any) -> None:
        with self.edit() as state:
            state["faults"][key] = value

    def clear_faults(self) -> None:
        with self.edit() as state:
            state["faults"] = {}

    def sessions(self) -> dict[str, Any]:
        sessions: dict[str, Any] = self.read()["sessions"]
        return sessions

    def log(self) -> list[list[str]]:
        log: list[list[str]] = self.read()["log"]
        return log

    def commands(self) -> list[str]:
        """The tmux command names invoked so far, in order, as the command lines held them
        (a command after a failed one in the same line is listed though tmux skipped it)."""
        return [c[0] for argv in self.log() for c in _split_commands(_strip_globals(argv)[1])]

    def typed(self, name: str) -> list[list[str]]:
        typed: list[list[str]] = self.read()["typed"].get(name, [])
        return typed


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    with open(str(path) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            text = path.read_text() if path.exists() else ""
            state = json.loads(text) if text.strip() else empty_state()
            for key, value in empty_state().items():
                state.setdefault(key, value)
            yield state
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(state, indent=1))
            tmp.replace(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def install_fake_tmux(
    directory: str | os.PathLike[str], state_path: str | os.PathLike[str]
) -> Path:
    """Write an executable ``tmux`` shim into ``directory`` answering from ``state_path``.

    Put ``directory`` first on PATH, or pass the returned path as ``Tmux(binary=...)``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    FakeState(state_path)
    shim = directory / "tmux"
    shim.write_text(
        "#!/bin/sh\n"
        f"{STATE_ENV}={shlex.quote(str(Path(state_path).resolve()))} "
        f'exec {shlex.quote(sys.executable)} -m loop_tmux.fake "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim


# -- argument handling, as tmux does it ----------------------------------------------


def _strip_globals(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        flag = argv[i]
        if flag in ("-L", "-S", "-f") and i + 1 < len(argv):
            flags[flag] = argv[i + 1]
            i += 2
        else:
            flags[flag] = ""
            i += 1
    return flags, argv[i:]


def _split_commands(args: list[str]) -> list[list[str]]:
    """tmux's splitter: an argument ending in ';' ends a command, '\\;' keeps a ';'."""
    commands: list[list[str]] = [[]]
    for arg in args:
        if arg.endswith(";"):
            body = arg[:-1]
            if body.endswith("\\"):
                commands[-1].append(body[:-1] + ";")
                continue
            if body:
                commands[-1].append(body)
            commands.append([])
        else:
            commands[-1].append(arg)
    return [c for c in commands if c]


def _parse_string(text: str) -> list[list[str]]:
    """A command string (as if-shell takes): shell-like words, ';' separates commands."""
    return _split_commands(shlex.split(text))


def _options(args: list[str], with_value: str) -> tuple[dict[str, list[str]], list[str]]:
    """getopt-style: flags in ``with_value`` take an argument; ``--`` ends options."""
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return opts, args[i + 1 :]
        if not arg.startswith("-") or arg == "-":
            break
        j = 1
        while j < len(arg):
            flag = arg[j]
            if flag in with_value:
                value = arg[j + 1 :] if j + 1 < len(arg) else None
                if value is None:
                    i += 1
                    if i >= len(args):
                        raise TmuxExit(f"command requires argument for -{flag}")
                    value = args[i]
                opts.setdefault(flag, []).append(value)
                break
            opts.setdefault(flag, []).append("")
            j += 1
        i += 1
    return opts, args[i:]


# -- the model ------------------------------------------------------------------------


def _create(
    state: dict[str, Any],
    name: str,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    *,
    dead: bool = False,
    panes: int = 1,
) -> dict[str, Any]:
    made = []
    for _ in range(panes):
        made.append(_new_pane(state, argv, dead))
    session = {"panes": made, "cwd": cwd, "env": env, "argv": argv, "remain_on_exit": True}
    state["sessions"][name] = session
    return session


def _new_pane(state: dict[str, Any], argv: list[str], dead: bool) -> dict[str, Any]:
    pane = {
        "id": f"%{state['next_pane']}",
        "pid": state["next_pid"],
        "dead": dead,
        "command": os.path.basename(argv[0]) if argv else "sh",
    }
    state["next_pane"] += 1
    state["next_pid"] += 1
    return pane


def _server_path(flags: dict[str, str]) -> str:
    if "-S" in flags:
        return flags["-S"]
    # Only the text tmux prints in its errors; the fake never touches this path.
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"  # noqa: S108
    return f"{base}/tmux-{os.getuid()}/{flags.get('-L', 'default')}"


class _Fake:
    def __init__(self, state: dict[str, Any], flags: dict[str, str], stdin: bytes) -> None:
        self.state = state
        self.flags = flags
        self.stdin = stdin
        self.out: list[str] = []
        self.late = False  # a "late" command ran: the caller never hears back

    @property
    def faults(self) -> dict[str, Any]:
        faults: dict[str, Any] = self.state["faults"]
        return faults

    def version(self) -> tuple[int, int]:
        text = self.faults.get("version", "tmux 3.3a")
        digits = text.split()[-1]
        major, _, rest = digits.partition(".")
        minor = "".join(ch for ch in rest if ch.isdigit()) or "0"
        return int(major), int(minor)

    def session(self, target: str) -> tuple[str, dict[str, Any]]:
        """Resolve a target to a session: '=name' exact; otherwise exact, then prefix."""
        sessions = self.state["sessions"]
        if not sessions:
            raise TmuxExit(f"no server running on {_server_path(self.flags)}")
        name = target.split(":", 1)[0] if ":" in target else target
        if name.startswith("="):
            name = name[1:]
            if name in sessions:
                return name, sessions[name]
        else:
            if name in sessions:
                return name, sessions[name]
            matches = [s for s in sessions if s.startswith(name)]
            if len(matches) == 1:
                return matches[0], sessions[matches[0]]
        raise TmuxExit(f"can't find session: {name}")

    def fmt(self, text: str, name: str, pane: dict[str, Any] | None) -> str:
        session = self.state["sessions"].get(name, {})
        for option, value in session.get("options", {}).items():
            text = text.replace("#{" + option + "}", value)
        text = re.sub(r"#\{@[A-Za-z0-9_-]+\}", "", text)  # unset user options are empty
        values = {"session_name": name}
        if pane is not None:
            values.update(
                pane_dead="1" if pane["dead"] else "0",
                pane_in_mode="1" if pane.get("in_mode") else "0",
                pane_pid=str(pane["pid"]),
                pane_id=pane["id"],
                pane_current_command=pane["command"],
                alternate_on="1" if pane.get("alternate") else "0",
                window_active="1",  # one window per session
                pane_active="1" if pane is session.get("panes", [None])[0] else "0",
            )
        for key in _FORMAT_KEYS:
            text = text.replace("#{" + key + "}", values.get(key, ""))
        return text

    def run(self, command: list[str]) -> None:
        verb, args = command[0], command[1:]
        hang = self.faults.get("hang", [])
        if "*" in hang or verb in hang:
            time.sleep(3600)
        calls = self.state.setdefault("calls", {})
        calls[verb] = calls.get(verb, 0) + 1
        failure = self.faults.get("fail", {}).get(verb)
        if isinstance(failure, dict):  # {"text", "after": n, "times": m}: calls n+1..n+m
            after = failure.get("after", 0)
            times = failure.get("times")
            failing = calls[verb] > after and (times is None or calls[verb] <= after + times)
            failure = failure["text"] if failing else None
        if failure:
            raise TmuxExit(failure)
        flaky = self.faults.get("flaky", {}).get(verb)
        if flaky and calls[verb] % max(1, int(flaky.get("every", 1))) == 0:
            raise TmuxExit(flaky.get("text", "server exited unexpectedly"))
        handler = getattr(self, "cmd_" + verb.replace("-", "_"), None)
        if handler is None:
            raise TmuxExit(f"unknown command: {verb}")
        handler(args)
        if verb in self.faults.get("late", []):
            self.late = True

    # commands -------------------------------------------------------------------------

    def cmd_has_session(self, args: list[str]) -> None:
        opts, _ = _options(args, "t")
        self.session(opts.get("t", [""])[-1])

    def cmd_list_panes(self, args: list[str]) -> None:
        opts, _ = _options(args, "tFf")
        form = opts.get("F", ["#{pane_id}"])[-1]
        if "a" in opts:
            if not self.state["sessions"]:
                raise TmuxExit(f"no server running on {_server_path(self.flags)}")
            chosen = list(self.state["sessions"].items())
        else:
            chosen = [self.session(opts.get("t", [""])[-1])]
        for name, session in chosen:
            for pane in session["panes"]:
                self.out.append(self.fmt(form, name, pane))

    def cmd_list_sessions(self, args: list[str]) -> None:
        if not self.state["sessions"]:
            raise TmuxExit(f"no server running on {_server_path(self.flags)}")
        for name in self.state["sessions"]:
            self.out.append(f"{name}: 1 windows")

    def cmd_new_session(self, args: list[str]) -> None:
        opts, argv = _options(args, "sscFxyent")
        name = opts.get("s", ["0"])[-1]
        if "e" in opts and self.version() < (3, 2):
            raise TmuxExit("usage: new-session [-AdDEPX] [-c start-directory] [-F format] ...")
        duplicate = self.faults.get("duplicate", {}).get(name)
        if name not in self.state["sessions"] and duplicate and duplicate.get("times", 1) > 0:
            duplicate["times"] = duplicate.get("times", 1) - 1
            occupant = duplicate.get("occupant")
            if occupant in ("live", "dead"):
                _create(self.state, name, ["racer"], "/", {}, dead=occupant == "dead")
            raise TmuxExit(f"duplicate session: {name}")
        if name in self.state["sessions"]:
            raise TmuxExit(f"duplicate session: {name}")
        env = dict(e.split("=", 1) for e in opts.get("e", []) if "=" in e)
        session = _create(self.state, name, argv or ["sh"], opts.get("c", ["/"])[-1], env)
        session["remain_on_exit"] = False
        if "P" in opts:
            self.out.append(
                self.fmt(opts.get("F", ["#{session_name}:"])[-1], name, session["panes"][0])
            )

    def cmd_set_option(self, args: list[str]) -> None:
        opts, rest = _options(args, "t")
        if "g" in opts and "t" not in opts:  # server-global: kept, never read back here
            if rest:
                self.state.setdefault("global_options", {})[rest[0]] = " ".join(rest[1:])
            return
        _name, session = self.session(opts.get("t", [""])[-1])
        if rest[:1] == ["remain-on-exit"]:
            session["remain_on_exit"] = rest[1:2] == ["on"]
        elif rest[:1] and rest[0].startswith("@") and len(rest) > 1:
            session.setdefault("options", {})[rest[0]] = rest[1]

    def cmd_show_options(self, args: list[str]) -> None:
        opts, rest = _options(args, "t")
        _name, session = self.session(opts.get("t", [""])[-1])
        value = session.get("options", {}).get(rest[0] if rest else "")
        if value is not None:
            self.out.append(value if "v" in opts else f"{rest[0]} {value}")

    def cmd_kill_session(self, args: list[str]) -> None:
        opts, _ = _options(args, "t")
        name, _session = self.session(opts.get("t", [""])[-1])
        noop = self.faults.get("kill_noop", [])
        if "*" in noop or name in noop:
            return
        del self.state["sessions"][name]

    def cmd_kill_server(self, args: list[str]) -> None:
        if not self.state["sessions"]:
            raise TmuxExit(f"no server running on {_server_path(self.flags)}")
        self.state["sessions"].clear()

    def cmd_respawn_pane(self, args: list[str]) -> None:
        opts, argv = _options(args, "tce")
        if "e" in opts and self.version() < (3, 0):
            raise TmuxExit("usage: respawn-pane [-k] [-c start-directory] [-t target-pane] ...")
        name, session = self.session(opts.get("t", [""])[-1])
        pane = session["panes"][0]
        if not pane["dead"] and "k" not in opts:
            raise TmuxExit(f"respawn pane failed: pane {name}:0.0 still active")
        new = _new_pane(self.state, argv or ["sh"], False)
        new["id"] = pane["id"]
        session["panes"][0] = new
        session["argv"] = argv
        session["cwd"] = opts.get("c", [session["cwd"]])[-1]
        session["env"] = {**session["env"], **dict(e.split("=", 1) for e in opts.get("e", []))}

    def cmd_load_buffer(self, args: list[str]) -> None:
        opts, rest = _options(args, "bt")
        if rest != ["-"]:
            raise TmuxExit("the fake only loads buffers from stdin")
        if not self.stdin:
            raise TmuxExit("no data")
        self.state["buffers"][opts.get("b", ["buffer0"])[-1]] = self.stdin.decode(
            "utf-8", errors="replace"
        )

    def cmd_copy_mode(self, args: list[str]) -> None:
        opts, _ = _options(args, "st")
        _name, session = self.session(opts.get("t", [""])[-1])
        session["panes"][0]["in_mode"] = "q" not in opts

    def cmd_capture_pane(self, args: list[str]) -> None:
        opts, _ = _options(args, "tSEb")
        _name, session = self.session(opts.get("t", [""])[-1])
        if "p" in opts:
            self.out.append(session["panes"][0].get("screen", "").rstrip("\n"))

    def cmd_set_buffer(self, args: list[str]) -> None:
        opts, rest = _options(args, "bn")
        if len(rest) != 1:
            raise TmuxExit("usage: set-buffer [-aw] [-b buffer-name] [-n new-buffer-name] data")
        self.state["buffers"][opts.get("b", ["buffer0"])[-1]] = rest[0]

    def cmd_delete_buffer(self, args: list[str]) -> None:
        opts, _ = _options(args, "b")
        buffer = opts.get("b", [""])[-1]
        if buffer not in self.state["buffers"]:
            raise TmuxExit(f"unknown buffer: {buffer}")
        del self.state["buffers"][buffer]

    def cmd_paste_buffer(self, args: list[str]) -> None:
        opts, _ = _options(args, "bst")
        name, session = self.session(opts.get("t", [""])[-1])
        buffer = opts.get("b", [""])[-1]
        if buffer not in self.state["buffers"]:
            raise TmuxExit(f"no buffer {buffer}")
        if session["panes"][0]["dead"]:
            # tmux 3.3a's server dies here (verified); model the crash.
            self.state["sessions"].clear()
            self.state["buffers"].clear()
            raise TmuxExit("server exited unexpectedly")
        text = self.state["buffers"][buffer]
        if "d" in opts:
            del self.state["buffers"][buffer]
        self.state["typed"].setdefault(name, []).append(
            ["paste-bracketed" if "p" in opts else "paste", text]
        )

    def cmd_send_keys(self, args: list[str]) -> None:
        opts, keys = _options(args, "tN")
        name, session = self.session(opts.get("t", [""])[-1])
        if "X" in opts:
            if not session["panes"][0].get("in_mode"):
                raise TmuxExit("not in a mode")
            if keys == ["cancel"]:
                session["panes"][0]["in_mode"] = False
            return
        self.state["typed"].setdefault(name, []).append(["keys", *keys])

    def cmd_display_message(self, args: list[str]) -> None:
        opts, rest = _options(args, "tFc")
        name, pane = "", None
        if "t" in opts:
            name, session = self.session(opts["t"][-1])
            pane = session["panes"][0]
        if "p" in opts:
            self.out.append(self.fmt(" ".join(rest), name, pane))

    def cmd_if_shell(self, args: list[str]) -> None:
        opts, rest = _options(args, "t")
        if "F" not in opts or len(rest) < 2:
            raise TmuxExit("the fake supports only if-shell -F")
        name, pane = "", None
        if "t" in opts:
            name, session = self.session(opts["t"][-1])
            pane = session["panes"][0]
        value = self.fmt(rest[0], name, pane)
        chosen = rest[1] if value not in ("", "0") else (rest[2] if len(rest) > 2 else "")
        for command in _parse_string(chosen):
            self.run(command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the fake: one tmux invocation against the state file."""
    args = list(sys.argv[1:] if argv is None else argv)
    state_path = os.environ.get(STATE_ENV)
    if not state_path:
        sys.stderr.write(f"fake tmux: {STATE_ENV} is not set\n")
        return 2
    flags, rest = _strip_globals(args)
    path = Path(state_path)
    if "-V" in flags:
        with _locked(path) as state:
            state["log"].append(args)
            version = state["faults"].get("version", "tmux 3.3a")
        sys.stdout.write(version + "\n")
        return 0
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    commands = _split_commands(rest)
    with _locked(path) as state:
        state["log"].append(args)
        hang = state["faults"].get("hang", [])
    if "*" in hang or any(c[0] in hang for c in commands):
        time.sleep(3600)  # a server that never answers; the client's timeout kills us
    with _locked(path) as state:
        fake = _Fake(state, flags, stdin)
        try:
            for command in commands:
                fake.run(command)
        except TmuxExit as exc:
            sys.stdout.write("".join(line + "\n" for line in fake.out))
            sys.stderr.write(f"{exc}\n")
            return 1
    if fake.late:
        time.sleep(3600)  # carried out, never answered; the client's timeout kills us
    sys.stdout.write("".join(line + "\n" for line in fake.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
