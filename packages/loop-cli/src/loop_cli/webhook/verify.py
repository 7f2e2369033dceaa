"""GitHub's `X-Hub-Signature-256`: HMAC-SHA256 of the raw body under the shared secret."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["sign", "verify_signature"]

PREFIX = "sha256="


def sign(secret: bytes, body: bytes) -> str:
    """The header value GitHub would send for `body` (used by tests and benchmarks)."""
    return PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True iff `header` is `sha256=<hex>` of the body. Constant-time in the digest."""
    if not header or not header.startswith(PREFIX):
        return False
    expected = sign(secret, body)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("ascii", "replace"))
