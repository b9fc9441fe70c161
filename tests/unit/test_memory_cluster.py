"""The transport seam end to end (issue 27 item 3, the ground of issue 28): real
``Broker`` nodes listening on an in-memory network (hightide.aio.memory_transport), and
hightide's own admin client reaching them over it — every node in one process and one
event loop, no socket opened (``socket.socket`` fails for the whole test)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from hightide.aio.memory_transport import MemoryNetwork
from hightide.client import AdminClient
from hightide.client.types import NewTopic
from hightide.config import BrokerConfig
from hightide.log.data_dir import format_dir
from hightide.log.storage import POSIX, Storage
from hightide.log.storage_memory import MemoryStorage
from hightide.protocol.records import build_batch, decode_records
from hightide.server import connection as server_connection
from hightide.server import zero_copy
from hightide.server.broker import Broker

TIMEOUT_S = 60.0
CLUSTER_ID = "c2VhbS10ZXN0LWNsdXN0ZXI"


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch):
    """Every socket created after this fails (the event loop's own self-pipe is made
    before: ``arm()`` is called inside the loop)."""
    def arm() -> None:
        def refuse(self, *args, **kwargs):
            raise AssertionError("a socket was opened")
        monkeypatch.setattr(socket.socket, "__init__", refuse)
    return arm


def run(coro) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT_S):
            await coro
    asyncio.run(bounded())


def config(settings: dict[str, object] | None = None) -> BrokerConfig:
    cfg = BrokerConfig()
    for name, value in (settings or {}).items():
        cfg.set(name, value)
    return cfg


async def produce_and_fetch(admin: AdminClient, topic: str, values: list[bytes]) -> list[bytes]:
    batch = build_batch([(None, v, [], 1_700_000_000_000 + i) for i, v in enumerate(values)])
    offsets = await admin.produce({(topic, 0): batch})
    assert offsets == {(topic, 0): 0}
    got: list[bytes] = []
    offset = 0
    while len(got) < len(values):
        result = await admin.fetch((topic, 0), offset)
        records = decode_records(result.records) if result.records else []
        got += [bytes(r.value) for r in records]
        offset = records[-1].offset + 1 if records else offset
    return got


@pytest.mark.parametrize("storage", ["memory", "posix"])
def test_a_broker_on_the_memory_network_serves_hightides_client_without_a_socket(
        tmp_path: Path, no_sockets, storage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine: Storage = MemoryStorage() if storage == "memory" else POSIX
    # 200 KB of values: on POSIX the Fetch answer holds a file region (zero-copy on a
    # socket); with no socket under the connection it is read and copied instead
    values = [bytes([i]) * 20_000 for i in range(10)]
    copied: list[int] = []

    def remainder(buffers, index, start):
        copied.append(sum(len(b) for b in buffers))
        return zero_copy.remainder(buffers, index, start)
    monkeypatch.setattr(server_connection, "remainder", remainder)

    async def main() -> None:
        no_sockets()
        net = MemoryNetwork()
        broker = Broker(config(), data_dir=str(tmp_path / "data"), listen=("127.0.0.1", 0), storage=engine,
                        transport=net.transport("127.0.0.1"))
        async with broker:
            assert broker.port > 0 and ("127.0.0.1", broker.port) in net.listeners
            async with AdminClient(f"127.0.0.1:{broker.port}", transport=net.transport("10.0.0.7"),
                                   request_timeout_s=20) as admin:
                await admin.create_topics([NewTopic("seam", 1, 1)])
                assert await produce_and_fetch(admin, "seam", values) == values
                assert {c.peer.split(":")[0] for c in broker.listeners.connections} == {"10.0.0.7"}
        assert not net.listeners and not net.connections
    run(main())
    if storage == "posix":  # the file region was read into bytes, not sent with sendfile
        assert copied and max(copied) > 150_000


@pytest.mark.parametrize("voters, storage", [(1, "memory"), (3, "posix")])
def test_controllers_and_two_brokers_replicate_over_the_memory_network(tmp_path: Path, no_sockets, voters: int,
                                                                       storage: str) -> None:
    """Cluster mode in one process: one controller (or a quorum of three voters electing
    a leader through Raft), two brokers registering with it, a topic with two replicas,
    acks=all produce (the follower fetches from the leader over the network) and a
    fetch. The quorum runs on POSIX storage: its quorum-state is not written through
    the Storage seam yet (issue 27 item 3), so a voter on MemoryStorage would not find
    the voter set its dir was formatted with."""
    def engine() -> Storage:
        return MemoryStorage() if storage == "memory" else POSIX

    async def main() -> None:
        no_sockets()
        net = MemoryNetwork()
        ids = [3000 + i for i in range(voters)]
        common: dict[str, object] = {
            "controller.quorum.voters": ",".join(f"{c}@127.0.0.1:{c + 6093}" for c in ids),  # 9093, 9094, ...
            "controller.listener.names": "CONTROLLER",
            "broker.heartbeat.interval.ms": 100, "broker.session.timeout.ms": 3000}
        controllers = []
        for cid in ids:
            data_dir, disk = str(tmp_path / f"c{cid}"), engine()
            if voters > 1:  # a quorum's dirs are formatted together (`hightide storage format`)
                format_dir(data_dir, cluster_id=CLUSTER_ID, node_id=cid, voters=ids, storage=disk)
            controllers.append(Broker(config({"node.id": cid, "process.roles": "controller",
                                              "listeners": f"CONTROLLER://127.0.0.1:{cid + 6093}", **common}),
                                      data_dir=data_dir, storage=disk, transport=net.transport()))
        brokers = [Broker(config({"node.id": i, "process.roles": "broker",
                                  "listeners": f"PLAINTEXT://127.0.0.1:{9092 - 10 * i}",
                                  "advertised.listeners": f"PLAINTEXT://127.0.0.1:{9092 - 10 * i}", **common}),
                          data_dir=str(tmp_path / f"b{i}"), storage=engine(), transport=net.transport())
                   for i in (0, 1)]
        nodes = [*brokers, *controllers]
        try:
            await asyncio.gather(*(c.start() for c in controllers))
            await asyncio.gather(*(b.start() for b in brokers))
            async with AdminClient("127.0.0.1:9092", transport=net.transport("10.0.0.7"),
                                   request_timeout_s=30) as admin:
                while len((await admin.describe_cluster(include_fenced=False)).brokers) < 2:
                    await asyncio.sleep(0.05)
                await admin.create_topics([NewTopic("replicated", 1, 2)])
                values = [b"a" * 100, b"b" * 100, b"c" * 100]
                assert await produce_and_fetch(admin, "replicated", values) == values
                leader = (await admin.describe_topics(["replicated"]))["replicated"].partitions[0].leader
                follower = brokers[1 - leader]
                while (log := follower.logs.get(("replicated", 0)) if follower.logs else None) is None \
                        or log.log_end_offset < 3:  # the follower fetched the records from the leader
                    await asyncio.sleep(0.05)
                quorum = await admin.describe_metadata_quorum()
                assert quorum.leader_id in ids and len(quorum.voters) == voters
        finally:
            for node in nodes:
                await node.stop()
        assert not net.connections and not net.listeners
    run(main())
