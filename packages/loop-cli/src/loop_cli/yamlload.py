"""YAML for config files: safe, and a key given twice is an error, not a silent overwrite.

PyYAML keeps the last of two equal keys, so a section written twice would drop the first
one's keys without a word; the config promises a typo never falls back silently.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "load_yaml"]


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping gives the same key twice; names both lines."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it itself
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise DuplicateKeyError(
                    problem=f"key {str(key)[:80]!r} given twice (lines {first} and {line})",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse one YAML document safely; a duplicate key raises DuplicateKeyError."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
