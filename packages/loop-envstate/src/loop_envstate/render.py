"""Render audit results as text or JSON. Fingerprints only: no function here sees a value."""

from __future__ import annotations

from loop_envstate.audit import DRIFT, MATCH, UNVERIFIED
from loop_envstate.fingerprint import FINGERPRINT_LENGTH

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from loop_envstate.audit import PidResult

UNSET = "unset"


def fingerprints_data(
    file: str, fingerprints: Mapping[str, str], malformed: Sequence[int]
) -> dict[str, Any]:
    """The documented `fingerprint --json` shape."""
    return {
        "file": file,
        "fingerprintLength": FINGERPRINT_LENGTH,
        "fingerprints": {name: fingerprints[name] for name in sorted(fingerprints)},
        "malformed": list(malformed),
    }


def fingerprints_text(file: str, fingerprints: Mapping[str, str], malformed: Sequence[int]) -> str:
    names = sorted(fingerprints)
    width = max((len(name) for name in names), default=0)
    lines = [f"{name:<{width}}  {fingerprints[name]}" for name in names]
    if not names:
        lines.append(f"{file}: declares no names")
    if malformed:
        lines.append(f"malformed lines: {_numbers(malformed)}")
    return "\n".join(lines)


def check_data(
    file: str,
    malformed: Sequence[int],
    results: Sequence[PidResult],
    *,
    strict: bool,
    exit_code: int,
) -> dict[str, Any]:
    """The documented `check --json` shape."""
    return {
        "file": file,
        "fingerprintLength": FINGERPRINT_LENGTH,
        "malformed": list(malformed),
        "strict": strict,
        "results": [
            {
                "pid": result.pid,
                "status": result.status,
                "drift": [
                    {"name": d.name, "file": d.file, "process": d.process} for d in result.drift
                ],
            }
            for result in results
        ],
        "summary": summary(results),
        "exitCode": exit_code,
    }


def check_text(results: Sequence[PidResult]) -> str:
    lines: list[str] = []
    for result in results:
        if result.status == DRIFT:
            lines += [
                f"{result.pid}  drift  {d.name}  file={d.file}  process={d.process or UNSET}"
                for d in result.drift
            ]
        elif result.status == UNVERIFIED:
            lines.append(f"{result.pid}  unverified  (environment not readable)")
        else:
            lines.append(f"{result.pid}  {result.status}")
    counts = summary(results)
    lines.append(
        f"summary: {counts[MATCH]} match, {counts[DRIFT]} drift, {counts[UNVERIFIED]} unverified"
    )
    return "\n".join(lines)


def summary(results: Sequence[PidResult]) -> dict[str, int]:
    counts = {MATCH: 0, DRIFT: 0, UNVERIFIED: 0}
    for result in results:
        counts[result.status] += 1
    return counts


def malformed_warning(file: str, malformed: Sequence[int]) -> str:
    return f"loop-envstate: warning: {file}: malformed lines ignored: {_numbers(malformed)}"


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(str(n) for n in numbers)
