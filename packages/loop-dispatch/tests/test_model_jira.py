"""Jira refs (`jira:SITE/KEY-N`): strict parsing, canonical form, round trip, and a
slug that stays injective and tmux-safe beside GitHub's and the local tracker's."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_dispatch.model import RefError, WorkItemRef

TMUX_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("jira:acme.atlassian.net/ABC-1", "jira:acme.atlassian.net/ABC-1"),
        ("jira:Acme.Atlassian.NET/abc-12", "jira:acme.atlassian.net/ABC-12"),
        ("jira:jira.example.com/OPS_2-40", "jira:jira.example.com/OPS_2-40"),
        ("jira:localhost/A1-7", "jira:localhost/A1-7"),
    ],
)
def test_jira_refs_parse_to_one_canonical_spelling(text: str, canonical: str) -> None:
    ref = WorkItemRef.parse(text)
    assert str(ref) == canonical
    assert WorkItemRef.parse(str(ref)) == ref
    assert ref == WorkItemRef("jira", canonical[5:].rsplit("-", 1)[0], ref.number)


def test_jira_ref_parts() -> None:
    ref = WorkItemRef.parse("jira:acme.atlassian.net/ABC-12")
    assert (ref.jira_site, ref.jira_key, ref.number) == ("acme.atlassian.net", "ABC-12", 12)
    assert ref.slug() == "jira_acme_datlassian_dnet_ABC_12"
    assert ref.tmux_name() == "loop-jira_acme_datlassian_dnet_ABC_12"


@pytest.mark.parametrize(
    "text",
    [
        "jira:acme.atlassian.net/ABC",
        "jira:acme.atlassian.net/ABC-0",
        "jira:acme.atlassian.net/ABC-01",
        "jira:acme.atlassian.net/1BC-1",
        "jira:acme.atlassian.net/A-B-1",
        "jira:acme.atlassian.net/AB C-1",
        "jira:acme_x.atlassian.net/ABC-1",
        "jira:acme..net/ABC-1",
        "jira:-acme.net/ABC-1",
        "jira:acme.net:8080/ABC-1",
        "jira:/ABC-1",
        "jira:acme.net/-1",
        "jira:acme.net#ABC-1",
        "jira:acme.net/ABC-1\n",
        "jira:acme.net/ABC-2147483648",
        "jira:acme.net/../ABC-1",
    ],
)
def test_bad_jira_refs_are_refused(text: str) -> None:
    with pytest.raises(RefError):
        WorkItemRef.parse(text)


def test_constructor_validates_jira_too() -> None:
    with pytest.raises(RefError, match="project key"):
        WorkItemRef("jira", "acme.net/9X", 1)
    with pytest.raises(RefError, match="host name"):
        WorkItemRef("jira", "acme.net", 1)


def test_jira_slugs_are_injective_beside_the_other_sources() -> None:
    sites = ["a", "a.b", "a-b", "ab", "a.b.c", "d", "a.d", "ad", "jira", "gh"]
    keys = ["AB", "A_B", "A__B", "AD", "A_D", "A", "AB_", "A_1", "A1", "D"]
    numbers = [1, 11, 2]
    refs = [
        WorkItemRef("jira", f"{s}/{k}", n) for s, k, n in itertools.product(sites, keys, numbers)
    ]
    refs += [
        WorkItemRef("local", p, n) for p, n in itertools.product(["jira", "a_b", "a"], numbers)
    ]
    refs += [WorkItemRef("github", "jira/a", n) for n in numbers]
    slugs: dict[str, WorkItemRef] = {}
    for ref in refs:
        slug = ref.slug()
        assert TMUX_SAFE.match(slug), slug
        assert slug not in slugs, f"{ref} and {slugs[slug]} share slug {slug}"
        slugs[slug] = ref


_label = st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,4}[a-z0-9])?", fullmatch=True)
_site = st.lists(_label, min_size=1, max_size=3).map(".".join)
_key = st.from_regex(r"[A-Z][A-Z0-9_]{0,5}", fullmatch=True)
_ref = st.builds(
    lambda site, key, n: WorkItemRef("jira", f"{site}/{key}", n),
    _site,
    _key,
    st.integers(1, 2**31 - 1),
)


@settings(max_examples=300, deadline=None)
@given(_ref, _ref)
def test_jira_slug_and_text_are_injective(a: WorkItemRef, b: WorkItemRef) -> None:
    assert WorkItemRef.parse(str(a)) == a
    assert TMUX_SAFE.match(a.slug())
    if a != b:
        assert a.slug() != b.slug()
        assert str(a) != str(b)


@settings(max_examples=300, deadline=None)
@given(_ref)
def test_a_jira_slug_reads_back_to_its_ref(ref: WorkItemRef) -> None:
    from loop_dispatch.registry import slug_owner

    assert slug_owner(ref.slug()) == ref


def test_foreign_jira_like_slugs_are_not_owned() -> None:
    from loop_dispatch.registry import slug_owner

    for slug in ("jira_acme_1", "jira_acme_dnet_abc_1", "jira__ABC_1", "jira_a_b_ABC_1"):
        assert slug_owner(slug) is None, slug


def test_a_jira_project_finds_its_clone_by_site_and_key_or_key_alone(tmp_path) -> None:
    from loop_dispatch.workspace import Workspaces

    by_key, by_site = tmp_path / "k", tmp_path / "s"
    by_key.mkdir()
    by_site.mkdir()
    ws = Workspaces(tmp_path / "wt", {"ABC": by_key, "acme.atlassian.net/OPS": by_site})
    assert ws.clone_for(WorkItemRef.parse("jira:acme.atlassian.net/ABC-1")) == by_key
    assert ws.clone_for(WorkItemRef.parse("jira:Acme.atlassian.net/ops-2")) == by_site
    assert ws.path_for(WorkItemRef.parse("jira:acme.atlassian.net/ABC-1")).name == (
        "loop-jira_acme_datlassian_dnet_ABC_1"
    )
