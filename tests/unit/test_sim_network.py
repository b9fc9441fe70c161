"""The simulated network: FIFO pipes with delays, partitions that hold bytes, resets,
killed nodes, and delivery in the receiving node's context."""

from __future__ import annotations

import asyncio
import random

import pytest

from hightide.sim.loop import NODE, SimLoop
from hightide.sim.network import SimNetwork


class Echo(asyncio.Protocol):
    seen: list[tuple[object, bytes]] = []

    def connection_made(self, transport):
        self.t = transport

    def data_received(self, data):
        Echo.seen.append((NODE.get(), data))
        self.t.write(data.upper())


class Collect(asyncio.Protocol):
    def __init__(self):
        self.data = b""
        self.lost: list[object] = []

    def connection_made(self, transport):
        self.t = transport

    def data_received(self, data):
        self.data += data

    def connection_lost(self, exc):
        self.lost.append(exc)


def sim(main):
    loop = SimLoop(start_s=0.0)
    net = SimNetwork(loop, random.Random(7))
    try:
        return loop.run_until_complete(main(loop, net))
    finally:
        loop.close()


async def server_node(loop, net, node_id=1):
    run, ctx = loop.node_context(node_id)
    fut = loop.create_future()

    async def start():
        fut.set_result(await net.listen(Echo, f"n{node_id}", 9092))
    loop.create_task(start(), context=ctx)
    await fut
    return run


def test_bytes_arrive_in_order_in_the_receivers_context():
    async def main(loop, net):
        Echo.seen = []
        run = await server_node(loop, net)
        _, client = await net.connect(Collect, "n1", 9092)
        for i in range(50):
            client.t.write(b"m%d;" % i)
        await asyncio.sleep(1)
        return run, client.data
    run, data = sim(main)
    assert data == b"".join(b"M%d;" % i for i in range(50))
    assert all(node is run for node, _ in Echo.seen)


def test_a_partition_holds_bytes_until_it_heals_and_a_new_connect_hangs():
    async def main(loop, net):
        await server_node(loop, net)
        _, client = await net.connect(Collect, "n1", 9092)
        net.partition({1000}, {1})
        client.t.write(b"held")
        await asyncio.sleep(10)
        during = client.data
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5):
                await net.connect(Collect, "n1", 9092)
        net.heal()
        await asyncio.sleep(1)
        return during, client.data
    during, after = sim(main)
    assert during == b"" and after == b"HELD"


def test_a_killed_node_refuses_connects_and_its_peers_see_the_close():
    async def main(loop, net):
        run = await server_node(loop, net)
        _, client = await net.connect(Collect, "n1", 9092)
        loop.kill(run)
        net.node_killed(run)
        await asyncio.sleep(1)
        with pytest.raises(ConnectionRefusedError):
            await net.connect(Collect, "n1", 9092)
        return client.lost
    lost = sim(main)
    assert len(lost) == 1


def test_sever_resets_both_ends():
    async def main(loop, net):
        await server_node(loop, net)
        _, client = await net.connect(Collect, "n1", 9092)
        await asyncio.sleep(0.1)
        assert net.sever(1) == 1
        await asyncio.sleep(0.1)
        return client.lost
    lost = sim(main)
    assert len(lost) == 1 and isinstance(lost[0], ConnectionResetError)


def test_a_paused_node_reads_nothing_until_resumed():
    async def main(loop, net):
        run = await server_node(loop, net)
        _, client = await net.connect(Collect, "n1", 9092)
        await asyncio.sleep(0.1)
        loop.pause(run)
        client.t.write(b"x")
        await asyncio.sleep(30)
        during = client.data
        loop.resume(run)
        await asyncio.sleep(0.1)
        return during, client.data
    assert sim(main) == (b"", b"X")
