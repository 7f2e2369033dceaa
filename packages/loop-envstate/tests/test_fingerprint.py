from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from loop_envstate import FINGERPRINT_LENGTH, fingerprint


def test_length_is_documented_twelve_hex_chars() -> None:
    assert FINGERPRINT_LENGTH == 12
    fp = fingerprint("anything")
    assert len(fp) == FINGERPRINT_LENGTH
    assert set(fp) <= set("0123456789abcdef")


@pytest.mark.parametrize("value", ["", "token-123", "héllo ✓", "a\nb", "x" * 10_000])
def test_is_the_truncated_sha256_of_the_utf8_bytes(value: str) -> None:
    expected = hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]
    assert fingerprint(value) == expected


def test_known_vector() -> None:
    # SHA-256 of the empty string starts e3b0c44298fc: pins the algorithm and the cut.
    assert fingerprint("") == "e3b0c44298fc"


def test_different_values_differ_and_equal_values_agree() -> None:
    assert fingerprint("secret-1") != fingerprint("secret-2")
    assert fingerprint("secret-1") == fingerprint("secret-" + "1")


def test_stable_across_processes_and_hash_seeds() -> None:
    code = "from loop_envstate import fingerprint; print(fingerprint('stable-value'))"
    outputs = set()
    for seed in ("1", "2", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        ).stdout.strip()
        outputs.add(out)
    assert outputs == {fingerprint("stable-value")}


def test_non_utf8_process_bytes_hash_as_the_raw_bytes() -> None:
    raw = b"caf\xe9"  # latin-1, as a process environment may hold it
    value = os.fsdecode(raw)
    assert fingerprint(value) == hashlib.sha256(raw).hexdigest()[:12]
