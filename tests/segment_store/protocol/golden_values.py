"""The values the golden-bytes tests encode (tests/segment_store/protocol/test_golden.py and golden_extensions.py)."""

from __future__ import annotations

import uuid

# Non-trivial values: UUIDs with the high bit set, negative numbers, non-ASCII text whose UTF-8 is
# written out by hand (u-umlaut C3 BC, CJK U+6D41 E6 B5 81, o-umlaut C3 B6, euro E2 82 AC, sharp s C3 9F).
WRITER = uuid.UUID("f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f")
ATTR = uuid.UUID("80000000-0000-0000-0000-000000000001")
SEG = "Zürich/流-0"
SEG_RAW = b"Z\xc3\xbcrich/\xe6\xb5\x81-0"
SEG2 = "scope/stream/1.#epoch.0"
SEG2_RAW = b"scope/stream/1.#epoch.0"
TOKEN = "tök€n"
TOKEN_RAW = b"t\xc3\xb6k\xe2\x82\xacn"
STACK = "java.lang.Exception: ß"
STACK_RAW = b"java.lang.Exception: \xc3\x9f"
REQ = -4242424242424242
MIN_LONG = -(2**63)
MAX_LONG = 2**63 - 1
DATA = bytes(range(256))[::-3]
