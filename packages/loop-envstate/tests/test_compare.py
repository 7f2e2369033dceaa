from __future__ import annotations

import pytest

from loop_envstate import compare, fingerprint
from loop_envstate.audit import DRIFT, MATCH, UNVERIFIED, Drift, check_pids

CASES = [
    ("identical", {"A": "1", "B": "2"}, {"A": "1", "B": "2"}, []),
    ("one-differs", {"A": "1", "B": "2"}, {"A": "1", "B": "x"}, ["B"]),
    ("missing-in-process-differs", {"A": "1", "B": "2"}, {"A": "1"}, ["B"]),
    ("undeclared-ignored", {"A": "1"}, {"A": "1", "EXTRA": "z", "PATH": "/bin"}, []),
    ("name-order", {"b": "1", "A": "1", "a": "1", "C": "1"}, {}, ["A", "C", "a", "b"]),
    ("empty-declared", {}, {"A": "1"}, []),
    ("empty-value-vs-unset", {"A": ""}, {}, ["A"]),
    ("empty-value-matches-empty", {"A": ""}, {"A": ""}, []),
    ("case-sensitive-names", {"a": "1"}, {"A": "1"}, ["a"]),
    ("unicode", {"U": "héllo ✓"}, {"U": "héllo ✓"}, []),
]


@pytest.mark.parametrize(
    ("declared", "actual", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_compare_table(
    declared: dict[str, str], actual: dict[str, str], expected: list[str]
) -> None:
    assert compare(declared, actual) == expected


def test_compare_is_pure() -> None:
    declared = {"B": "2", "A": "1"}
    actual = {"A": "other"}
    snapshot = (dict(declared), dict(actual))
    first = compare(declared, actual)
    assert compare(declared, actual) == first == ["A", "B"]
    assert (declared, actual) == snapshot


def test_check_pids_gives_match_drift_and_unverified_in_order() -> None:
    processes = {
        10: {"TOKEN": "new", "URL": "u"},
        11: {"TOKEN": "old", "PATH": "/bin"},
    }
    declared = {"TOKEN": "new", "URL": "u"}
    results = check_pids(declared, [11, 10, 12], reader=processes.get)
    assert [(r.pid, r.status) for r in results] == [(11, DRIFT), (10, MATCH), (12, UNVERIFIED)]
    assert results[0].drift == (
        Drift("TOKEN", fingerprint("new"), fingerprint("old")),
        Drift("URL", fingerprint("u"), None),
    )
    assert results[1].drift == ()
    assert results[2].drift == ()
