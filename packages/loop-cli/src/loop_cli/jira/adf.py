"""Atlassian Document Format (ADF) to plain text, for framing a Jira comment.

Jira Cloud's REST API v3 returns descriptions and comment bodies as ADF, a JSON tree of
typed nodes; an agent reads text. Block nodes become lines (paragraphs separated by a
blank line, list items as `- ` / `1. ` with nesting indented, code blocks fenced),
inline nodes their visible text (a mention its `@Name`, an emoji its character or
`:shortname:`, a link `text (url)`). Unknown nodes keep their text content, so nothing
a person wrote is dropped. Data Center's v2 sends wiki markup, a plain string: kept
as it is. Pure: no I/O; depth is bounded so a hostile tree cannot exhaust the stack.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

__all__ = ["MAX_DEPTH", "to_text"]

MAX_DEPTH = 64
_BLOCKS_JOINED_BY_BLANK = {"doc", "blockquote", "panel", "expand", "nestedExpand", "layoutColumn"}


def to_text(value: Any) -> str:
    """The plain text of an ADF document (or a wiki-markup string, unchanged)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return _block(value, 0).strip("\n")


def _children(node: dict[str, Any]) -> list[Any]:
    content = node.get("content")
    return [c for c in content if isinstance(c, dict)] if isinstance(content, list) else []


def _attrs(node: dict[str, Any]) -> dict[str, Any]:
    attrs = node.get("attrs")
    return attrs if isinstance(attrs, dict) else {}


def _block(node: Any, depth: int) -> str:
    """A node as lines of text (a block), without trailing blank lines."""
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return ""
    kind = node.get("type")
    if kind in ("paragraph", "heading"):
        return _inline_all(_children(node), depth)
    if kind == "codeBlock":
        code = "".join(_inline(c, depth) for c in _children(node))
        language = _attrs(node).get("language")
        tag = language if isinstance(language, str) and language.isidentifier() else ""
        return f"```{tag}\n{code}\n```"
    if kind in ("bulletList", "orderedList", "taskList", "decisionList"):
        return _list(node, depth)
    if kind == "rule":
        return "---"
    if kind == "blockquote":
        inner = _blocks(_children(node), depth)
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))
    if kind in ("expand", "nestedExpand"):
        title = _attrs(node).get("title")
        inner = _blocks(_children(node), depth)
        return f"{title}\n{inner}" if isinstance(title, str) and title else inner
    if kind == "table":
        return "\n".join(_block(row, depth + 1) for row in _children(node))
    if kind == "tableRow":
        cells = [" ".join(_block(c, depth + 1).split("\n")) for c in _children(node)]
        return "| " + " | ".join(cells) + " |"
    if kind in ("mediaSingle", "mediaGroup", "media"):
        return _media(node, depth)
    if kind in _BLOCKS_JOINED_BY_BLANK or kind in ("tableCell", "tableHeader", "listItem"):
        return _blocks(_children(node), depth)
    if kind == "blockCard" or kind == "embedCard":
        url = _attrs(node).get("url")
        return url if isinstance(url, str) else ""
    # An inline node where a block was expected, or an unknown block: its text.
    if _children(node):
        return _blocks(_children(node), depth)
    return _inline(node, depth)


def _blocks(nodes: list[Any], depth: int) -> str:
    parts = [_block(n, depth + 1) for n in nodes]
    return "\n\n".join(p for p in parts if p)


def _inline_all(nodes: list[Any], depth: int) -> str:
    return "".join(_inline(n, depth + 1) for n in nodes)


def _list(node: dict[str, Any], depth: int) -> str:
    kind = node.get("type")
    start = _attrs(node).get("order", 1)
    number = start if isinstance(start, int) and not isinstance(start, bool) else 1
    lines: list[str] = []
    for item in _children(node):
        if kind == "orderedList":
            bullet = f"{number}. "
            number += 1
        elif kind == "taskList":
            bullet = "[x] " if _attrs(item).get("state") == "DONE" else "[ ] "
        else:
            bullet = "- "
        if item.get("type") in ("taskItem", "decisionItem"):
            text = _inline_all(_children(item), depth + 1)
        else:
            text = _item_text(item, depth + 1)
        pad = " " * len(bullet)
        first, *rest = text.split("\n") if text else [""]
        lines.append(bullet + first)
        lines.extend(pad + line if line else "" for line in rest)
    return "\n".join(lines)


def _item_text(item: dict[str, Any], depth: int) -> str:
    """A list item's blocks: nested lists follow their paragraph without a blank line."""
    parts = [_block(c, depth + 1) for c in _children(item)]
    return "\n".join(p for p in parts if p)


def _media(node: dict[str, Any], depth: int) -> str:
    if node.get("type") == "media":
        name = _attrs(node).get("alt") or _attrs(node).get("id") or "file"
        return f"[attachment: {name}]"
    return "\n".join(_media(c, depth + 1) for c in _children(node) if depth < MAX_DEPTH)


def _inline(node: Any, depth: int) -> str:
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return ""
    kind = node.get("type")
    attrs = _attrs(node)
    if kind == "text":
        text = node.get("text")
        text = text if isinstance(text, str) else ""
        return _with_link(text, node.get("marks"))
    if kind == "hardBreak":
        return "\n"
    if kind == "mention":
        shown = attrs.get("text")
        if isinstance(shown, str) and shown:
            return shown if shown.startswith("@") else "@" + shown
        return f"@{attrs.get('id', 'someone')}"
    if kind == "emoji":
        for key in ("text", "shortName"):
            if isinstance(attrs.get(key), str) and attrs[key]:
                return str(attrs[key])
        return ""
    if kind in ("inlineCard", "blockCard"):
        url = attrs.get("url")
        return url if isinstance(url, str) else ""
    if kind == "status":
        text = attrs.get("text")
        return f"[{text}]" if isinstance(text, str) else ""
    if kind == "date":
        return _date(attrs.get("timestamp"))
    if kind == "placeholder":
        return ""
    # An unknown inline node, or a block inside inline content: its text content.
    return "".join(_inline(c, depth + 1) for c in _children(node))


def _with_link(text: str, marks: Any) -> str:
    if not isinstance(marks, list):
        return text
    for mark in marks:
        if isinstance(mark, dict) and mark.get("type") == "link":
            href = _attrs(mark).get("href")
            if isinstance(href, str) and href and href != text:
                return f"{text} ({href})"
    return text


def _date(stamp: Any) -> str:
    """ADF dates are milliseconds since the epoch, as a string."""
    try:
        moment = datetime.fromtimestamp(int(str(stamp)) / 1000, tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return ""
    return moment.strftime("%Y-%m-%d")
