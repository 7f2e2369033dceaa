"""Work item refs: strict parsing, exact round trip, injective tmux-safe slugs."""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta, timezone

import pytest

from loop_dispatch.model import Event, EventKind, RefError, WorkItemRef, comment_delivery_id

TMUX_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


@pytest.mark.parametrize(
    "text",
    [
        "github:acme/widgets#1",
        "github:a-b/c#12",
        "github:A1/x.y_z-w#999999",
        "github:the-loop/the-loop.github.io#3",
        "local:demo#1",
        "local:my_project.v2#40",
    ],
)
def test_parse_round_trips(text: str) -> None:
    ref = WorkItemRef.parse(text)
    # GitHub's OWNER/REPO is canonical lower case (issue 10); local names keep theirs.
    assert str(ref) == (text.lower() if text.startswith("github:") else text)
    assert WorkItemRef.parse(str(ref)) == ref


@pytest.mark.parametrize(
    "text",
    [
        "",
        "github:acme/widgets",
        "github:acme/widgets#0",
        "github:acme/widgets#-1",
        "github:acme/widgets#01",
        "github:acme/widgets#1.5",
        "github:acme#1",
        "github:-acme/widgets#1",
        "github:acme-/widgets#1",
        "github:ac_me/widgets#1",
        "github:acme/wid gets#1",
        "github:acme/..#1",
        "github:acme/a/b#1",
        "gitlab:acme/widgets#1",
        "local:#1",
        "local:a/b#1",
        "local:demo#x",
        "github:acme/widgets#1\n",
        "local:dem$o#1",
        "github:" + "a" * 40 + "/r#1",
    ],
)
def test_parse_rejects_with_a_clear_error(text: str) -> None:
    with pytest.raises(RefError) as err:
        WorkItemRef.parse(text)
    message = str(err.value)
    assert "invalid work item ref" in message
    assert "\n" not in message


def test_ref_error_is_a_value_error() -> None:
    assert issubclass(RefError, ValueError)


def test_constructor_validates_too() -> None:
    with pytest.raises(RefError):
        WorkItemRef("github", "no-slash", 1)
    with pytest.raises(RefError):
        WorkItemRef("local", "ok", 0)


def test_slug_distinguishes_hyphen_placement() -> None:
    a = WorkItemRef.parse("github:a-b/c#1")
    b = WorkItemRef.parse("github:a/b-c#1")
    assert a.slug() != b.slug()
    assert a.tmux_name() != b.tmux_name()


def test_slug_is_injective_and_tmux_safe_over_tricky_names() -> None:
    owners = ["a", "a-b", "ab", "b", "a-b-c", "gh"]
    repos = ["c", "b-c", "b_c", "b.c", "b__c", "b_dc", "_d", ".", "-", "c_", "c.", "x_1"]
    numbers = [1, 11, 2]
    refs = [
        WorkItemRef("github", f"{o}/{r}", n)
        for o, r, n in itertools.product(owners, repos, numbers)
        if r not in {".", ".."}
    ]
    refs += [
        WorkItemRef("local", p, n)
        for p, n in itertools.product(["gh", "a_b", "a.b", "a-b", "gh_a", "b_c_1"], numbers)
    ]
    slugs = {}
    for ref in refs:
        slug = ref.slug()
        assert TMUX_SAFE.match(slug), slug
        assert ref.tmux_name() == "loop-" + slug
        assert slug not in slugs, f"{ref} and {slugs[slug]} share slug {slug}"
        slugs[slug] = ref


def test_slug_is_readable() -> None:
    assert WorkItemRef.parse("github:acme/widgets#7").slug() == "gh_acme_widgets_7"
    assert WorkItemRef.parse("local:demo#3").tmux_name() == "loop-local_demo_3"


def test_event_requires_an_aware_time() -> None:
    ref = WorkItemRef.parse("local:demo#1")
    with pytest.raises(ValueError, match="timezone-aware"):
        Event("d", ref, EventKind.COMMENT, "a", "b", "", datetime(2026, 1, 1))


def test_event_round_trips_through_dict() -> None:
    ref = WorkItemRef.parse("github:acme/widgets#7")
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    event = Event("comment:github:9", ref, EventKind.COMMENT, "alice", "hi", "u", created, "9")
    assert Event.from_dict(event.to_dict()) == event
    with pytest.raises(ValueError):
        Event.from_dict({"deliveryId": "x"})


def test_comment_delivery_id_is_the_comment_identity() -> None:
    assert comment_delivery_id("github", "123") == "comment:github:123"
    assert comment_delivery_id("github", "123") != comment_delivery_id("local", "123")
