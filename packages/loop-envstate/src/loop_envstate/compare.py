"""Compare what a file declares with what a process holds."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs ~7 ms at start-up

if TYPE_CHECKING:
    from collections.abc import Mapping


def compare(declared: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    """Names whose values differ, in name order.

    A declared name the process lacks differs; names only the process holds are
    ignored, because the file is the authority on what it declares and nothing else.
    Values are compared whole (fingerprints are only how a difference is shown), so a
    truncated-hash collision can never hide a drift.
    """
    return sorted(
        name for name, value in declared.items() if name not in actual or actual[name] != value
    )
