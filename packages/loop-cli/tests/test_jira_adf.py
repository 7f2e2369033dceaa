"""ADF to plain text over the shapes Jira Cloud's REST API v3 really returns (the
examples follow Atlassian's ADF structure reference: doc > blocks > inline nodes)."""

from __future__ import annotations

from typing import Any

from loop_cli.jira.adf import MAX_DEPTH, to_text


def doc(*content: Any) -> dict[str, Any]:
    return {"version": 1, "type": "doc", "content": list(content)}


def para(*content: Any) -> dict[str, Any]:
    return {"type": "paragraph", "content": list(content)}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def test_paragraphs_are_separated_by_a_blank_line_and_hard_breaks_kept() -> None:
    body = doc(
        para(text("First line"), {"type": "hardBreak"}, text("second line")),
        para(text("Bold", marks=[{"type": "strong"}]), text(" and plain.")),
    )
    assert to_text(body) == "First line\nsecond line\n\nBold and plain."


def test_code_block_is_fenced_with_its_language() -> None:
    body = doc(
        para(text("Run:")),
        {
            "type": "codeBlock",
            "attrs": {"language": "python"},
            "content": [text("def f():\n    return 1")],
        },
    )
    assert to_text(body) == "Run:\n\n```python\ndef f():\n    return 1\n```"


def test_inline_code_keeps_its_text() -> None:
    body = doc(para(text("call "), text("make test", marks=[{"type": "code"}]), text(" now")))
    assert to_text(body) == "call make test now"


def test_mentions_show_the_name_and_never_lose_the_account() -> None:
    body = doc(
        para(
            {"type": "mention", "attrs": {"id": "5b10ac8d82e05b22cc7d4ef5", "text": "@Ana"}},
            text(" please look; also "),
            {"type": "mention", "attrs": {"id": "712020:abc", "text": ""}},
        )
    )
    assert to_text(body) == "@Ana please look; also @712020:abc"


def test_bullet_ordered_and_nested_lists() -> None:
    item = lambda *c: {"type": "listItem", "content": list(c)}  # noqa: E731
    body = doc(
        {
            "type": "bulletList",
            "content": [
                item(para(text("one"))),
                item(
                    para(text("two")),
                    {
                        "type": "orderedList",
                        "attrs": {"order": 3},
                        "content": [item(para(text("a"))), item(para(text("b")))],
                    },
                ),
            ],
        }
    )
    assert to_text(body) == "- one\n- two\n  3. a\n  4. b"


def test_links_show_their_target() -> None:
    body = doc(
        para(
            text("the spec", marks=[{"type": "link", "attrs": {"href": "https://x.test/s"}}]),
            text(" and "),
            text("https://y.test", marks=[{"type": "link", "attrs": {"href": "https://y.test"}}]),
            text(" and "),
            {"type": "inlineCard", "attrs": {"url": "https://z.test/card"}},
        )
    )
    assert to_text(body) == "the spec (https://x.test/s) and https://y.test and https://z.test/card"


def test_emoji_are_their_character_else_their_short_name() -> None:
    body = doc(
        para(
            text("done "),
            {"type": "emoji", "attrs": {"shortName": ":grinning:", "id": "1f600", "text": "😀"}},
            text(" "),
            {"type": "emoji", "attrs": {"shortName": ":custom-party:", "id": "abc"}},
        )
    )
    assert to_text(body) == "done 😀 :custom-party:"


def test_headings_quotes_rules_tables_tasks_and_status() -> None:
    body = doc(
        {"type": "heading", "attrs": {"level": 2}, "content": [text("Plan")]},
        {"type": "blockquote", "content": [para(text("quoted"))]},
        {"type": "rule"},
        {
            "type": "table",
            "content": [
                {
                    "type": "tableRow",
                    "content": [
                        {"type": "tableHeader", "content": [para(text("k"))]},
                        {"type": "tableHeader", "content": [para(text("v"))]},
                    ],
                }
            ],
        },
        {
            "type": "taskList",
            "attrs": {"localId": "t"},
            "content": [
                {"type": "taskItem", "attrs": {"state": "DONE"}, "content": [text("ship")]},
                {"type": "taskItem", "attrs": {"state": "TODO"}, "content": [text("test")]},
            ],
        },
        para({"type": "status", "attrs": {"text": "IN REVIEW", "color": "blue"}}),
        para({"type": "date", "attrs": {"timestamp": "1767225600000"}}),
    )
    assert to_text(body) == (
        "Plan\n\n> quoted\n\n---\n\n| k | v |\n\n[x] ship\n[ ] test\n\n[IN REVIEW]\n\n2026-01-01"
    )


def test_unknown_nodes_keep_their_text_and_junk_is_ignored() -> None:
    body = doc(
        {"type": "someFutureBlock", "content": [para(text("kept"))]},
        "not a node",
        {"type": "paragraph", "content": "not a list"},
        {
            "type": "mediaSingle",
            "content": [{"type": "media", "attrs": {"id": "f1", "alt": "log.txt"}}],
        },
    )
    assert to_text(body) == "kept\n\n[attachment: log.txt]"


def test_wiki_markup_from_data_center_is_kept_and_none_is_empty() -> None:
    assert to_text("h1. Title\n*bold*") == "h1. Title\n*bold*"
    assert to_text(None) == ""


def test_a_deep_hostile_tree_is_cut_not_a_crash() -> None:
    node: dict[str, Any] = text("bottom")
    for _ in range(5000):
        node = {"type": "blockquote", "content": [node]}
    assert "bottom" not in to_text(doc(node))
    shallow: dict[str, Any] = para(text("kept"))
    for _ in range(MAX_DEPTH // 4):
        shallow = {"type": "panel", "content": [shallow]}
    assert to_text(doc(shallow)) == "kept"
