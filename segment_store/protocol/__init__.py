"""Sans-I/O codec of the Pravega wire protocol: bytes in, command objects out, and back.

The commands come from :mod:`segment_store.protocol.commands` (its ``__all__`` lists them once); this package adds
the codec, framing, events, handshake and registry around them.
"""

from segment_store.protocol.assembler import (
    Append,
    AppendAssembler,
    append_block_end_ends,
    append_block_header,
    build_append_block_end,
    encode_append_batch,
    encode_java_append_block,
    frame_append_block_end,
)
from segment_store.protocol.codec import (
    FrameDecoder,
    decode_all,
    decode_body,
    encode,
    encode_into,
    encode_many,
)
from segment_store.protocol.commands import *  # noqa: F403 - every command: the names in commands.__all__
from segment_store.protocol.commands import __all__
from segment_store.protocol.constants import (
    EVENT_TYPE_CODE,
    HEADER_SIZE,
    MAX_FRAME_PAYLOAD,
    NULL_ATTRIBUTE_VALUE,
    NULL_TABLE_SEGMENT_OFFSET,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
)
from segment_store.protocol.errors import IncompatibleVersionError, ProtocolError
from segment_store.protocol.events import (
    EventParser,
    SegmentEvent,
    count_events,
    encode_events,
    encode_events_into,
    frame_event,
    parse_events,
)
from segment_store.protocol.handshake import is_compatible, local_hello, negotiate
from segment_store.protocol.registry import REGISTRY, WireCommand, command_class

# ``__all__`` came from segment_store.protocol.commands with every command, constant and helper type of the wire
# (the one list of them; importing ``__all__`` itself rather than reading ``commands.__all__`` is what lets mypy see
# those names as exported here too); this package's own names follow.
__all__ += (
    "EVENT_TYPE_CODE",
    "HEADER_SIZE",
    "MAX_FRAME_PAYLOAD",
    "NULL_ATTRIBUTE_VALUE",
    "NULL_TABLE_SEGMENT_OFFSET",
    "OLDEST_COMPATIBLE_VERSION",
    "REGISTRY",
    "WIRE_VERSION",
    "Append",
    "AppendAssembler",
    "EventParser",
    "FrameDecoder",
    "IncompatibleVersionError",
    "ProtocolError",
    "SegmentEvent",
    "WireCommand",
    "append_block_end_ends",
    "append_block_header",
    "build_append_block_end",
    "command_class",
    "count_events",
    "decode_all",
    "decode_body",
    "encode",
    "encode_append_batch",
    "encode_events",
    "encode_events_into",
    "encode_into",
    "encode_java_append_block",
    "encode_many",
    "frame_append_block_end",
    "frame_event",
    "is_compatible",
    "local_hello",
    "negotiate",
    "parse_events",
)
