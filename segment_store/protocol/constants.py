"""Wire-level constants shared by every module of the codec (values from Pravega's ``WireCommands``)."""

from __future__ import annotations

import struct
from typing import Final

#: Wire version we speak. Pravega's Java HEAD is at 17 (16 added ``InvalidEventNumber.eventNumber``,
#: 17 added ``LocateOffset``); 15 is what the Rust client (and so the official Python client) speaks.
#: Both later additions are backward compatible on the wire, and we decode them regardless.
WIRE_VERSION: Final = 15
#: Oldest peer version we still understand (older peers send shorter frames; see ``Opt`` fields).
OLDEST_COMPATIBLE_VERSION: Final = 5

#: Size of the type code, and of the type code + length header that starts every frame.
TYPE_SIZE: Final = 4
HEADER_SIZE: Final = 8
#: Largest frame payload (the bytes after the 8-byte header): 16 MiB - 1.
MAX_FRAME_PAYLOAD: Final = 0x00FFFFFF

#: "No value" for a segment attribute (Java ``Long.MIN_VALUE``).
NULL_ATTRIBUTE_VALUE: Final = -(2**63)
#: "No offset condition" for table updates/removals.
NULL_TABLE_SEGMENT_OFFSET: Final = -1

#: Type code of ``Event``: also the first int32 of every event stored in segment data.
EVENT_TYPE_CODE: Final = 0

#: Frame header: type code int32, payload length int32, big-endian.
HEADER: Final = struct.Struct(">ii")
