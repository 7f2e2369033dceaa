"""CHANGELOG.md as the release tooling reads and edits it.

One file, one `## <package>` section per package. Each section starts with a
`### Unreleased` heading whose bullets are the package's pending entries, followed by
`### <version> (<date>)` headings for released versions, newest first. Sections for
things that are not packages (`## repository`) are left alone. Edits are line-based so
entries written by hand keep their exact text.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.monorepo import ToolError

__all__ = [
    "UNRELEASED",
    "Section",
    "add_unreleased",
    "find_section",
    "release_section",
    "unreleased_entries",
]

UNRELEASED = "### Unreleased"


@dataclass(frozen=True)
class Section:
    """Line indexes of one package's section: heading, its Unreleased block, the end."""

    heading: int
    unreleased: int  # the `### Unreleased` line
    unreleased_end: int  # first line after the block (next heading or section end)
    end: int  # first line after the section


def find_section(lines: list[str], package: str) -> Section:
    """Where `## package` and its `### Unreleased` block are; a clear error if absent."""
    title = f"## {package}"
    starts = [i for i, line in enumerate(lines) if line.rstrip() == title]
    if len(starts) != 1:
        raise ToolError(f"CHANGELOG.md: expected one '{title}' section, found {len(starts)}")
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    subheads = [i for i in range(start + 1, end) if lines[i].startswith("### ")]
    if not subheads or lines[subheads[0]].rstrip().lower() != UNRELEASED.lower():
        raise ToolError(f"CHANGELOG.md: section '{title}' must start with a '{UNRELEASED}' heading")
    unreleased = subheads[0]
    block_end = subheads[1] if len(subheads) > 1 else end
    return Section(start, unreleased, block_end, end)


def unreleased_entries(text: str, package: str) -> list[str]:
    """The bullets (first line of each) under the package's `### Unreleased` heading."""
    lines = text.splitlines()
    section = find_section(lines, package)
    block = lines[section.unreleased + 1 : section.unreleased_end]
    return [line for line in block if line.startswith(("- ", "* "))]


def release_section(text: str, package: str, version: str, date: str) -> str:
    """Move the package's Unreleased entries under `### version (date)`; a fresh, empty
    Unreleased heading stays on top. Other sections are untouched."""
    lines = text.splitlines(keepends=True)
    section = find_section([line.rstrip("\n") for line in lines], package)
    for line in lines[section.heading : section.end]:
        if line.startswith(f"### {version} ") or line.rstrip() == f"### {version}":
            raise ToolError(f"CHANGELOG.md: '## {package}' already has a '### {version}' heading")
    newline = "\n"
    lines[section.unreleased : section.unreleased + 1] = [
        UNRELEASED + newline,
        newline,
        f"### {version} ({date}){newline}",
    ]
    return "".join(lines)


def add_unreleased(text: str, package: str, entry: str) -> str:
    """Append one bullet at the end of the package's Unreleased block."""
    lines = text.splitlines(keepends=True)
    section = find_section([line.rstrip("\n") for line in lines], package)
    at = section.unreleased_end
    while at > section.unreleased + 1 and not lines[at - 1].strip():
        at -= 1  # before the blank lines that separate the block from what follows
    insert = [f"- {entry}\n"]
    if at == section.unreleased + 1:
        insert.insert(0, "\n")  # an empty block: keep a blank line under the heading
    if at < len(lines) and lines[at].strip():
        insert.append("\n")
    lines[at:at] = insert
    return "".join(lines)
