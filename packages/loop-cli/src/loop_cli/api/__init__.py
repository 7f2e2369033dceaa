"""The poll daemon's read-only local API: status, sessions, inbox, attention, events,
the live event stream, the dashboard and /metrics (issue 26; docs/operator-guide.md)."""
