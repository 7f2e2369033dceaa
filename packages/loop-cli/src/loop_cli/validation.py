"""Every problem of a config at once, one line each, for a tree of msgspec Structs.

msgspec stops at the first problem and words it for programmers (`Expected int, got
float - at $.polling.maxRetries`). An operator fixing a file wants all of them, in the
order of the documented keys, each naming the camelCase key path and what is wrong,
never echoing a value that a rule refused (a token pasted where its variable NAME goes).
`check` walks the declared field types beside the data, with the same strictness as
msgspec's strict mode (no "8080" for a port, no 2.0 for a count, no `yes` for a float),
returns the data made ready for msgspec (paths expanded and anchored) and the problems.
msgspec then builds the typed, frozen config from the checked data: it stays the judge.

Rules beyond types ride in `Annotated[...]` as `Rule(fn)` (msgspec ignores them; each
Struct's `__post_init__` runs them too) and cross-key rules in `__post_init__`.
"""

import math
import operator
import os
from collections.abc import Callable
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec


class Rule:
    """A check on a value already of the right type: `fn` raises ValueError(message)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], object]) -> None:
        self.fn = fn


def run_rules(struct: msgspec.Struct) -> None:
    """Run the `Rule`s of a Struct's fields (for `__post_init__`: msgspec skips them)."""
    for field in msgspec.structs.fields(struct):
        for rule in _rules(field.type):
            value = getattr(struct, field.name)
            if value is not None:
                rule.fn(value)


def _rules(tp: Any) -> list[Rule]:
    found: list[Rule] = []
    if get_origin(tp) is Annotated:
        found += [m for m in get_args(tp)[1:] if isinstance(m, Rule)]
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, UnionType):
        for arg in get_args(tp):
            found += _rules(arg)
    return found


def _got(value: Any) -> str:
    return "" if isinstance(value, (dict, list)) else f" (got {value!r})"


def _plain(bound: float) -> str:
    """A bound as written in the docs: `0`, not `0.0`."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _join(loc: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{loc}[{key}]"
    return f"{loc}.{key}" if loc else key


def _one_of(values: tuple[Any, ...]) -> str:
    shown = [repr(v) for v in values]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


class Checker:
    """One walk over data and types; `problems` holds `(key path, message)` pairs."""

    def __init__(self, base: Path | None) -> None:
        self.base = base  # relative paths are relative to the config file's directory
        self.problems: list[tuple[str, str]] = []

    def fail(self, loc: str, message: str) -> None:
        self.problems.append((loc, message))

    def struct(self, cls: type[msgspec.Struct], data: Any, loc: str) -> Any:
        if not isinstance(data, dict):
            self.fail(loc, "must be a mapping of keys" + _got(data))
            return data
        fields = msgspec.structs.fields(cls)
        out: dict[str, Any] = {}
        before = len(self.problems)
        for field in fields:
            if field.encode_name in data:
                out[field.encode_name] = self.value(
                    field.type, data[field.encode_name], _join(loc, field.encode_name)
                )
        known = {f.encode_name for f in fields}
        for key in data:
            if key not in known:
                self.fail(_join(loc, str(key)), "unknown key" + did_you_mean(str(key), known))
        if len(self.problems) == before:
            try:  # cross-key rules live in __post_init__
                msgspec.convert(out, cls, strict=True)
            except msgspec.ValidationError as exc:
                self.fail(loc, str(exc).split(" - at `", 1)[0])
        return out

    def value(self, tp: Any, value: Any, loc: str) -> Any:
        meta: list[msgspec.Meta] = []
        rules: list[Rule] = []
        if get_origin(tp) is Annotated:
            tp, *extra = get_args(tp)
            meta = [m for m in extra if isinstance(m, msgspec.Meta)]
            rules = [m for m in extra if isinstance(m, Rule)]
        origin = get_origin(tp)
        if origin in (Union, UnionType):
            members = [a for a in get_args(tp) if a is not NoneType]
            if value is None and len(members) < len(get_args(tp)):
                return None
            (tp,) = members  # only `X | None` is used in the config
            return self.value(tp, value, loc)
        before = len(self.problems)
        value = self._typed(tp, origin, value, loc)
        if len(self.problems) > before:
            return value
        for m in meta:
            self._bounds(m, value, loc)
        if len(self.problems) > before:
            return value
        for rule in rules:
            try:
                rule.fn(value)
            except ValueError as exc:
                self.fail(loc, str(exc))  # rule messages never echo the value
                break
        return value

    def _typed(self, tp: Any, origin: Any, value: Any, loc: str) -> Any:
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            return self.struct(tp, value, loc)
        if origin is Literal:
            if value not in get_args(tp) or isinstance(value, bool):
                self.fail(loc, f"must be one of {_one_of(get_args(tp))}" + _got(value))
            return value
        if origin is list:
            if not isinstance(value, list):
                self.fail(loc, "must be a list" + _got(value))
                return value
            (item,) = get_args(tp)
            return [self.value(item, v, _join(loc, i)) for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, dict):
                self.fail(loc, "must be a mapping" + _got(value))
                return value
            _, item = get_args(tp)
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    self.fail(loc, f"key must be a string (got {k!r})")
                    continue
                out[k] = self.value(item, v, _join(loc, k))
            return out
        return self._scalar(tp, value, loc)

    def _scalar(self, tp: Any, value: Any, loc: str) -> Any:
        if tp is bool:
            if not isinstance(value, bool):
                self.fail(loc, "must be true or false" + _got(value))
            return value
        if tp is int:
            if not isinstance(value, int) or isinstance(value, bool):
                self.fail(loc, "must be a whole number" + _got(value))
            return value
        if tp is float:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                self.fail(loc, "must be a number" + _got(value))
            elif not math.isfinite(value):
                self.fail(loc, "must be a finite number" + _got(value))
            return value
        if tp is str:
            if not isinstance(value, str):
                self.fail(loc, "must be a string" + _got(value))
            return value
        if tp is Path:
            if not isinstance(value, str) or not value:
                self.fail(loc, "must be a path" + _got(value))
                return value
            path = Path(os.path.expanduser(value))
            return path if path.is_absolute() or self.base is None else self.base / path
        raise TypeError(f"config type {tp!r} at {loc} has no checker")  # a bug, not input

    def _bounds(self, meta: msgspec.Meta, value: Any, loc: str) -> None:
        for attr, words, ok in (
            ("gt", "greater than", operator.gt),
            ("ge", "at least", operator.ge),
            ("lt", "less than", operator.lt),
            ("le", "at most", operator.le),
        ):
            bound = getattr(meta, attr)
            if bound is not None and not ok(value, bound):
                self.fail(loc, f"must be {words} {_plain(bound)}" + _got(value))
                return


def check(cls: type[msgspec.Struct], data: Any, base: Path | None) -> tuple[Any, list[str]]:
    """The data ready for `msgspec.convert(..., cls, strict=True)` and its problems as
    `key.path: what is wrong` lines (a whole-file rule is its message alone)."""
    checker = Checker(base)
    ready = checker.struct(cls, data, "")
    return ready, [f"{loc}: {msg}" if loc else msg for loc, msg in checker.problems]


def describe(exc: msgspec.ValidationError) -> str:
    """msgspec's own message with its `$.a.b` path as `a.b` (a last resort: `check`
    finds every problem msgspec would)."""
    message, _, where = str(exc).partition(" - at `")
    loc = where.rstrip("`").removeprefix("$").lstrip(".")
    return f"{loc}: {message}" if loc else message


def did_you_mean(key: str, known: set[str]) -> str:
    """`; did you mean 'tmuxSocket'?` for a near miss (snake_case, a typo), else ''."""
    import difflib

    folded = {k.lower().replace("_", "").replace("-", ""): k for k in known}
    near = difflib.get_close_matches(
        key.lower().replace("_", "").replace("-", ""), list(folded), n=1, cutoff=0.75
    )
    return f"; did you mean '{folded[near[0]]}'?" if near else ""
