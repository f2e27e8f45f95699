"""ULIDs: 26-character, time-ordered, Crockford base32 identifiers for messages.

Ids minted by one process in the same millisecond increase monotonically, so a mailbox ordered
by id is ordered by send time.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import TypeGuard

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PATTERN = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_ulid(now_ms: int | None = None) -> str:
    global _last_ms, _last_rand
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
            if rand >= 1 << 80:  # 2^80 ids in one millisecond: move to the next one
                ms, rand = ms + 1, int.from_bytes(os.urandom(10), "big")
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_rand = ms, rand
    return _encode(ms, 10) + _encode(rand, 16)


def is_ulid(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(_PATTERN.match(value))


def ulid_time_ms(value: str) -> int:
    ms = 0
    for char in value[:10]:
        ms = ms * 32 + _ALPHABET.index(char)
    return ms
