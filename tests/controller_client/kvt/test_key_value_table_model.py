"""Key-value table values without a server: the primary-key hash against golden values from Pravega's Java code,
routing to partitions, names, configurations, versions, the iterator's key arithmetic and the proto messages."""

from __future__ import annotations

import pytest

from controller_client.kvt.iterator import key_after
from controller_client.kvt.model import (
    NO_VERSION,
    NOT_EXISTS,
    KeyValueTableConfiguration,
    Version,
    kvt_of_stream,
    table_segment_name,
    validate_kvt_name,
)
from controller_client.kvt.proto import kvt_config_from_proto, kvt_config_to_proto
from controller_client.kvt.routing import KVT_ROUTING_SEED, Partitions, java_string_hash, primary_key_position
from controller_client.model import InvalidModelError, SegmentRange, even_ranges
from controller_client.proto import Controller_pb2 as pb
from controller_client.writers.routing import ROUTING_SEED

pytestmark = pytest.mark.unit

# Guava 33.6 Hashing.murmur3_128("KeyValueTableRouter".hashCode()).hashBytes(key).asLong() through Pravega's
# HashHelper.longToDoubleFraction, run on the JVM (Java 17): what KeyValueTableSegments.getSegmentForKey hashes.
GOLDEN = [
    (b"", 0.42352702020022215),
    (b"a", 0.6272098046731807),
    (b"user-0001", 0.9763284964165195),
    (b"0123456789abcdef", 0.3339020757249709),
    (b"0123456789abcdef0", 0.18124613624537522),
    (bytes([0, 1, 255]), 0.6890843739809576),
]


def test_the_seed_is_javas_hash_code_of_the_router_name() -> None:
    assert java_string_hash("KeyValueTableRouter") == KVT_ROUTING_SEED == -2020233499
    assert java_string_hash("EventRouter") == ROUTING_SEED


@pytest.mark.parametrize(("primary", "position"), GOLDEN)
def test_primary_key_position_with_javas_golden_values(primary: bytes, position: float) -> None:
    assert primary_key_position(primary) == position


def test_partitions_route_by_the_ceiling_of_the_position() -> None:
    partitions = Partitions(SegmentRange(n, low, high) for n, (low, high) in enumerate(even_ranges(4)))
    assert [partitions.segment_for(p).segment_id for p, _ in GOLDEN] == [1, 2, 3, 1, 0, 2]
    with pytest.raises(ValueError, match="contiguous"):
        Partitions([SegmentRange(0, 0.0, 0.5), SegmentRange(1, 0.6, 1.0)])


def test_names_of_tables_and_their_segments() -> None:
    assert table_segment_name("sc", "t", (3 << 32) | 7) == "sc/t_kvtable/7.#epoch.3"
    assert validate_kvt_name("a.b-C9") == "a.b-C9"
    for bad in ("", "a_b", "_a", ".a", "a/b", "x" * 248):
        with pytest.raises(InvalidModelError, match="key-value table"):
            validate_kvt_name(bad)
    assert kvt_of_stream("t_kvtable") == "t"
    assert [kvt_of_stream(s) for s in ("t", "_kvtable", "a_b_kvtable", "_RGg_kvtable")] == [None] * 4


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"partition_count": 0, "primary_key_length": 1}, "partition_count"),
        ({"partition_count": 1025, "primary_key_length": 1}, "partition_count"),
        ({"partition_count": 1, "primary_key_length": 0}, "primary_key_length"),
        ({"partition_count": 1, "primary_key_length": 1, "secondary_key_length": -1}, "secondary_key_length"),
        ({"partition_count": 1, "primary_key_length": 250, "secondary_key_length": 7}, "at most 256"),
        ({"partition_count": 1, "primary_key_length": 1, "rollover_size_bytes": -1}, "rollover_size_bytes"),
    ],
)
def test_a_bad_configuration_names_the_field(fields: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidModelError, match=message):
        KeyValueTableConfiguration(**fields)


def test_configuration_through_the_proto_and_a_bad_one_names_the_wire_field() -> None:
    config = KeyValueTableConfiguration(3, 16, 8, rollover_size_bytes=4096)
    msg = kvt_config_to_proto("sc", "t", config)
    assert (msg.scope, msg.kvtName) == ("sc", "t")
    assert kvt_config_from_proto(msg) == config
    with pytest.raises(InvalidModelError, match=r"KeyValueTableConfig\.primaryKeyLength/secondaryKeyLength"):
        kvt_config_from_proto(pb.KeyValueTableConfig(partitionCount=1, primaryKeyLength=200, secondaryKeyLength=100))


def test_versions_print_as_java_does_and_say_whether_they_condition() -> None:
    version = Version(4294967297, 123)
    assert str(version) == "4294967297:123" and Version.from_string("4294967297:123") == version
    assert str(NOT_EXISTS) == f"{-(2**63)}:-1" and Version.from_string(str(NO_VERSION)) == NO_VERSION
    assert NOT_EXISTS.is_condition and version.is_condition and not NO_VERSION.is_condition
    for bad in ("1", "a:b", "1:2:3"):
        with pytest.raises(InvalidModelError, match="version"):
            Version.from_string(bad)


def test_the_key_after_a_key_in_unsigned_byte_order() -> None:
    assert key_after(b"\x00\x00") == b"\x00\x01"
    assert key_after(b"\x00\xff") == b"\x01\x00"
    assert key_after(b"a\xff\xff") == b"b\x00\x00"
    assert key_after(b"\xff\xff") is None
