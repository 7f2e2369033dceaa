"""`the-loop status --format slack [--post]`: the same facts as a Slack Block Kit payload.

The payload is built from status's own dict (never from a second read), so Slack and
the terminal cannot disagree. Posting goes to an incoming-webhook URL read from
`THE_LOOP_SLACK_WEBHOOK_URL`; the URL is itself a credential, so no message ever
repeats it, and slack-sdk's own logging of failures is silenced for the same reason.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from .errors import OperationalError, UsageError

WEBHOOK_ENV = "THE_LOOP_SLACK_WEBHOOK_URL"
POST_TIMEOUT = 10.0
_SECTION_LIMIT = 3000  # Block Kit's cap on one section's text


def _service_line(svc: Mapping[str, Any]) -> str:
    name = svc.get("name", "?")
    if not svc.get("enabled"):
        return f"• {name}: disabled"
    if svc.get("running"):
        return f"• {name}: running (pid {svc.get('pid')})"
    return f"• {name}: *NOT RUNNING* ({svc.get('state', 'unknown')})"


def _sessions_line(sessions: Mapping[str, Any]) -> str:
    line = (
        f"{sessions.get('registered', 0)} registered: {sessions.get('live', 0)} live, "
        f"{sessions.get('dead', 0)} dead, {sessions.get('absent', 0)} absent, "
        f"{sessions.get('unknown', 0)} unknown"
    )
    if sessions.get("tmuxError"):
        line += f"\ntmux did not answer: {sessions['tmuxError']}"
    return line


def _section(text: str) -> dict[str, Any]:
    if len(text) > _SECTION_LIMIT:
        text = text[: _SECTION_LIMIT - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _failing(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    checks = status.get("health")
    if not isinstance(checks, list):
        return []
    return [c for c in checks if isinstance(c, Mapping) and c.get("state") != "ok"]


def _health_text(failing: list[Mapping[str, Any]]) -> str:
    lines = []
    for c in failing:
        lines.append(f"• *{c.get('check')}*: {c.get('reason', '')}")
        if c.get("remedy"):
            lines.append(f"    remedy: {c['remedy']}")
    return "\n".join(lines)


def render_status_blocks(status: Mapping[str, Any]) -> dict[str, Any]:
    """A Block Kit message (`text` fallback plus `blocks`) for one status dict."""
    ok = bool(status.get("ok"))
    failing = _failing(status)
    if ok:
        headline = "the-loop: ok, work is flowing"
    elif failing:
        headline = "the-loop: NOT OK: " + ", ".join(str(c.get("check")) for c in failing)
    else:
        headline = "the-loop: NOT OK"
    services = "\n".join(_service_line(s) for s in status.get("services", [])) or "• none"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": headline[:150]}},
    ]
    if failing:
        blocks.append(_section(f"*Health*\n{_health_text(failing)}"))
    blocks += [
        _section(f"*Services*\n{services}"),
        _section(f"*Sessions*\n{_sessions_line(status.get('sessions', {}))}"),
    ]
    attention = status.get("attention")
    if isinstance(attention, list) and attention:
        rows = [f"• *{a.get('item')}*: {a.get('why')} since {a.get('since')}" for a in attention]
        blocks.append(_section("*Needs attention*\n" + "\n".join(rows)))
    env = status.get("sessionEnvironment")
    fallback = headline
    if failing:
        fallback += ". " + "; ".join(str(c.get("reason", "")) for c in failing)
    if isinstance(env, Mapping) and env.get("line"):
        blocks.append(_section(f":warning: {env['line']}"))
        fallback += f". {env['line']}"
    cycle = status.get("lastPollCycle")
    last_poll = (
        f"last poll {cycle.get('at', '?')}: {cycle.get('result', '')}"
        if isinstance(cycle, Mapping)
        else "last poll: never"
    )
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"the-loop {status.get('version', '?')} · {last_poll}",
                }
            ],
        }
    )
    return {"text": fallback, "blocks": blocks}


def notification_blocks(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Block Kit message for one notification (notify.py built its fields; nothing
    else of the event reaches Slack)."""
    item = message.get("item")
    link = message.get("link")
    where = f"<{link}|{item}>" if link and item else str(item or "the-loop")
    headline = f"the-loop: {message.get('event')}: {message.get('reason')}"
    lines = [f"*{where}*: {message.get('summary', '')}", f"remedy: `{message.get('remedy', '')}`"]
    return {
        "text": f"{headline} ({item})" if item else headline,
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": headline[:150]}},
            _section("\n".join(lines)),
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"{message.get('at', '')}"}],
            },
        ],
    }


def _quiet_logger() -> logging.Logger:
    """slack-sdk logs failed requests at ERROR; ours says it once, in our words."""
    logger = logging.getLogger("loop_cli.slack.webhook")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def webhook_url(environ: Mapping[str, str] | None = None) -> str:
    """The incoming-webhook URL from the environment; refuses unset or non-HTTP(S)."""
    env = os.environ if environ is None else environ
    url = env.get(WEBHOOK_ENV, "").strip()
    if not url:
        raise UsageError(f"--post needs the Slack incoming-webhook URL in ${WEBHOOK_ENV}")
    if not url.lower().startswith(("https://", "http://")):
        raise UsageError(f"${WEBHOOK_ENV} is not an http(s) URL")
    return url


def post_payload(
    payload: Mapping[str, Any],
    url: str,
    *,
    timeout: float = POST_TIMEOUT,
) -> None:
    """Send the payload; raises OperationalError (exit 1) unless Slack answered 200 "ok"."""
    from slack_sdk.webhook import WebhookClient

    client = WebhookClient(url, timeout=int(max(1, timeout)), logger=_quiet_logger())
    try:
        response = client.send_dict(dict(payload))
    except OSError as err:  # URLError, timeouts, refused connections
        reason = getattr(err, "reason", None) or err.strerror or type(err).__name__
        raise OperationalError(f"posting status to Slack failed: {reason}") from None
    except Exception as err:  # anything else must not carry the URL into a traceback
        raise OperationalError(f"posting status to Slack failed: {type(err).__name__}") from None
    if response.status_code != 200:
        said = " ".join(str(response.body or "").split())[:200]
        raise OperationalError(
            f"posting status to Slack failed: HTTP {response.status_code}"
            + (f" ({said})" if said else "")
        )


def post_status(
    payload: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
) -> None:
    """`status --format slack --post`: the URL from the environment, then one POST."""
    post_payload(payload, webhook_url(environ))
