"""Check running processes against what an env file declares: one result per pid."""

from __future__ import annotations

from loop_envstate.compare import compare
from loop_envstate.fingerprint import fingerprint
from loop_envstate.procenv import process_environ

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from loop_envstate.procenv import EnvironReader

MATCH = "match"
DRIFT = "drift"
UNVERIFIED = "unverified"


class Drift:
    """One differing name: the file's fingerprint and the process's (None: unset)."""

    __slots__ = ("file", "name", "process")

    def __init__(self, name: str, file: str, process: str | None) -> None:
        self.name = name
        self.file = file
        self.process = process

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Drift):
            return NotImplemented
        return (self.name, self.file, self.process) == (other.name, other.file, other.process)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Drift({self.name!r}, file={self.file!r}, process={self.process!r})"


class PidResult:
    """A pid's verdict: match, drift (with the differing names) or unverified."""

    __slots__ = ("drift", "pid", "status")

    def __init__(self, pid: int, status: str, drift: tuple[Drift, ...] = ()) -> None:
        self.pid = pid
        self.status = status
        self.drift = drift

    def __repr__(self) -> str:
        return f"PidResult({self.pid}, {self.status!r}, drift={list(self.drift)!r})"


def check_pid(
    declared: Mapping[str, str], pid: int, *, reader: EnvironReader | None = None
) -> PidResult:
    """Compare one process's environment with the declared values."""
    actual = process_environ(pid, reader=reader)
    if actual is None:
        return PidResult(pid, UNVERIFIED)
    names = compare(declared, actual)
    if not names:
        return PidResult(pid, MATCH)
    drift = tuple(
        Drift(name, fingerprint(declared[name]), _fingerprint_or_none(actual.get(name)))
        for name in names
    )
    return PidResult(pid, DRIFT, drift)


def check_pids(
    declared: Mapping[str, str], pids: Iterable[int], *, reader: EnvironReader | None = None
) -> list[PidResult]:
    """check_pid for each pid, in the order given."""
    return [check_pid(declared, pid, reader=reader) for pid in pids]


def _fingerprint_or_none(value: str | None) -> str | None:
    return None if value is None else fingerprint(value)
