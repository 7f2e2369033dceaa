"""Performs a control word's own change (issue 24) for the executor: the hold set or
lifted (held events released in arrival order), the harness ended for `stop` and
`restart`, the state read for `status`. The decision table decides; this only acts.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

from loop_tmux import Presence

from .control import Hold, Verb
from .decision import Facts

# The executor's dispatcher (executor.Host) and its Attempt: typed loosely here, as the
# executor imports this module (no import circle).
Host = Any
Attempt = Any

__all__ = ["CONTROL_PROMPT", "Controller", "effect_text", "refusal_text"]

# The prompt a `start` or `restart` hands the harness in place of the control word
# (which is never pasted): the operator's words, no text of the comment.
CONTROL_PROMPT = (
    "The operator {verb}ed this session from the ticket. Carry on with the work item; "
    "new comments will follow as usual."
)

_REFUSALS = {
    "not_authorized": (
        "{actor} is not an authorized actor",
        "an authorized actor (github.authorizedActors) can write it",
    ),
    "ambiguous": (
        "the comment names more than one verb",
        "write one `the-loop VERB` per comment",
    ),
    "unknown_verb": (
        "`{word}` is not a control word",
        "use pause, resume, stop, start, restart or status",
    ),
    "nothing_to_resume": (
        "the session is neither paused nor stopped",
        "`the-loop pause` or `the-loop stop` first",
    ),
    "nothing_to_restart": (
        "the item has no running session",
        "`the-loop start` starts one",
    ),
    "item_closed": (
        "the item is closed",
        "reopen it first",
    ),
    "not_resumable": (
        "this harness cannot resume its conversation",
        "`the-loop stop` then `the-loop start` begins a new one",
    ),
}


def refusal_text(reason: str, actor: str, word: str) -> str:
    """One short line for the ticket: the reason and the remedy."""
    why, remedy = _REFUSALS.get(reason, (reason, "see `the-loop events --type control`"))
    safe_actor = " ".join(actor.split())[:100]
    return f"Refused: {why.format(actor=safe_actor, word=word)}. Remedy: {remedy}."


def effect_text(verb: Verb, f: Facts, status: str = "") -> str:
    """What a command did, one line (`control.command`'s `effect`, the local reply)."""
    if verb is Verb.PAUSE:
        return "paused: new events wait in the inbox until `the-loop resume`"
    if verb is Verb.STOP:
        return "stopped: the harness was ended; new events wait until `the-loop start`"
    if verb is Verb.RESTART:
        return "restarted in place; the conversation was resumed"
    if verb is Verb.STATUS:
        return status
    released = f"; {f.released} held event(s) released in arrival order" if f.released else ""
    if verb is Verb.RESUME and f.hold is Hold.PAUSED:
        return "resumed" + released
    return "started" + released


class Controller:
    """The control words' changes, for one dispatcher."""

    def __init__(self, dispatcher: Host) -> None:
        self.d = dispatcher

    def apply(self, verb: Verb, f: Facts, a: Attempt) -> Facts:
        ref = a.event.work_item
        controls = self.d.store.controls
        f = replace(f, applied=True)
        if verb is Verb.PAUSE:
            controls.set(ref, Hold.PAUSED, a.event.actor)
        elif verb is Verb.STOP:
            controls.set(ref, Hold.STOPPED, a.event.actor)
            if f.active:
                self._end(a)
        elif verb in (Verb.RESUME, Verb.START):
            controls.clear(ref)
            f = replace(f, released=self.d.store.inbox.release_held(str(ref)))
        elif verb is Verb.RESTART:
            self.d.tmux.terminate(a.name, grace=self.d.terminate_grace)
            a.previous_presence = Presence.DEAD
            f = replace(f, missing_then=Presence.DEAD)
        elif verb is Verb.STATUS:
            a.error = self.status(f, a)
        return f

    def _end(self, a: Attempt) -> None:
        """`stop`: the harness ends at once (the pane and its scrollback stay) and the
        record closes, as `sessions stop` does; `start` resumes the conversation."""
        if not self.d.kill_harness_on_close:
            self.d.tmux.terminate(a.name, grace=self.d.terminate_grace)
        outcome = self.d.closer.close(a.event.work_item, None)
        if outcome.kind.value == "failed":
            a.error = outcome.detail or outcome.reason

    def status(self, f: Facts, a: Attempt) -> str:
        """live/dead/paused/stopped, the host, the last delivery (one line)."""
        ref = a.event.work_item
        presence = self.d.tmux.probe(a.name) if f.active else Presence.ABSENT
        if f.hold is not None:
            state = f.hold.value
        elif not f.active:
            state = "not started" if a.previous is None else "closed"
        else:
            state = {Presence.LIVE: "live", Presence.UNKNOWN: "unknown"}.get(presence, "dead")
        rows = self.d.store.query(
            "SELECT max(settled_at) FROM inbox WHERE work_item = ? AND state = 'done' "
            "AND outcome = 'processed' AND last_reason != 'control_executed'",
            (str(ref),),
        )
        last = rows[0][0] if rows and rows[0][0] else "none"
        held = self.d.store.inbox.count(("paused",), work_item=str(ref))
        env = ""
        if self.d.env_state is not None and f.active:
            env = f"; environment {self.d.env_state(a.name)}"
        return (
            f"status: {state}; host {socket.gethostname()}; tmux session {a.name}; "
            f"last delivery {last}; {held} event(s) held{env}"
        )
