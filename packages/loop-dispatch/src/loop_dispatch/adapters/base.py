"""What every harness adapter shares: the protocol, readiness and receipt values.

An adapter turns a conversation into argv (start, resume) and, for the harnesses it
knows, reads what only the harness can tell: whether its screen is ready for a paste
(`readiness`), and whether a pasted text reached its conversation (`receipt`), from the
files the harness itself writes. Capabilities an adapter lacks are declared, never
guessed at: `reads_screen = False`, `has_receipts = False`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from loop_tmux import PaneView

from ..errors import DispatchError
from .transcripts import TranscriptUnavailable, Turn

__all__ = [
    "BLOCKED",
    "NOT_READY",
    "READY",
    "HarnessAdapter",
    "Readiness",
    "Receipt",
    "ResumeUnsupported",
    "new_conversation_id",
]

READY = "ready"
NOT_READY = "not_ready"
BLOCKED = "blocked"


class ResumeUnsupported(DispatchError):
    """The adapter cannot resume a conversation (the dispatcher starts a fresh one)."""


def new_conversation_id() -> str:
    """A fresh conversation id (uuid4), assigned by us and recorded at spawn."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Readiness:
    """May a paste go in now? `dialog` names a recognised dialog when blocked."""

    state: str
    dialog: str | None = None
    detail: str = ""

    @property
    def ready(self) -> bool:
        return self.state == READY


@dataclass(frozen=True)
class Receipt:
    """Did a pasted text reach the conversation, by the harness's own files?

    `state`: "confirmed" (a user turn or a queued input holds it), "absent" (the
    conversation file was read whole and it is not there: proof it did not arrive), or
    "unknown" (no file or no conversation id: nothing can be proved either way).
    """

    state: str
    detail: str = ""


@runtime_checkable
class HarnessAdapter(Protocol):
    """Every capability the dispatcher uses, declared: an adapter without one says so
    through `VerifiedAdapter`'s defaults (`reads_screen = False`, `has_receipts = False`,
    `readiness` always ready, no receipts, nothing to discover), never by omission."""

    name: str
    reads_screen: bool  # readiness() reads the screen before a paste
    has_receipts: bool  # receipt() can prove a paste reached the conversation
    assigns_conversation_id: bool  # we pick the id (False: discover_conversation finds it)

    @property
    def can_resume(self) -> bool: ...

    def fresh_argv(self, prompt: str, conversation_id: str) -> list[str]: ...

    def resume_argv(self, prompt: str, conversation_id: str) -> list[str]: ...

    def launch_env(self) -> dict[str, str]: ...

    def prepare_workspace(self, folder: Path) -> None: ...

    def readiness(self, view: PaneView) -> Readiness: ...

    def activity(self, view: PaneView, conversation_id: str | None = None) -> str: ...

    def resumable(self, conversation_id: str) -> bool: ...

    def receipt_mark(self, conversation_id: str | None) -> int: ...

    def receipt(self, conversation_id: str | None, mark: int, text: str) -> Receipt: ...

    def discover_conversation(
        self,
        cwd: Path,
        started_at: float,
        exclude: set[str],
        pids: Sequence[int] = (),
        *,
        guess: bool = True,
    ) -> str | None: ...

    def transcript(self, conversation_id: str | None, turns: int) -> list[Turn]: ...


class VerifiedAdapter:
    """Defaults of the optional capabilities, for adapters that have none of them."""

    name = "harness"
    reads_screen = False
    has_receipts = False
    assigns_conversation_id = True
    tested_versions: Sequence[str] = ()

    def launch_env(self) -> dict[str, str]:
        """Environment the harness needs so it writes where the adapter reads."""
        return {}

    def prepare_workspace(self, folder: Path) -> None:
        """Seed what the harness needs in a new worktree (nothing, by default)."""

    def readiness(self, view: PaneView) -> Readiness:
        return Readiness(READY)

    def activity(self, view: PaneView, conversation_id: str | None = None) -> str:
        """ "busy" (mid-turn), "idle" (its turn ended, nothing after it), "blocked" (on a
        dialog), or "unknown" when the adapter cannot read it (the dispatcher then
        watches whether the screen changes). `conversation_id` lets an adapter read the
        harness's own files, the structural evidence, before the screen."""
        return "unknown"

    def resumable(self, conversation_id: str) -> bool:
        """Is there a saved conversation to resume? (unknown -> assume yes)"""
        return True

    def receipt_mark(self, conversation_id: str | None) -> int:
        """Where the conversation file ends now: a receipt looks only past it."""
        return 0

    def receipt(self, conversation_id: str | None, mark: int, text: str) -> Receipt:
        return Receipt("unknown", "this adapter has no receipts")

    def discover_conversation(
        self,
        cwd: Path,
        started_at: float,
        exclude: set[str],
        pids: Sequence[int] = (),
        *,
        guess: bool = True,
    ) -> str | None:
        """The id of the conversation a start in `cwd` at `started_at` began, for a
        harness that picks its own (`pids`: the pane's processes, when live); None while
        unknown. Ids in `exclude` are other items' and never returned. `guess=False`:
        only the pane's own processes may tell (no match by cwd and start time)."""
        return None

    def transcript(self, conversation_id: str | None, turns: int) -> list[Turn]:
        """The conversation's last `turns` user/assistant turns, from the harness's own
        file; raises TranscriptUnavailable saying why when there is none to read."""
        raise TranscriptUnavailable(
            f"the {self.name} adapter reads no conversation file of its harness, so it "
            "has no transcript; `the-loop sessions peek REF` shows the screen instead"
        )


class CliAdapter(VerifiedAdapter):
    """A coding-agent CLI: its program, extra arguments, and the folder it keeps its
    conversations in. `harness.stateDir` (here `state_dir`) reaches the CLI through the
    variable `state_env` (`launch_env`), so the CLI writes where the adapter reads.
    Unset, the CLI picks its folder from the environment it is launched with; the caller
    that composes that environment passes the folder it yields as `read_dir` (read
    only, never injected), else both use the CLI's default as seen from our own
    environment (the variable, else `~/<default_state>`). `checks=False` only builds
    argv, for stand-ins that draw no screen of the CLI and write none of its files."""

    default_binary = "harness"
    state_env = ""
    default_state = ".harness"
    # What the CLI shows on its screen while a turn runs (both Claude Code and Codex
    # offer to interrupt it): a close waits for it to go (issue 20).
    busy_markers: Sequence[str] = ("esc to interrupt",)

    def __init__(
        self,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        *,
        state_dir: str | os.PathLike[str] | None = None,
        read_dir: str | os.PathLike[str] | None = None,
        checks: bool = True,
    ) -> None:
        self.binary = self.default_binary if binary is None else binary
        self.extra_args = list(extra_args)
        self._state_dir = None if state_dir is None else Path(state_dir).expanduser()
        self._read_dir = None if read_dir is None else Path(read_dir).expanduser()
        self.reads_screen = checks
        self.has_receipts = checks
        self.checks = checks

    @classmethod
    def default_state_dir(cls) -> Path:
        """Where the CLI keeps its files when it is not told: its variable, else home."""
        configured = os.environ.get(cls.state_env)
        return Path(configured).expanduser() if configured else Path.home() / cls.default_state

    @property
    def state_dir(self) -> Path:
        """Where the CLI writes its files: configured, else derived, else its default."""
        return self._state_dir or self._read_dir or self.default_state_dir()

    def launch_env(self) -> dict[str, str]:
        if self._state_dir is None or not self.state_env:
            return {}
        return {self.state_env: str(self._state_dir)}

    def activity(self, view: PaneView, conversation_id: str | None = None) -> str:
        """From the CLI's own conversation file first (`turn_state`: its newest record
        that opens or ends a turn), then the screen, which may only add caution:
        "blocked" on a dialog it recognises (`readiness`), "busy" while the CLI offers
        to interrupt a turn whose first record is not written yet ("esc to
        interrupt"). Without either, "unknown": the caller then watches the screen, so
        a CLI version that words things otherwise is never cut mid-turn for want of
        it. A stand-in (`checks` off) draws none of the CLI's screens, writes none of
        its files."""
        if not self.checks:
            return "unknown"
        if self.readiness(view).state == BLOCKED:
            return "blocked"
        if screen_has(view.screen, *self.busy_markers):
            return "busy"
        return self.turn_state(conversation_id)

    def turn_state(self, conversation_id: str | None) -> str:
        """ "idle" / "busy" from the conversation file's tail; "unknown" without one."""
        return "unknown"


def screen_has(screen: str | None, *needles: str) -> bool:
    """Does the visible screen show any of the needles (case and spacing ignored)?"""
    if not screen:
        return False
    flat = " ".join(screen.split()).casefold()
    return any(" ".join(n.split()).casefold() in flat for n in needles)


def file_end(path: Path | None) -> int:
    try:
        return 0 if path is None else path.stat().st_size
    except OSError:
        return 0
