"""The reader group state of the official Rust client (``pravega-client``), byte for byte (issue 25, groundwork).

The official client (``pravega/pravega-client-rust``, crate ``pravega-client`` 0.3.x, the engine of the PyPI
``pravega`` 0.3.8 package) keeps a reader group's state in one table segment and changes it with conditional
table updates. This module is that storage format: typed dataclasses, and ``encode_*``/``decode_*`` giving exactly
the client's key and value bytes, so that our readers and the official client's can share one group. Sources are
paths in that repository (mirror commit 4a83991, tag v0.3.7 has the same ``src`` and ``shared``).

Facts
-----
Table segment (``src/sync/table.rs`` ``Table::new``, ``KVTABLE_SUFFIX``; ``src/event/reader_group_state.rs``
``ReaderGroupState::new`` -> ``ClientFactoryAsync::create_synchronizer(scope, reader_group_name)``): the segment
``ScopedSegment{scope, stream: "<group>_kvtable", segment 0}`` printed by ``shared/src/naming_utils.rs``
``get_qualified_stream_segment_name``, i.e. ``<scope>/<group>_kvtable/0.#epoch.0`` (:func:`table_segment_name`).
The group name is used as is (no ``_RG`` prefix); the client creates the segment itself with
``CreateTableSegment`` (``SegmentAlreadyExists`` is fine) on the endpoint the controller names for it, and asks
for delegation tokens on the stream ``<group>_kvtable``. No controller reader-group call is made.

Keys (``src/sync/synchronizer.rs`` ``Insert::new``, ``Remove::new``, ``InternalKey::split``): the table key is
``serde_cbor::to_vec(&String)`` (a CBOR text string) of the composite key ``format!("{:02}{}/{}", outer.len(),
outer, inner)`` -- two decimal digits of the outer key's byte length, the outer key, ``/``, the inner key -- or,
for the per-outer-key version entry, ``format!("{:02}{}", outer.len(), outer)``.

Values (``src/sync/synchronizer.rs`` ``Value``, ``serialize``; ``src/sync/table.rs`` ``insert_raw_values``): the
table value is ``serde_cbor::to_vec(&Value{type_id: String, data: Vec<u8>})``: a CBOR map of two entries,
``"type_id"`` (text) then ``"data"`` -- a CBOR *array of unsigned integers*, one per byte (serde's ``Vec<u8>`` is a
sequence, not CBOR bytes; a byte string would not deserialize in the client). ``data`` is itself
``serde_cbor`` of the payload. serde_cbor 0.11 (root ``Cargo.toml``) with ``Serializer::new`` defaults: integers in
the shortest head (major 0, or major 1 with ``-1 - n`` for negatives), structs as definite maps of field name (text)
to value in declaration order, ``Option`` None as ``0xf6`` and Some as the bare value, newtype structs as their
inner value, ``HashMap``/``HashSet``/``Vec`` as definite maps/arrays in iteration order, unit enum variants as the
variant name (text), newtype variants as a one-entry map ``{variant: value}``, ``u128`` only up to 2**64-1.

Outer key / inner key -> ``type_id``, payload (``src/event/reader_group_state.rs``):

* ``config`` / ``default`` -> ``"ReaderGroupConfigVersioned"``, ``ReaderGroupConfigVersioned::V1(
  ReaderGroupConfigV1{group_refresh_time_millis: u64, starting_stream_cuts: HashMap<ScopedStream,
  StreamCutVersioned>, ending_stream_cuts: same})`` (``src/event/reader_group.rs``); ``StreamCutVersioned`` is
  ``V1(StreamCutV1{stream: ScopedStream, positions: HashMap<ScopedSegment, i64>})``, ``Unbounded`` or ``Tail``.
  Written once, by the first ``ReaderGroup::create`` (when the table is empty).
* ``unassigned_segments`` / segment qualified name -> ``"Offset"``, ``Offset{read: i64}``.
* ``assigned_segments`` / reader name -> ``"HashMap<ScopedSegment, Offset>"``: the reader's segments and read
  offsets. A reader is online exactly while this entry exists (``check_online``, ``get_online_readers``).
* ``distance_to_tail`` / reader name -> ``"u64"``: always ``u64::MAX`` (written by ``add_reader``, never updated).
* ``future_segments`` / successor's qualified name -> type id ``"HashSet<i64>"`` but the data is
  ``HashSet<Segment>`` (the predecessors still to complete; ``segment_completed_internal``): the type id lies.
* any key -> ``"tombstone"``, data ``serde_cbor`` of ``Tombstone {}`` = ``a0``: the entry is deleted. Tombstones
  stay in the table: ``clear_tombstone`` means to remove them, but it asks ``Update::is_tombstoned`` of a map built by
  ``get_outer_map``, which has already filtered tombstones out, so it never removes one (seen against the real
  client: ``assigned_segments/<reader>`` and ``distance_to_tail/<reader>`` of offline readers, and
  ``unassigned_segments/<segment>`` of assigned segments, are tombstones).
* the outer key alone -> ``"blob"``, data ``[0]``: the outer map's version entry (``increment_map_version``).

``ScopedSegment`` is ``{scope: {name}, stream: {name}, segment: {number: i64, tx_id: Option<TxId(u128)>}}``,
``ScopedStream`` is ``{scope: {name}, stream: {name}}``, ``Segment`` is ``{number, tx_id}``
(``shared/src/lib.rs``). A segment's number is ``epoch << 32 | segment`` and its qualified name
``<scope>/<stream>/<segment>.#epoch.<epoch>``.

Conditional updates (``src/sync/synchronizer.rs`` ``conditionally_write``, ``fetch_updates``, ``clear_tombstone``):
the client mirrors the table from ``ReadTableEntriesDelta`` (from its last position, 10 at a time), runs an update
function on the mirror and sends all its writes in one ``UpdateTableEntries`` with ``tableSegmentOffset`` -1
(no offset condition). Each written key carries the version last seen for it, or ``KEY_NOT_EXISTS`` (-1) if
unseen. Every inner write also writes the outer key's ``blob`` entry, conditioned on that entry's version, so the
outer map is the unit of optimistic concurrency; one batch may carry the same blob key several times, each with the
same expected version. On ``TableKeyBadVersion`` (or ``TableKeyDoesNotExist``) the client re-fetches and reruns
the function; other errors are retried 10 times, a second apart. Deletion is a tombstone write then a
``RemoveTableKeys`` of those keys, each conditioned on its new version, also with offset -1 (never sent, see
tombstones above). A reused key (a reader back online) is written conditioned on its tombstone's version.

Offline and checkpoints: a reader goes offline by ``remove_reader``: its segments move to
``unassigned_segments`` at its last offsets, and ``assigned_segments/<reader>`` and ``distance_to_tail/<reader>``
become tombstones. There is no offline marker and no checkpoint state: the Rust client has no
checkpoints at all (no ``checkpoint`` anywhere in ``src/``).

What cannot be matched
----------------------
* Pravega's Java client keeps its reader group state in a revisioned stream ``<scope>/_RG<group>`` (Java
  serializers, checkpoints, ``ReaderGroupConfiguration`` registered with the controller): a different format in a
  different segment. Groups in this format are shared with the Rust/Python client only, never with Java readers.
* Checkpoints: none exist in this format, so none can be represented.
* Transaction segments in a ``ScopedSegment`` (``tx_id`` Some): serde_cbor refuses a ``u128`` above 2**64-1 and a
  transaction id (a UUID) almost always is; the client never puts one in the state. We encode ``tx_id`` up to
  2**64-1 as the client would, and refuse larger ones as it does.
* Byte-exact re-encoding of a whole map depends on Rust's ``HashMap`` iteration order, which is random per
  process; decoding keeps the stored order (Python dicts), so decode-then-encode gives back the same bytes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller_client.reader_groups.cbor_subset import (
    U64_MAX,
    Cbor,
    CborMap,
    ReaderGroupFormatError,
    cbor_decode,
    cbor_encode,
)

KVTABLE_SUFFIX = "_kvtable"
EPOCH_DELIMITER = ".#epoch."
TRANSACTION_DELIMITER = "#transaction."

CONFIG = "config"
DEFAULT_INNER_KEY = "default"
ASSIGNED = "assigned_segments"
UNASSIGNED = "unassigned_segments"
FUTURE = "future_segments"
DISTANCE = "distance_to_tail"
CHECKPOINTS = "segstore_checkpoints"
"""segstore's extension: checkpoints (``controller_client.reader_groups.state``); the official client ignores it."""

TYPE_CONFIG = "ReaderGroupConfigVersioned"
TYPE_OFFSET = "Offset"
TYPE_ASSIGNED = "HashMap<ScopedSegment, Offset>"
TYPE_FUTURE = "HashSet<i64>"
TYPE_DISTANCE = "u64"
TYPE_TOMBSTONE = "tombstone"
TYPE_BLOB = "blob"

DEFAULT_GROUP_REFRESH_TIME_MS = 3000


def table_segment_name(scope: str, group: str) -> str:
    """The table segment holding ``group``'s state: ``<scope>/<group>_kvtable/0.#epoch.0``."""
    return f"{scope}/{group}{KVTABLE_SUFFIX}/0{EPOCH_DELIMITER}0"


# ---------------------------------------------------------------- the model


@dataclass(frozen=True, slots=True)
class Segment:
    """``pravega_client_shared::Segment``: ``number`` is ``epoch << 32 | segment``; ``tx_id`` None for stream
    segments."""

    number: int
    tx_id: int | None = None


@dataclass(frozen=True, slots=True)
class ScopedStream:
    scope: str
    stream: str

    def __str__(self) -> str:
        return f"{self.scope}/{self.stream}"


@dataclass(frozen=True, slots=True)
class ScopedSegment:
    scope: str
    stream: str
    segment: Segment

    @classmethod
    def of(cls, scope: str, stream: str, number: int) -> ScopedSegment:
        return cls(scope, stream, Segment(number))

    @property
    def qualified_name(self) -> str:
        """The client's ``to_string()``: ``scope/stream/<segment>.#epoch.<epoch>`` (the inner key of a segment)."""
        number, epoch = _to_i32(self.segment.number), self.segment.number >> 32
        name = f"{self.scope}/{self.stream}/{number}{EPOCH_DELIMITER}{epoch}"
        if self.segment.tx_id is None:
            return name
        tx = self.segment.tx_id
        return f"{name}{TRANSACTION_DELIMITER}{tx >> 64:016x}{tx & U64_MAX:016x}"

    @classmethod
    def parse(cls, name: str) -> ScopedSegment:
        """The client's ``ScopedSegment::from(&str)`` for stream segments (``scope/stream/n[.#epoch.e]``)."""
        if TRANSACTION_DELIMITER in name:
            raise ReaderGroupFormatError(f"transaction segment {name!r} in a reader group state")
        tokens = name.split("/")
        if len(tokens) not in (2, 3):
            raise ReaderGroupFormatError(f"segment name {name!r} is not scope/stream/number")
        scope, stream, last = ("", *tokens) if len(tokens) == 2 else tokens
        number, _, epoch = last.partition(EPOCH_DELIMITER)
        try:
            segment_id = (int(epoch or "0") << 32) + int(number)
        except ValueError:
            raise ReaderGroupFormatError(f"segment name {name!r}: {last!r} is not <segment>.#epoch.<epoch>") from None
        return cls(scope, stream, Segment(segment_id))

    def __str__(self) -> str:
        return self.qualified_name


class BoundaryCut(enum.Enum):
    """The unit variants of ``StreamCutVersioned``: the stream's head or tail when the group is created."""

    UNBOUNDED = "Unbounded"
    TAIL = "Tail"


@dataclass(frozen=True, slots=True)
class StreamCutV1:
    stream: ScopedStream
    positions: Mapping[ScopedSegment, int]


StreamCut = StreamCutV1 | BoundaryCut


@dataclass(frozen=True, slots=True)
class ReaderGroupConfig:
    """``ReaderGroupConfigVersioned::V1``."""

    starting_stream_cuts: Mapping[ScopedStream, StreamCut]
    ending_stream_cuts: Mapping[ScopedStream, StreamCut] = field(default_factory=dict)
    group_refresh_time_millis: int = DEFAULT_GROUP_REFRESH_TIME_MS


@dataclass(frozen=True, slots=True)
class TableValue:
    """The client's ``Value``: what every table value holds; ``data`` is serde_cbor of the payload."""

    type_id: str
    data: bytes


@dataclass(slots=True)
class ReaderGroupState:
    """The live (non-tombstone) entries, decoded. ``assigned_segments`` has one entry per online reader."""

    config: ReaderGroupConfig | None = None
    assigned_segments: dict[str, dict[ScopedSegment, int]] = field(default_factory=dict)
    unassigned_segments: dict[ScopedSegment, int] = field(default_factory=dict)
    future_segments: dict[ScopedSegment, tuple[Segment, ...]] = field(default_factory=dict)
    distance_to_tail: dict[str, int] = field(default_factory=dict)

    @property
    def online_readers(self) -> list[str]:
        return list(self.assigned_segments)


def _to_i32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


# ---------------------------------------------------------------- serde shapes


def _struct(*fields: tuple[str, Cbor]) -> CborMap:
    return CborMap(tuple(fields))


def _fields(item: Cbor, what: str, names: tuple[str, ...]) -> list[Cbor]:
    """A struct's field values in ``names`` order (serde accepts any order; the client writes declaration order)."""
    if not isinstance(item, CborMap):
        raise ReaderGroupFormatError(f"{what}: expected a map, got {item!r}")
    found = {key: value for key, value in item.items if isinstance(key, str)}
    if len(found) != len(item.items) or set(found) != set(names):
        raise ReaderGroupFormatError(f"{what}: fields {[k for k, _ in item.items]!r}, expected {list(names)!r}")
    return [found[name] for name in names]


def _int(item: Cbor, what: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    if not isinstance(item, int) or isinstance(item, bool) or not low <= item <= high:
        raise ReaderGroupFormatError(f"{what}: expected an integer in [{low}, {high}], got {item!r}")
    return item


def _str(item: Cbor, what: str) -> str:
    if not isinstance(item, str):
        raise ReaderGroupFormatError(f"{what}: expected text, got {item!r}")
    return item


def _named(name: str) -> CborMap:
    return _struct(("name", name))


def _name(item: Cbor, what: str) -> str:
    return _str(_fields(item, what, ("name",))[0], what)


def segment_to_cbor(segment: Segment) -> CborMap:
    return _struct(("number", segment.number), ("tx_id", segment.tx_id))


def segment_from_cbor(item: Cbor) -> Segment:
    number, tx_id = _fields(item, "Segment", ("number", "tx_id"))
    return Segment(_int(number, "Segment.number"), None if tx_id is None else _int(tx_id, "TxId", 0, U64_MAX))


def scoped_segment_to_cbor(segment: ScopedSegment) -> CborMap:
    return _struct(
        ("scope", _named(segment.scope)),
        ("stream", _named(segment.stream)),
        ("segment", segment_to_cbor(segment.segment)),
    )


def scoped_segment_from_cbor(item: Cbor) -> ScopedSegment:
    scope, stream, segment = _fields(item, "ScopedSegment", ("scope", "stream", "segment"))
    return ScopedSegment(_name(scope, "Scope"), _name(stream, "Stream"), segment_from_cbor(segment))


def scoped_stream_to_cbor(stream: ScopedStream) -> CborMap:
    return _struct(("scope", _named(stream.scope)), ("stream", _named(stream.stream)))


def scoped_stream_from_cbor(item: Cbor) -> ScopedStream:
    scope, stream = _fields(item, "ScopedStream", ("scope", "stream"))
    return ScopedStream(_name(scope, "Scope"), _name(stream, "Stream"))


def _offset_to_cbor(read: int) -> CborMap:
    return _struct(("read", read))


def _offset_from_cbor(item: Cbor) -> int:
    return _int(_fields(item, "Offset", ("read",))[0], "Offset.read")


def _map_items(item: Cbor, what: str) -> tuple[tuple[Cbor, Cbor], ...]:
    if not isinstance(item, CborMap):
        raise ReaderGroupFormatError(f"{what}: expected a map, got {item!r}")
    return item.items


def _variant(item: Cbor, what: str) -> tuple[str, Cbor]:
    """An enum value: a unit variant's name, or ``{variant: value}``."""
    if isinstance(item, str):
        return item, None
    items = _map_items(item, what)
    if len(items) != 1 or not isinstance(items[0][0], str):
        raise ReaderGroupFormatError(f"{what}: expected a variant name or {{variant: value}}, got {item!r}")
    return items[0][0], items[0][1]


def stream_cut_to_cbor(cut: StreamCut) -> Cbor:
    if isinstance(cut, BoundaryCut):
        return cut.value
    positions = CborMap(tuple((scoped_segment_to_cbor(s), o) for s, o in cut.positions.items()))
    return CborMap((("V1", _struct(("stream", scoped_stream_to_cbor(cut.stream)), ("positions", positions))),))


def stream_cut_from_cbor(item: Cbor) -> StreamCut:
    variant, body = _variant(item, "StreamCutVersioned")
    if variant == "V1" and body is not None:
        stream, positions = _fields(body, "StreamCutV1", ("stream", "positions"))
        return StreamCutV1(
            scoped_stream_from_cbor(stream),
            {
                scoped_segment_from_cbor(s): _int(o, "StreamCutV1 position")
                for s, o in _map_items(positions, "StreamCutV1.positions")
            },
        )
    if body is None and variant in {cut.value for cut in BoundaryCut}:
        return BoundaryCut(variant)
    raise ReaderGroupFormatError(f"StreamCutVersioned: unknown variant {variant!r}")


def _cuts_to_cbor(cuts: Mapping[ScopedStream, StreamCut]) -> CborMap:
    return CborMap(tuple((scoped_stream_to_cbor(s), stream_cut_to_cbor(c)) for s, c in cuts.items()))


def _cuts_from_cbor(item: Cbor, what: str) -> dict[ScopedStream, StreamCut]:
    return {scoped_stream_from_cbor(s): stream_cut_from_cbor(c) for s, c in _map_items(item, what)}


def config_to_cbor(config: ReaderGroupConfig) -> CborMap:
    body = _struct(
        ("group_refresh_time_millis", config.group_refresh_time_millis),
        ("starting_stream_cuts", _cuts_to_cbor(config.starting_stream_cuts)),
        ("ending_stream_cuts", _cuts_to_cbor(config.ending_stream_cuts)),
    )
    return CborMap((("V1", body),))


def config_from_cbor(item: Cbor) -> ReaderGroupConfig:
    variant, body = _variant(item, "ReaderGroupConfigVersioned")
    if variant != "V1" or body is None:
        raise ReaderGroupFormatError(f"ReaderGroupConfigVersioned: unknown variant {variant!r}")
    names = ("group_refresh_time_millis", "starting_stream_cuts", "ending_stream_cuts")
    refresh, starting, ending = _fields(body, "ReaderGroupConfigV1", names)
    return ReaderGroupConfig(
        _cuts_from_cbor(starting, "starting_stream_cuts"),
        _cuts_from_cbor(ending, "ending_stream_cuts"),
        _int(refresh, "group_refresh_time_millis", 0, U64_MAX),
    )


# ---------------------------------------------------------------- payloads by type id

Payload = ReaderGroupConfig | int | dict[ScopedSegment, int] | tuple[Segment, ...] | None


def encode_data(type_id: str, payload: Payload) -> bytes:
    """``Value.data`` for ``payload`` of type ``type_id`` (the client's ``serialize``)."""
    if type_id == TYPE_CONFIG and isinstance(payload, ReaderGroupConfig):
        return cbor_encode(config_to_cbor(payload))
    if type_id == TYPE_OFFSET and isinstance(payload, int):
        return cbor_encode(_offset_to_cbor(payload))
    if type_id == TYPE_ASSIGNED and isinstance(payload, dict):
        return cbor_encode(CborMap(tuple((scoped_segment_to_cbor(s), _offset_to_cbor(o)) for s, o in payload.items())))
    if type_id == TYPE_FUTURE and isinstance(payload, tuple):
        return cbor_encode([segment_to_cbor(s) for s in payload])
    if type_id == TYPE_DISTANCE and isinstance(payload, int):
        return cbor_encode(_int(payload, "distance", 0, U64_MAX))
    if type_id == TYPE_TOMBSTONE and payload is None:
        return cbor_encode(CborMap(()))
    if type_id == TYPE_BLOB and payload is None:
        return b"\x00"
    raise ReaderGroupFormatError(f"no encoding of {type(payload).__name__} as {type_id!r}")


def decode_data(type_id: str, data: bytes) -> Payload:
    """The payload ``Value.data`` holds for ``type_id`` (None for tombstones and blobs)."""
    if type_id == TYPE_BLOB:
        if data != b"\x00":
            raise ReaderGroupFormatError(f"blob data {data!r}, expected [0]")
        return None
    item = cbor_decode(data)
    if type_id == TYPE_CONFIG:
        return config_from_cbor(item)
    if type_id == TYPE_OFFSET:
        return _offset_from_cbor(item)
    if type_id == TYPE_ASSIGNED:
        items = _map_items(item, TYPE_ASSIGNED)
        return {scoped_segment_from_cbor(s): _offset_from_cbor(o) for s, o in items}
    if type_id == TYPE_FUTURE:
        if not isinstance(item, list):
            raise ReaderGroupFormatError(f"{TYPE_FUTURE}: expected an array of Segment, got {item!r}")
        return tuple(segment_from_cbor(s) for s in item)
    if type_id == TYPE_DISTANCE:
        return _int(item, "distance_to_tail", 0, U64_MAX)
    if type_id == TYPE_TOMBSTONE:
        _fields(item, "Tombstone", ())
        return None
    raise ReaderGroupFormatError(f"unknown type id {type_id!r}")


# ---------------------------------------------------------------- table keys and values


def encode_key(outer: str, inner: str | None = None) -> bytes:
    """The table key: CBOR text of ``{len(outer):02}{outer}/{inner}`` (or without ``/inner``)."""
    length = len(outer.encode())
    if length > 99:
        raise ReaderGroupFormatError(f"outer key {outer!r} is longer than 99 bytes")
    composite = f"{length:02}{outer}" if inner is None else f"{length:02}{outer}/{inner}"
    return cbor_encode(composite)


def decode_key(key: bytes) -> tuple[str, str | None]:
    """``(outer, inner)`` of a table key (``inner`` None for the outer key's version entry)."""
    raw = _str(cbor_decode(key), "table key").encode()
    if len(raw) < 2 or not raw[:2].isdigit():
        raise ReaderGroupFormatError(f"table key {raw!r} does not start with two digits")
    end = 2 + int(raw[:2])
    if len(raw) < end:
        raise ReaderGroupFormatError(f"table key {raw!r} is shorter than its outer key length")
    outer = raw[2:end].decode()
    if len(raw) == end:
        return outer, None
    if raw[end : end + 1] != b"/":
        raise ReaderGroupFormatError(f"table key {raw!r}: no '/' after the outer key")
    return outer, raw[end + 1 :].decode()


def encode_value(value: TableValue) -> bytes:
    """The table value: serde_cbor of ``Value{type_id, data}`` with ``data`` as an array of byte integers."""
    return cbor_encode(_struct(("type_id", value.type_id), ("data", list(value.data))))


def decode_value(raw: bytes) -> TableValue:
    type_id, data = _fields(cbor_decode(raw), "Value", ("type_id", "data"))
    if not isinstance(data, list):
        raise ReaderGroupFormatError(f"Value.data: expected an array of bytes, got {data!r}")
    return TableValue(_str(type_id, "Value.type_id"), bytes(_int(b, "Value.data byte", 0, 255) for b in data))


_EXPECTED_TYPE = {CONFIG: TYPE_CONFIG, ASSIGNED: TYPE_ASSIGNED, UNASSIGNED: TYPE_OFFSET, FUTURE: TYPE_FUTURE}
_EXPECTED_TYPE[DISTANCE] = TYPE_DISTANCE


def encode_entry(outer: str, inner: str | None, type_id: str, payload: Payload) -> tuple[bytes, bytes]:
    """One table entry ``(key, value)`` as the client writes it."""
    return encode_key(outer, inner), encode_value(TableValue(type_id, encode_data(type_id, payload)))


def state_from_entries(entries: Iterable[tuple[bytes, bytes]]) -> ReaderGroupState:
    """The state the client sees in these table entries: tombstones and outer version blobs left out, as the
    client's ``get_inner_map`` does, and segstore's checkpoint map; an unknown outer key or a type id that does
    not fit its key raises."""
    state = ReaderGroupState()
    for key, raw in entries:
        outer, inner = decode_key(key)
        if outer == CHECKPOINTS:
            continue
        value = decode_value(raw)
        payload = decode_data(value.type_id, value.data)
        if inner is None:
            if value.type_id != TYPE_BLOB or outer not in _EXPECTED_TYPE:
                raise ReaderGroupFormatError(f"outer key {outer!r} holds {value.type_id!r}, expected a blob")
            continue
        if value.type_id == TYPE_TOMBSTONE:
            continue
        if _EXPECTED_TYPE.get(outer) != value.type_id:
            raise ReaderGroupFormatError(
                f"{outer}/{inner} holds {value.type_id!r}, expected {_EXPECTED_TYPE.get(outer)}"
            )
        if isinstance(payload, ReaderGroupConfig):
            state.config = payload
        elif isinstance(payload, dict):
            state.assigned_segments[inner] = payload
        elif isinstance(payload, tuple):
            state.future_segments[ScopedSegment.parse(inner)] = payload
        elif isinstance(payload, int) and outer == UNASSIGNED:
            state.unassigned_segments[ScopedSegment.parse(inner)] = payload
        elif isinstance(payload, int):
            state.distance_to_tail[inner] = payload
    return state


def state_to_entries(state: ReaderGroupState) -> list[tuple[bytes, bytes]]:
    """The live entries of ``state`` as the client writes them, each outer map followed by its version blob."""
    entries: list[tuple[bytes, bytes]] = []

    def outer_map(outer: str, items: list[tuple[str, str, Payload]]) -> None:
        entries.extend(encode_entry(outer, inner, type_id, payload) for inner, type_id, payload in items)
        if items:
            entries.append(encode_entry(outer, None, TYPE_BLOB, None))

    outer_map(CONFIG, [] if state.config is None else [(DEFAULT_INNER_KEY, TYPE_CONFIG, state.config)])
    outer_map(ASSIGNED, [(r, TYPE_ASSIGNED, s) for r, s in state.assigned_segments.items()])
    outer_map(UNASSIGNED, [(s.qualified_name, TYPE_OFFSET, o) for s, o in state.unassigned_segments.items()])
    outer_map(FUTURE, [(s.qualified_name, TYPE_FUTURE, p) for s, p in state.future_segments.items()])
    outer_map(DISTANCE, [(r, TYPE_DISTANCE, d) for r, d in state.distance_to_tail.items()])
    return entries
