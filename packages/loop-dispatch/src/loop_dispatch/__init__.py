"""loop_dispatch: tickets to tmux sessions, with nothing lost and no live agent destroyed.

It decides; loop-tmux acts. It knows neither GitHub's API nor YAML config: the caller
(loop-cli) hands it events, a harness adapter, a Tmux client and the running version.
The dispatcher and poll cycle import loop_tmux; the model, store and event log do not,
so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import DispatchError
from .model import Event, EventKind, RefError, WorkItemRef, comment_delivery_id
from .poll import CycleReport, PollBatch, Source

if TYPE_CHECKING:
    from .adapters import (
        ClaudeCodeAdapter,
        CodexAdapter,
        GenericAdapter,
        HarnessAdapter,
        ResumeUnsupported,
        new_conversation_id,
    )
    from .claude_trust import TrustError
    from .dispatcher import Dispatcher
    from .drain import Drain, DrainReport, GroundLost, RetryPolicy
    from .eventlog import EventLog
    from .framing import frame
    from .inbox import Inbox, InboxEntry
    from .launch import Launcher, LaunchSpec, default_launcher
    from .lock import LockTimeout, LockUnavailable, item_lock
    from .poll import run_poll_cycle
    from .reasons import Outcome, OutcomeKind, Reason
    from .registry import SessionRecord
    from .relaunch import Relaunch, Relauncher, RelaunchResult
    from .store import Store, StoreError
    from .workspace import WorkspaceError

__version__ = "0.1.0"

_LAZY = {
    "ClaudeCodeAdapter": "adapters",
    "CodexAdapter": "adapters",
    "GenericAdapter": "adapters",
    "HarnessAdapter": "adapters",
    "ResumeUnsupported": "adapters",
    "new_conversation_id": "adapters",
    "Dispatcher": "dispatcher",
    "Drain": "drain",
    "DrainReport": "drain",
    "GroundLost": "drain",
    "RetryPolicy": "drain",
    "Inbox": "inbox",
    "InboxEntry": "inbox",
    "Outcome": "reasons",
    "Reason": "reasons",
    "OutcomeKind": "reasons",
    "EventLog": "eventlog",
    "frame": "framing",
    "LaunchSpec": "launch",
    "Launcher": "launch",
    "default_launcher": "launch",
    "item_lock": "lock",
    "LockTimeout": "lock",
    "LockUnavailable": "lock",
    "run_poll_cycle": "poll",
    "SessionRecord": "registry",
    "Relaunch": "relaunch",
    "RelaunchResult": "relaunch",
    "Relauncher": "relaunch",
    "Store": "store",
    "StoreError": "store",
    "TrustError": "claude_trust",
    "WorkspaceError": "workspace",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'loop_dispatch' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "ClaudeCodeAdapter",
    "CodexAdapter",
    "CycleReport",
    "DispatchError",
    "Dispatcher",
    "Drain",
    "DrainReport",
    "Event",
    "EventKind",
    "EventLog",
    "GenericAdapter",
    "GroundLost",
    "HarnessAdapter",
    "Inbox",
    "InboxEntry",
    "LaunchSpec",
    "Launcher",
    "LockTimeout",
    "LockUnavailable",
    "Outcome",
    "OutcomeKind",
    "PollBatch",
    "Reason",
    "RefError",
    "Relaunch",
    "RelaunchResult",
    "Relauncher",
    "ResumeUnsupported",
    "RetryPolicy",
    "SessionRecord",
    "Source",
    "Store",
    "StoreError",
    "TrustError",
    "WorkItemRef",
    "WorkspaceError",
    "__version__",
    "comment_delivery_id",
    "default_launcher",
    "frame",
    "item_lock",
    "new_conversation_id",
    "run_poll_cycle",
]
