"""Fingerprints: the only form an environment value may take in any output."""

from __future__ import annotations

FINGERPRINT_LENGTH = 12
"""Hex characters kept from the SHA-256 digest (48 bits).

Long enough that two different values of one name practically never share a
fingerprint, short enough to read in a table. A fingerprint proves equality; it is
not a secrecy device: a short or guessable value can be recovered by hashing guesses.
"""


def fingerprint(value: str) -> str:
    """The first FINGERPRINT_LENGTH hex chars of SHA-256 over the value's bytes.

    Values read from a process may hold bytes that are not UTF-8 (they arrive as
    surrogate escapes), so encoding with ``surrogateescape`` hashes the exact bytes the
    process holds and a file value and a process value compare byte for byte.
    """
    import hashlib  # lazy: keeps `import loop_envstate` cheap

    data = value.encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()[:FINGERPRINT_LENGTH]
