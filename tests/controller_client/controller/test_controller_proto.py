"""Controller.proto and its generated code: in sync, and shaped exactly like Pravega's contract."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor

from controller_client.proto import SERVICE_NAME, regenerate
from controller_client.proto import Controller_pb2 as pb
from controller_client.proto import Controller_pb2_grpc as pb_grpc

pytestmark = pytest.mark.unit

PROTO_DIR = Path(regenerate.__file__).parent

# (rpc, request, response) in declaration order, as in Pravega's Controller.proto.
RPCS = [
    ("getControllerServerList", "ServerRequest", "ServerResponse"),
    ("createStream", "StreamConfig", "CreateStreamStatus"),
    ("updateStream", "StreamConfig", "UpdateStreamStatus"),
    ("truncateStream", "StreamCut", "UpdateStreamStatus"),
    ("sealStream", "StreamInfo", "UpdateStreamStatus"),
    ("deleteStream", "StreamInfo", "DeleteStreamStatus"),
    ("getCurrentSegments", "StreamInfo", "SegmentRanges"),
    ("getEpochSegments", "GetEpochSegmentsRequest", "SegmentRanges"),
    ("getSegments", "GetSegmentsRequest", "SegmentsAtTime"),
    ("getSegmentsImmediatlyFollowing", "SegmentId", "SuccessorResponse"),
    ("getSegmentsImmediatelyFollowing", "SegmentId", "SuccessorResponse"),
    ("getSegmentsBetween", "StreamCutRange", "StreamCutRangeResponse"),
    ("scale", "ScaleRequest", "ScaleResponse"),
    ("checkScale", "ScaleStatusRequest", "ScaleStatusResponse"),
    ("getURI", "SegmentId", "NodeUri"),
    ("isSegmentValid", "SegmentId", "SegmentValidityResponse"),
    ("isStreamCutValid", "StreamCut", "StreamCutValidityResponse"),
    ("createTransaction", "CreateTxnRequest", "CreateTxnResponse"),
    ("commitTransaction", "TxnRequest", "TxnStatus"),
    ("abortTransaction", "TxnRequest", "TxnStatus"),
    ("pingTransaction", "PingTxnRequest", "PingTxnStatus"),
    ("checkTransactionState", "TxnRequest", "TxnState"),
    ("listCompletedTransactions", "ListCompletedTxnRequest", "ListCompletedTxnResponse"),
    ("createScope", "ScopeInfo", "CreateScopeStatus"),
    ("listScopes", "ScopesRequest", "ScopesResponse"),
    ("checkScopeExists", "ScopeInfo", "ExistsResponse"),
    ("checkStreamExists", "StreamInfo", "ExistsResponse"),
    ("listStreamsInScope", "StreamsInScopeRequest", "StreamsInScopeResponse"),
    ("deleteScope", "ScopeInfo", "DeleteScopeStatus"),
    ("deleteScopeRecursive", "ScopeInfo", "DeleteScopeStatus"),
    ("getDelegationToken", "StreamInfo", "DelegationToken"),
    ("removeWriter", "RemoveWriterRequest", "RemoveWriterResponse"),
    ("noteTimestampFromWriter", "TimestampFromWriter", "TimestampResponse"),
    ("createKeyValueTable", "KeyValueTableConfig", "CreateKeyValueTableStatus"),
    ("getCurrentSegmentsKeyValueTable", "KeyValueTableInfo", "SegmentRanges"),
    ("listKeyValueTablesInScope", "KVTablesInScopeRequest", "KVTablesInScopeResponse"),
    ("getKeyValueTableConfiguration", "KeyValueTableInfo", "KeyValueTableConfigResponse"),
    ("deleteKeyValueTable", "KeyValueTableInfo", "DeleteKVTableStatus"),
    ("listSubscribers", "StreamInfo", "SubscribersResponse"),
    ("updateSubscriberStreamCut", "SubscriberStreamCut", "UpdateSubscriberStatus"),
    ("createReaderGroup", "ReaderGroupConfiguration", "CreateReaderGroupResponse"),
    ("getReaderGroupConfig", "ReaderGroupInfo", "ReaderGroupConfigResponse"),
    ("deleteReaderGroup", "ReaderGroupInfo", "DeleteReaderGroupStatus"),
    ("updateReaderGroup", "ReaderGroupConfiguration", "UpdateReaderGroupResponse"),
    ("getStreamConfiguration", "StreamInfo", "StreamConfig"),
    ("listStreamsInScopeForTag", "StreamsInScopeWithTagRequest", "StreamsInScopeResponse"),
    ("getControllerToBucketMapping", "ControllerToBucketMappingRequest", "ControllerToBucketMappingResponse"),
]

PACKAGE = "io.pravega.controller.stream.api.grpc.v1"
F = FieldDescriptor
_INT32, _INT64, _DOUBLE, _STRING, _MSG, _ENUM = (
    F.TYPE_INT32,
    F.TYPE_INT64,
    F.TYPE_DOUBLE,
    F.TYPE_STRING,
    F.TYPE_MESSAGE,
    F.TYPE_ENUM,
)

# message -> [(field, number, type, repeated)], values read from Pravega's Controller.proto.
FIELDS = {
    "StreamConfig": [
        ("streamInfo", 1, _MSG, False),
        ("scalingPolicy", 2, _MSG, False),
        ("retentionPolicy", 3, _MSG, False),
        ("tags", 4, _MSG, False),
        ("timestampAggregationTimeout", 5, _INT64, False),
        ("rolloverSizeBytes", 6, _INT64, False),
    ],
    "SegmentRange": [("segmentId", 1, _MSG, False), ("minKey", 2, _DOUBLE, False), ("maxKey", 3, _DOUBLE, False)],
    "TxnId": [("highBits", 1, _INT64, False), ("lowBits", 2, _INT64, False)],
    "ReaderGroupConfiguration": [
        ("scope", 1, _STRING, False),
        ("readerGroupName", 2, _STRING, False),
        ("groupRefreshTimeMillis", 3, _INT64, False),
        ("automaticCheckpointIntervalMillis", 4, _INT64, False),
        ("maxOutstandingCheckpointRequest", 5, _INT32, False),
        ("retentionType", 6, _INT32, False),
        ("generation", 7, _INT64, False),
        ("readerGroupId", 8, _STRING, False),
        ("startingStreamCuts", 9, _MSG, True),
        ("endingStreamCuts", 10, _MSG, True),
        ("rolloverSizeBytes", 11, _INT64, False),
    ],
    "ScaleRequest": [
        ("streamInfo", 1, _MSG, False),
        ("sealedSegments", 2, _INT64, True),
        ("newKeyRanges", 3, _MSG, True),
        ("scaleTimestamp", 4, _INT64, False),
    ],
    "ScaleRequest.KeyRangeEntry": [("start", 1, _DOUBLE, False), ("end", 2, _DOUBLE, False)],
    "ScalingPolicy": [
        ("scaleType", 1, _ENUM, False),
        ("targetRate", 2, _INT32, False),
        ("scaleFactor", 3, _INT32, False),
        ("minNumSegments", 4, _INT32, False),
    ],
    "StreamInfo": [("scope", 1, _STRING, False), ("stream", 2, _STRING, False), ("accessOperation", 3, _ENUM, False)],
}

ENUMS = {
    "UpdateStreamStatus.Status": {
        "SUCCESS": 0,
        "FAILURE": 1,
        "STREAM_NOT_FOUND": 2,
        "SCOPE_NOT_FOUND": 3,
        "STREAM_SEALED": 4,
    },
    "PingTxnStatus.Status": {
        "OK": 0,
        "LEASE_TOO_LARGE": 1,
        "MAX_EXECUTION_TIME_EXCEEDED": 2,
        "SCALE_GRACE_TIME_EXCEEDED": 3,
        "DISCONNECTED": 4,
        "COMMITTED": 5,
        "ABORTED": 6,
        "UNKNOWN": 7,
    },
    "RetentionPolicy.RetentionPolicyType": {"UNKNOWN": 0, "TIME": 1, "SIZE": 2},
    "TxnState.State": {"UNKNOWN": 0, "OPEN": 1, "COMMITTING": 2, "COMMITTED": 3, "ABORTING": 4, "ABORTED": 5},
}


def _message(path: str) -> Any:
    outer, _, inner = path.partition(".")
    descriptor = pb.DESCRIPTOR.message_types_by_name[outer]
    return descriptor.nested_types_by_name[inner] if inner else descriptor


def test_regenerating_reproduces_the_committed_files_byte_for_byte(tmp_path: Path) -> None:
    committed_grpc = (PROTO_DIR / "Controller_pb2_grpc.py").read_text(encoding="utf-8")
    generated_with = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", committed_grpc)
    assert generated_with is not None
    installed = metadata.version("grpcio-tools")
    assert installed == generated_with.group(1), (
        f"the committed code was generated by grpcio-tools {generated_with.group(1)}, installed is {installed}: "
        "pyproject pins the version the code was generated with; change both together"
    )
    written = regenerate.generate(tmp_path)
    assert [p.name for p in written] == list(regenerate.GENERATED_FILES)
    for path in written:
        assert path.read_bytes() == (PROTO_DIR / path.name).read_bytes(), f"{path.name} differs: regenerate it"
    assert "from . import Controller_pb2 as Controller__pb2" in (tmp_path / "Controller_pb2_grpc.py").read_text()


def test_regenerate_rejects_a_proto_that_does_not_compile(tmp_path: Path) -> None:
    broken = tmp_path / "src"
    broken.mkdir()
    (broken / "Controller.proto").write_text('syntax = "proto3";\nmessage X { int64 }\n', encoding="utf-8")
    with pytest.raises(regenerate.RegenerationError):
        regenerate.generate(tmp_path / "out", proto_dir=broken)


def test_package_and_service_name_are_pravegas() -> None:
    assert pb.DESCRIPTOR.package == PACKAGE
    service = pb.DESCRIPTOR.services_by_name["ControllerService"]
    assert service.full_name == SERVICE_NAME == f"{PACKAGE}.ControllerService"


def test_service_has_every_rpc_with_its_types_in_order() -> None:
    service = pb.DESCRIPTOR.services_by_name["ControllerService"]
    actual = [(m.name, m.input_type.full_name, m.output_type.full_name) for m in service.methods]
    expected = [(name, f"{PACKAGE}.{req}", f"{PACKAGE}.{resp}") for name, req, resp in RPCS]
    assert actual == expected
    for name, _, _ in RPCS:
        assert callable(getattr(pb_grpc.ControllerServiceServicer, name))


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_field_numbers_and_types_match_pravega(message: str) -> None:
    descriptor = _message(message)
    actual = [(f.name, f.number, f.type, f.is_repeated) for f in descriptor.fields]
    assert actual == FIELDS[message]


@pytest.mark.parametrize("enum_path", sorted(ENUMS))
def test_enum_values_match_pravega(enum_path: str) -> None:
    message, _, enum_name = enum_path.rpartition(".")
    enum = _message(message).enum_types_by_name[enum_name]
    assert {v.name: v.number for v in enum.values} == ENUMS[enum_path]


def test_stream_cut_maps_are_int64_to_int64() -> None:
    for message, field in (("StreamCut", "cut"), ("StreamCutRange", "from"), ("StreamCutRange", "to")):
        entry = _message(message).fields_by_name[field].message_type
        assert entry.GetOptions().map_entry
        assert [(f.name, f.type) for f in entry.fields] == [("key", _INT64), ("value", _INT64)]


def _compiled(proto_dir: Path, tmp_path: Path, name: str) -> descriptor_pb2.FileDescriptorProto:
    out = tmp_path / f"{name}.pb"
    from grpc_tools import protoc

    assert protoc.main(["protoc", f"--proto_path={proto_dir}", f"--descriptor_set_out={out}", "Controller.proto"]) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file[0]


def _without_json_names(messages: Any) -> None:
    """protoc adds ``json_name`` to every field of a descriptor set; generated code leaves them out."""
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _without_json_names(message.nested_type)


def test_proto_source_compiles_to_the_descriptor_in_the_generated_code(tmp_path: Path) -> None:
    embedded = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    compiled = _compiled(PROTO_DIR, tmp_path, "ours")
    _without_json_names(compiled.message_type)
    assert compiled == embedded
