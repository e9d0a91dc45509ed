"""Controllers sharing the periodic work by buckets (controller.buckets), over the in-process coordination store:
every bucket owned by exactly one live controller, balanced, moved when a controller joins, dies, loses its
session or stops; a count mismatch refused; Java's String.hashCode as Pravega's bucket function."""

from __future__ import annotations

import pytest
from cluster_env import wait_until

from controller.cluster.buckets import BUCKET_OWNERS_PATH, BucketOwnership, bucket_of
from controller.cluster.cluster_manager import ClusterManager
from segstore_shared.coordination.memory_store import MemoryCoordinationServer, MemoryCoordinationStore

pytestmark = pytest.mark.unit

BUCKETS = 8
SETTLE_S = 0.05


class Controller:
    """A controller's cluster parts on its own session: the manager (elects, balances when leading) and its buckets."""

    def __init__(self, zk: MemoryCoordinationServer, port: int, buckets: int = BUCKETS) -> None:
        self.store: MemoryCoordinationStore = zk.connect()
        self.manager = ClusterManager(
            self.store, 4, identity=f"127.0.0.1:{port}", settle_delay_s=SETTLE_S, retry_delay_s=0.05,
            bucket_count=buckets,
        )  # fmt: skip
        self.buckets = BucketOwnership(self.store, "127.0.0.1", port, buckets, retry_delay_s=0.05)

    async def start(self) -> Controller:
        await self.manager.start()
        await self.buckets.start()
        return self

    async def stop(self) -> None:
        await self.buckets.stop()
        await self.manager.stop()


def partitioned(controllers: list[Controller], buckets: int = BUCKETS) -> bool:
    """Every bucket owned by exactly one of ``controllers``, and their loads within one of each other."""
    owned = [c.buckets.owned_buckets() for c in controllers]
    sizes = [len(o) for o in owned]
    return sum(sizes) == buckets and set().union(*owned) == set(range(buckets)) and max(sizes) - min(sizes) <= 1


@pytest.fixture
def zk() -> MemoryCoordinationServer:
    return MemoryCoordinationServer()


def test_bucket_of_is_javas_string_hash_code_modulo_the_count() -> None:
    assert bucket_of("a", "b", 1 << 30) == 94_772  # Java: "a/b".hashCode() == 94772
    assert bucket_of("s", "t", 7) == ((115 * 31 + 47) * 31 + 116) % 7
    # a character outside the BMP counts as its two UTF-16 surrogates, as in Java ("😀" is D83D DE00)
    assert bucket_of("x", "😀", 1 << 31) == ((120 * 31 + 47) * 31 + 0xD83D) * 31 + 0xDE00 & 0x7FFFFFFF
    # Java: "sales/orders".hashCode() == -1849952952, negative: & 0x7fffffff, not abs()
    assert bucket_of("sales", "orders", 1 << 31) == -1_849_952_952 & 0x7FFFFFFF
    assert all(0 <= bucket_of("scope", f"s{i}", 5) < 5 for i in range(100))


async def test_three_controllers_own_every_bucket_once_and_take_over_a_dead_ones(zk: MemoryCoordinationServer) -> None:
    controllers = [await Controller(zk, 9000 + i).start() for i in range(3)]
    try:
        await wait_until(lambda: partitioned(controllers), what="buckets partitioned among three")
        assert {f"{BUCKET_OWNERS_PATH}/{b}" for b in range(BUCKETS)} <= set(zk.snapshot())
        mapping = await controllers[0].buckets.assignment()
        assert {c: frozenset(ids) for c, ids in mapping.items()} == {
            c.buckets.identity: c.buckets.owned_buckets() for c in controllers
        }
        assert sorted(await controllers[1].buckets.members()) == [("127.0.0.1", 9000 + i) for i in range(3)]

        dead = controllers.pop(1)
        held = dead.buckets.owned_buckets()
        kept = [c.buckets.owned_buckets() for c in controllers]
        zk.expire(dead.store)  # kill -9: the session ends, its nodes go
        await wait_until(lambda: partitioned(controllers), what="the survivors own every bucket")
        assert all(before <= c.buckets.owned_buckets() for before, c in zip(kept, controllers, strict=True))
        assert held <= controllers[0].buckets.owned_buckets() | controllers[1].buckets.owned_buckets()
        assert dead.buckets.owned_buckets() == frozenset(), "a controller whose session ended owns nothing"
        assert [c.buckets.departures for c in controllers] == [1, 1]
        await dead.stop()
    finally:
        for controller in controllers:
            await controller.stop()


async def test_a_joining_controller_gets_its_share_and_a_stopping_one_hands_its_buckets_over(
    zk: MemoryCoordinationServer,
) -> None:
    first = await Controller(zk, 9100).start()
    try:
        await wait_until(lambda: partitioned([first]), what="one controller owns all")
        second = await Controller(zk, 9101).start()
        await wait_until(lambda: partitioned([first, second]), what="two controllers share")
        await second.stop()  # releases its owner nodes at once: no session timeout to wait for
        await wait_until(lambda: partitioned([first]), what="the first owns all again")
    finally:
        await first.stop()


async def test_a_lost_session_makes_every_claim_again(zk: MemoryCoordinationServer) -> None:
    controller = await Controller(zk, 9200).start()
    try:
        await wait_until(lambda: partitioned([controller]), what="owns all")
        zk.expire(controller.store, reconnect=True)  # ephemeral nodes gone; a new session at once
        claims = controller.buckets._claims.values()
        await wait_until(lambda: all(c.registrations == 2 for c in claims), what="every bucket claimed anew")
        await wait_until(lambda: partitioned([controller]), what="owns all on the new session")
    finally:
        await controller.stop()


async def test_another_bucket_count_is_refused(zk: MemoryCoordinationServer, caplog: pytest.LogCaptureFixture) -> None:
    first = await Controller(zk, 9300).start()
    try:
        await wait_until(lambda: partitioned([first]), what="owns all")
        other = BucketOwnership(zk.connect(), "127.0.0.1", 9301, BUCKETS + 1)
        await other.start()
        await wait_until(lambda: "bucket_count" in caplog.text, what="the mismatch logged")
        assert "configured with 9 buckets but the cluster (/cluster/bucket-assignment) has 8" in caplog.text
        assert other.owned_buckets() == frozenset()
        await other.stop()
    finally:
        await first.stop()
