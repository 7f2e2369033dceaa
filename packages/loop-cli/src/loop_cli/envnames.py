"""Environment variable NAMES as they may appear in config and in messages.

Every `*Env` key holds the NAME of a variable; an operator in a hurry pastes the token
itself there (`github.tokenEnv: github_pat_...`). Such a value must be refused, and no
message that names a variable may repeat it: `shown` is the one function messages call
to name a variable, and it cannot return a token-shaped string.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["NOT_SHOWN", "is_env_name", "looks_like_token", "shown"]

NOT_SHOWN = "<a token-shaped value, not shown>"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Credential prefixes issued by GitHub, Slack, OpenAI/Anthropic and the like.
_TOKEN_PREFIXES = (
    *("ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_", "xox", "xapp-", "sk-"),
    *("glpat-", "glpat_", "AKIA", "ASIA", "AIza"),
)
_HEX_RUN = re.compile(r"[0-9a-fA-F]{24,}")  # `openssl rand -hex 16` and the like
_MIXED_SHORT = 12  # a run this long mixing lower, upper and digits is a password
_LONG = 20  # shorter strings are never judged by their entropy
_ENTROPY_BITS = 3.5  # bits per character: random base62 is ~5.9, NAMES_LIKE_THIS ~3.3


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_token(text: str) -> bool:
    """Whether `text` has the shape of a credential rather than of a variable name: a
    known token prefix, a 40+ character run of letters and digits, or a run of 20+
    random-looking characters mixing lower case, upper case and digits."""
    if text.startswith(_TOKEN_PREFIXES):  # issued in lower case; NAMES are upper
        return True
    # Names are words joined by underscores; a token is one long random run.
    return any(_random_run(run) for run in text.split("_"))


def _random_run(run: str) -> bool:
    mixed = (
        any(c.islower() for c in run)
        and any(c.isupper() for c in run)
        and any(c.isdigit() for c in run)
    )
    if mixed and len(run) >= _MIXED_SHORT:  # `MyWebhookSecret2024`: no NAME looks so
        return True
    if _HEX_RUN.fullmatch(run) and any(c.isdigit() for c in run) and not run.isdigit():
        return True
    if len(run) < _LONG:
        return False
    if mixed and _entropy(run) >= _ENTROPY_BITS:
        return True
    # A long hex or lower-case key (classic 40-hex tokens): letters and digits, no words.
    digits = sum(c.isdigit() for c in run)
    return len(run) >= 2 * _LONG and 0 < digits < len(run) and _entropy(run) >= 3.0


def is_env_name(text: str) -> bool:
    """A usable variable NAME that is not token-shaped."""
    return bool(_NAME.fullmatch(text)) and not looks_like_token(text)


def shown(name: str) -> str:
    """`name` for a message, or NOT_SHOWN when it is not a plain variable name (a pasted
    token, a value with spaces or symbols): the only way a message names a variable."""
    return name if is_env_name(name) else NOT_SHOWN
