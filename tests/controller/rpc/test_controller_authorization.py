"""The permission table of the controller's RPCs (Pravega's): every RPC has a rule, and the rules name the
resource and permission Pravega's ControllerServiceImpl checks."""

from __future__ import annotations

import pytest

from controller.rpc.authorization import RULES, needs, satisfied
from controller_client.model import InvalidModelError
from controller_client.proto import Controller_pb2 as pb
from segstore_shared.auth.acl import Acl, Permission

pytestmark = pytest.mark.unit

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]
R, RU = Permission.READ, Permission.READ_UPDATE
ACCESS = pb.StreamInfo.AccessOperation
KVT = "prn::/scope:s/key-value-table:k"


def info(scope: str = "s", stream: str = "t", access: int = ACCESS.UNSPECIFIED) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream, accessOperation=access)


def test_every_rpc_of_the_service_has_a_rule() -> None:
    assert {m.name for m in SERVICE.methods} == set(RULES)


@pytest.mark.parametrize(
    ("rpc", "request_", "expected"),
    [
        ("createScope", pb.ScopeInfo(scope="s"), [("prn::/", RU)]),
        ("listScopes", pb.ScopesRequest(), [("prn::/", R)]),
        ("checkScopeExists", pb.ScopeInfo(scope="s"), [("prn::/scope:s", R)]),
        ("listStreamsInScope", pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="s")), [("prn::/scope:s", R)]),
        ("createStream", pb.StreamConfig(streamInfo=info()), [("prn::/scope:s", RU)]),
        (
            "createStream",
            pb.StreamConfig(streamInfo=info(stream="_RGgroup")),
            [("prn::/scope:s/reader-group:group", R)],
        ),
        ("createStream", pb.StreamConfig(streamInfo=info(stream="_MARKt")), [("prn::/scope:s/stream:t", R)]),
        ("sealStream", info(), [("prn::/scope:s/stream:t", RU)]),
        ("truncateStream", pb.StreamCut(streamInfo=info()), [("prn::/scope:s/stream:t", RU)]),
        ("createTransaction", pb.CreateTxnRequest(streamInfo=info()), [("prn::/scope:s/stream:t", RU)]),
        ("getURI", pb.SegmentId(streamInfo=info()), [("prn::/scope:s/stream:t", R)]),
        ("getCurrentSegments", info(), [("prn::/scope:s/stream:t", RU)]),
        ("getCurrentSegments", info(access=ACCESS.NONE), [("prn::/scope:s/stream:t", R)]),
        ("getSegments", pb.GetSegmentsRequest(streamInfo=info(access=ACCESS.NONE)), [("prn::/scope:s/stream:t", R)]),
        ("getDelegationToken", info(access=ACCESS.READ), [("prn::/scope:s/stream:t", R)]),
        ("getDelegationToken", info(), [("prn::/scope:s/stream:t", RU)]),
        ("getDelegationToken", info(stream="_RGg", access=ACCESS.READ), [("prn::/scope:s/reader-group:g", R)]),
        (
            "noteTimestampFromWriter",
            pb.TimestampFromWriter(position=pb.StreamCut(streamInfo=info())),
            [("prn::/scope:s/stream:t", RU)],
        ),
        (
            "createReaderGroup",
            pb.ReaderGroupConfiguration(scope="s", readerGroupName="g"),
            [("prn::/scope:s/reader-group:g", RU)],
        ),
        (
            "updateReaderGroup",
            pb.ReaderGroupConfiguration(scope="s", readerGroupName="g"),
            [("prn::/scope:s/reader-group:g", RU)],
        ),
        ("deleteReaderGroup", pb.ReaderGroupInfo(scope="s", readerGroup="g"), [("prn::/scope:s/reader-group:g", RU)]),
        ("getReaderGroupConfig", pb.ReaderGroupInfo(scope="s", readerGroup="g"), [("prn::/scope:s/reader-group:g", R)]),
        ("getDelegationToken", info(stream="_RGg"), [("prn::/scope:s/reader-group:g", R)]),
        (
            "getKeyValueTableConfiguration",
            pb.KeyValueTableInfo(scope="s", kvtName="k"),
            [("prn::/scope:s/key-value-table:k", R)],
        ),
        ("getControllerServerList", pb.ServerRequest(), []),
    ],
)
def test_rules_name_pravegas_resources_and_permissions(rpc: str, request_: object, expected: list) -> None:
    assert needs(rpc, request_) == expected


def test_the_admin_extensions_rules() -> None:
    assert needs("adminContainerAssignment", b"{}") == [("prn::/", R)]
    assert needs("adminOpenTransactions", b'{"scope": "s", "stream": "t"}') == [("prn::/scope:s/stream:t", R)]
    assert needs("adminScopeContents", b'{"scope": "s"}') == [("prn::/scope:s", R)]
    with pytest.raises(InvalidModelError, match="'scope' must be a string"):
        needs("adminScopeContents", b'{"scope": 1}')


def test_a_token_for_any_access_is_refused_as_invalid() -> None:
    with pytest.raises(InvalidModelError, match="ANY"):
        needs("getDelegationToken", info(access=ACCESS.ANY))


def test_a_reader_of_scope_a_may_read_its_streams_but_not_write_nor_read_b() -> None:
    reader = Acl.parse("prn::/scope:a,READ;prn::/scope:a/*,READ")

    def allowed(rpc: str, request_: object) -> bool:
        return all(satisfied(reader, need) for need in needs(rpc, request_))

    assert allowed("getURI", pb.SegmentId(streamInfo=info("a")))
    assert allowed("getCurrentSegments", info("a", access=ACCESS.NONE))
    assert not allowed("getCurrentSegments", info("a"))  # a writer's view needs READ_UPDATE
    assert not allowed("createTransaction", pb.CreateTxnRequest(streamInfo=info("a")))
    assert not allowed("getDelegationToken", info("a", access=ACCESS.WRITE))
    assert allowed("getDelegationToken", info("a", access=ACCESS.READ))
    assert not allowed("getURI", pb.SegmentId(streamInfo=info("b")))
    assert not allowed("createScope", pb.ScopeInfo(scope="c"))


def test_a_member_of_a_group_may_read_and_write_its_state_but_not_delete_the_group() -> None:
    member = Acl.parse("prn::/scope:s/stream:t,READ;prn::/scope:s/reader-group:g,READ")

    def allowed(rpc: str, request_: object) -> bool:
        return all(satisfied(member, need) for need in needs(rpc, request_))

    state = "g_kvtable"  # the group's table (the official client's and ours)
    assert allowed("getURI", pb.SegmentId(streamInfo=info(stream=state)))
    assert allowed("getDelegationToken", info(stream=state, access=ACCESS.READ))
    assert allowed("getDelegationToken", info(stream=state, access=ACCESS.READ_WRITE))  # positions, checkpoints
    assert allowed("getReaderGroupConfig", pb.ReaderGroupInfo(scope="s", readerGroup="g"))
    assert not allowed("deleteReaderGroup", pb.ReaderGroupInfo(scope="s", readerGroup="g"))
    assert not allowed("updateReaderGroup", pb.ReaderGroupConfiguration(scope="s", readerGroupName="g"))
    assert not allowed("createReaderGroup", pb.ReaderGroupConfiguration(scope="s", readerGroupName="h"))
    assert not allowed("getDelegationToken", info(stream="h_kvtable", access=ACCESS.READ_WRITE))  # another group
    assert not allowed("getDelegationToken", info(access=ACCESS.READ_WRITE))  # the stream itself


def test_a_write_to_a_groups_state_names_both_ways_to_be_allowed() -> None:
    (need,) = needs("getDelegationToken", info(stream="g_kvtable", access=ACCESS.READ_WRITE))
    assert str(need) == (
        "READ_UPDATE on prn::/scope:s/stream:g_kvtable or prn::/scope:s/key-value-table:g "
        "or READ on prn::/scope:s/reader-group:g"
    )
