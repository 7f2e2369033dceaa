"""A fake Jira (Cloud REST API v3, or Data Center's v2) served on 127.0.0.1 for tests.

Every request it receives is checked against Atlassian's published OpenAPI description
of the Jira Cloud platform REST API (see `openapi_check.py` for which copy, where it
came from and its licence).
"""

from .server import FakeJira

__all__ = ["FakeJira"]
