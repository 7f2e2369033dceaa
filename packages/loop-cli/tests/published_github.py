"""GitHub's published API descriptions, for checking what the-loop sends in tests.

`tests/github_schema/package.json` pins `@octokit/graphql-schema` (the GraphQL schema)
and `@octokit/openapi` (the REST OpenAPI description); `npm ci` installs them there on
first use. Where npm is missing the tests that need them skip, saying so, except on CI
(`CI` set), where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest

HERE = Path(__file__).resolve().parent / "github_schema"
MODULES = HERE / "node_modules" / "@octokit"
GRAPHQL_SCHEMA = MODULES / "graphql-schema" / "schema.json"
OPENAPI = MODULES / "openapi" / "generated" / "api.github.com.json"


def ensure_installed() -> None:
    if GRAPHQL_SCHEMA.exists() and OPENAPI.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI"):
            pytest.fail(
                "npm is missing on CI: GitHub's published API descriptions cannot be installed"
            )
        pytest.skip("npm is not installed: cannot install GitHub's published API descriptions")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=HERE, check=True, timeout=600
    )


@cache
def graphql_schema() -> Any:
    graphql = pytest.importorskip("graphql", reason="graphql-core is not installed")
    ensure_installed()
    data = json.loads(GRAPHQL_SCHEMA.read_text())
    # GitHub's schema is taken as published: graphql-core 3.3 rejects some of its
    # deprecations (an interface field left undeprecated where an implementation is
    # deprecated), which says nothing about the documents we send.
    return graphql.build_client_schema(data.get("data", data), assume_valid=True)


def graphql_errors(document: str) -> list[str]:
    from graphql import parse, validate

    return [error.message for error in validate(graphql_schema(), parse(document))]


@cache
def openapi() -> dict[str, Any]:
    ensure_installed()
    return json.loads(OPENAPI.read_text())


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path)) + "$")


@cache
def _operations() -> list[tuple[re.Pattern[str], int, dict[str, Any]]]:
    """(pattern, literal segments, path item) for each path, most literal first."""
    out = []
    for path, item in openapi()["paths"].items():
        literal = sum(1 for part in path.split("/") if part and not part.startswith("{"))
        out.append((_template(path), literal, item))
    out.sort(key=lambda row: -row[1])
    return out


def _parameter(spec: dict[str, Any], param: dict[str, Any]) -> dict[str, Any]:
    ref = param.get("$ref")
    if ref is None:
        return param
    found: Any = spec
    for part in ref.lstrip("#/").split("/"):
        found = found[part]
    return dict(found)


def rest_problems(method: str, path: str, query: str) -> list[str]:
    """Why this request does not fit GitHub's published REST description ([] when it
    does): an unknown path or method, an undeclared query parameter, a value outside
    the parameter's enum."""
    spec = openapi()
    item = next((it for pattern, _, it in _operations() if pattern.match(path)), None)
    if item is None:
        return [f"{method} {path}: no such path in GitHub's REST API"]
    operation = item.get(method.lower())
    if operation is None:
        return [f"{method} {path}: GitHub's REST API has no {method} here"]
    params = [
        _parameter(spec, p) for p in [*item.get("parameters", []), *operation.get("parameters", [])]
    ]
    by_name = {p["name"]: p for p in params if p.get("in") == "query"}
    problems = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        declared = by_name.get(name)
        if declared is None:
            problems.append(f"{method} {path}: query parameter {name!r} is not declared")
            continue
        enum = (declared.get("schema") or {}).get("enum")
        if enum and value not in enum:
            problems.append(f"{method} {path}: {name}={value!r} is not one of {enum}")
    return problems
