"""Check a request against Atlassian's OpenAPI description of Jira Cloud's REST API.

The description is `jira-platform-v3.subset.json` beside this file: the operations
the-loop calls (GET myself, GET search/jql, GET search, GET issue, GET/POST issue
comment, GET one comment, GET project), with every component they reference, copied
unchanged from Atlassian's published swagger
(https://developer.atlassian.com/cloud/jira/platform/swagger-v3.v3.json, version
1001.0.0-SNAPSHOT-57a0ca5b, as mirrored in the public repository
jarekbird/jira-api-mcp-wrapper on 2025-12-25). Atlassian publishes it under the Apache
License 2.0 (its `info.license`); examples and the per-operation OAuth scope lists
were dropped, and `servers` set to "/" so it matches the loopback fake. No package on
PyPI or npm ships it, so the subset is vendored.

openapi-core (BSD-3-Clause) validates path, query parameters and JSON bodies against
it; on top, a query parameter the operation does not declare is a violation (Jira
ignores unknown ones silently, which would hide a typo).

Data Center's REST API v2 has no OpenAPI description Atlassian publishes in a form
that can be had here; its requests are checked against the v3 operation of the same
resource (v2's `search` against v3's `search`, which has the same startAt/maxResults
paging); a v2 comment's body (wiki-markup text, not ADF) is checked as a one-paragraph
ADF document of that text, so every other field still meets the v3 schema.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

SPEC = Path(__file__).with_name("jira-platform-v3.subset.json")


@lru_cache(maxsize=1)
def _api() -> tuple[Any, dict[str, Any]]:
    from openapi_core import OpenAPI

    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    return OpenAPI.from_dict(spec), spec


def _operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    for template, ops in spec["paths"].items():
        pattern = "^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            return dict(ops[method.lower()])
    return None


def violations(method: str, path: str, query: dict[str, str], body: bytes) -> list[str]:
    """What in this request the description does not allow ([] when it conforms)."""
    from openapi_core.testing import MockRequest

    api, spec = _api()
    v2 = path.startswith("/rest/api/2/")
    checked_path = "/rest/api/3/" + path[len("/rest/api/2/") :] if v2 else path
    op = _operation(spec, method, checked_path)
    if op is None:
        return [f"{method} {path}: no such operation in the OpenAPI description"]
    problems = []
    declared = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
    for name in query:
        if name not in declared:
            problems.append(f"{method} {path}: query parameter {name!r} is not declared")
    data = _as_v3(body) if v2 else (body or None)
    request = MockRequest(
        "http://127.0.0.1", method.lower(), checked_path, args=dict(query), data=data
    )
    try:
        api.validate_request(request)
    except Exception as exc:  # openapi-core's validation errors, one line each
        cause = exc.__cause__ or exc
        problems.append(f"{method} {path}: {' '.join(str(cause).split())[:300]}")
    return problems


def _as_v3(body: bytes) -> bytes | None:
    """A v2 JSON body with its text `body` as the ADF document v3 expects."""
    if not body:
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return body  # the validator reports it
    if isinstance(obj, dict) and isinstance(obj.get("body"), str):
        text = {"type": "text", "text": obj["body"]}
        obj["body"] = {
            "type": "doc",
            "version": 1,
            "content": [{"type": "paragraph", "content": [text]}],
        }
    return json.dumps(obj).encode()
