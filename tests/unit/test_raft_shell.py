"""The Raft shell (node/raft_shell.py) without sockets: a fake quorum-state store and
fsync whose completion the test controls, a fake transport, and an in-memory network
of three shells (real asyncio time, short Raft timeouts).

The shell's two safety rules are checked directly: nothing the core sends after a
PersistElection leaves before that write is durable, and FlushDone is fed back in the
order the flushes were asked even when the fsyncs finish out of order. Then: a quorum
of three shells elects a leader, a metadata write commits on the leader and is applied
to every voter's image, a non-leader refuses writes with NOT_CONTROLLER, a leader cut
off from the others loses its write with an unknown outcome (REQUEST_TIMED_OUT) and a
new leader takes over; a restarted voter keeps its epoch and starts from an empty image.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hightide.cluster.broker_records import NoOpRecord
from hightide.cluster.controller import Controller, NewTopic
from hightide.cluster.metadata_log import MetadataLog
from hightide.cluster.records import encode
from hightide.cluster.raft import ElectionState, RaftConfig
from hightide.cluster.raft import messages as m
from hightide.cluster.raft.wire import leader_change_batch, read_leader_change
from hightide.config import BrokerConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, iter_headers
from hightide.coordinator.runtime import CoordinatorUnavailable
from hightide.node.metadata_runtime import RaftMetadataRuntime
from hightide.node.quorum_state import QuorumStateError, QuorumStateStore
from hightide.node.raft_shell import RaftShell
from hightide.node.snapshotter import Snapshotter, install_snapshot
from tests.waiting import async_wait_until

VOTERS = (1, 2, 3)
FAST = RaftConfig(election_timeout_ms=60, fetch_timeout_ms=300, election_backoff_max_ms=60,
                  request_timeout_ms=300, retry_backoff_ms=5, fetch_max_wait_ms=50,
                  leader_change_payload=leader_change_batch)


class FakeStore:
    """The quorum-state file: each write waits until the test releases it (``gate``)."""

    def __init__(self, state: ElectionState | None = None, *, gated: bool = False) -> None:
        self.state = state
        self.gated = gated
        self.pending: list[tuple[ElectionState, asyncio.Future[None]]] = []
        self.written: list[ElectionState] = []

    def read(self) -> ElectionState | None:
        return self.state

    async def awrite(self, state: ElectionState) -> None:
        if self.gated:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.pending.append((state, fut))
            await fut
        self.state = state
        self.written.append(state)

    def release(self) -> None:
        for _, fut in self.pending:
            fut.set_result(None)
        self.pending = []


class FakeFsync:
    """``durable(plog)``: resolved at once, or held until the test resolves it."""

    def __init__(self, *, held: bool = False) -> None:
        self.held = held
        self.pending: list[asyncio.Future[None]] = []

    def __call__(self, plog: PartitionLog) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.held:
            self.pending.append(fut)
        else:
            fut.set_result(None)
        return fut


class Recorder:
    """A transport that records requests and never answers them."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, m.Message]] = []

    async def request(self, dest: int, message: m.Message) -> m.Message:
        self.sent.append((dest, message))
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def close(self) -> None:
        pass


class Net:
    """Routes each shell's requests to the destination shell's ``handle``; ``cut``
    nodes neither send nor receive (a request to or from them fails at once)."""

    def __init__(self) -> None:
        self.shells: dict[int, RaftShell] = {}
        self.cut: set[int] = set()

    def transport(self, src: int) -> Any:
        net = self

        class Transport:
            async def request(self, dest: int, message: m.Message) -> m.Message:
                await asyncio.sleep(0.001)
                shell = net.shells.get(dest)
                if shell is None or src in net.cut or dest in net.cut:
                    raise ConnectionRefusedError(f"{src} -> {dest} cut")
                answer = await shell.handle(src, message)
                if answer is None or src in net.cut or dest in net.cut:
                    raise ConnectionResetError(f"{src} -> {dest}: no answer")
                return answer

            async def close(self) -> None:
                pass
        return Transport()


def make_shell(tmp_path: Path, node_id: int, transport: Any, *, store: FakeStore | None = None,
               fsync: Callable[[PartitionLog], Any] | None = None, config: RaftConfig = FAST,
               voters: tuple[int, ...] = VOTERS) -> RaftShell:
    metadata = MetadataLog(str(tmp_path / f"node-{node_id}"), 0, True)
    return RaftShell(node_id=node_id, voters=voters, metadata=metadata, store=store or FakeStore(),
                     transport=transport, durable=fsync or FakeFsync(), config=config,
                     rng=random.Random(node_id))


def noop_batch() -> bytes:
    return build_batch([(None, encode(NoOpRecord()), [], 0)])


def create(name: str) -> Callable[[Any], Any]:
    controller = Controller(BrokerConfig(), [1])
    return lambda image: controller.create_topics(image, [NewTopic(name, 1, 1)])


# --- the two ordering rules ------------------------------------------------------------

def test_a_vote_leaves_only_after_the_quorum_state_is_durable(tmp_path: Path) -> None:
    async def run() -> None:
        store = FakeStore(gated=True)
        shell = make_shell(tmp_path, 1, Recorder(), store=store)
        shell.start(timer=False)
        answer = asyncio.ensure_future(shell.handle(2, m.VoteRequest(2, 1, 0, 0)))
        for _ in range(5):  # the new epoch, then the vote: each write is held a while
            await async_wait_until(lambda: store.pending or answer.done(), 2, what="a quorum-state write")
            if answer.done():
                break
            await asyncio.sleep(0.03)
            assert not answer.done(), f"answered before the quorum-state write of {store.pending[0][0]} completed"
            store.release()
        reply = await answer
        assert isinstance(reply, m.VoteResponse) and reply.vote_granted and reply.leader_epoch == 1
        assert store.written[-1] == ElectionState(1, 2, -1)
        await shell.close()
    asyncio.run(run())


def test_flush_done_is_fed_in_order_even_when_fsyncs_finish_out_of_order(tmp_path: Path) -> None:
    async def run() -> None:
        fsync = FakeFsync(held=True)
        shell = make_shell(tmp_path, 1, Recorder(), fsync=fsync, voters=(1,))
        shell.start()
        # a lone voter elects itself at start; its LeaderChange is appended once the
        # quorum-state write (off the loop) is done
        await async_wait_until(lambda: fsync.pending, 5, what="the single voter's LeaderChange fsync")
        assert shell.role == "leader" and len(fsync.pending) == 1  # the LeaderChange entry's fsync
        fsync.pending[0].set_result(None)
        await async_wait_until(lambda: shell.is_active, 5, what="active once the LeaderChange is durable")
        writes = [asyncio.ensure_future(shell.append(noop_batch())) for _ in range(2)]
        await async_wait_until(lambda: len(fsync.pending) == 3, 5, what="two more fsyncs asked")
        fsync.pending[2].set_result(None)  # the later fsync finishes first
        await asyncio.sleep(0.05)
        assert shell.core.flushed_end == 1 and not any(w.done() for w in writes)
        fsync.pending[1].set_result(None)
        assert await asyncio.gather(*writes) == [2, 3]
        assert shell.core.flushed_end == 3 and shell.applied_end == 3
        await shell.close()
    asyncio.run(run())


# --- a quorum of three shells ----------------------------------------------------------

async def start_quorum(tmp_path: Path, net: Net) -> dict[int, RaftShell]:
    for i in VOTERS:
        net.shells[i] = make_shell(tmp_path, i, net.transport(i))
    for shell in net.shells.values():
        shell.start()
    await async_wait_until(lambda: any(s.is_active for s in net.shells.values()), 10, what="an active controller")
    return net.shells


def active(net: Net) -> RaftShell:
    return next(s for s in net.shells.values() if s.is_active)


def test_three_shells_elect_commit_everywhere_and_refuse_writes_off_the_leader(tmp_path: Path) -> None:
    async def run() -> None:
        net = Net()
        shells = await start_quorum(tmp_path, net)
        try:
            leader = active(net)
            assert sum(s.role == "leader" for s in shells.values()) == 1
            result, records = await RaftMetadataRuntime(leader).write(0, create("orders"), 1000)
            assert result[0].error_code == ErrorCode.none and records
            assert "orders" in leader.metadata.image.topics  # applied on commit, before the answer
            for s in shells.values():
                await async_wait_until(lambda s=s: "orders" in s.metadata.image.topics, 5,
                                       what=f"the topic applied on {s.node_id}")
            # every voter's log starts with the LeaderChange control batch, and holds the write
            for s in shells.values():
                first = next(iter_headers(bytes(s.plog.read(0, 1 << 20).data)))
                assert first.attributes & 0x20 and first.partition_leader_epoch == leader.epoch
                lc = read_leader_change(bytes(s.plog.read(0, 1 << 20).data)[:first.length + 12])
                assert lc is not None and lc.leader_id == leader.node_id
                assert sorted(v.voter_id for v in lc.voters) == list(VOTERS)
            follower = next(s for s in shells.values() if s is not leader)
            with pytest.raises(CoordinatorUnavailable) as refused:
                await RaftMetadataRuntime(follower).write(0, create("refused"), 1000)
            assert refused.value.error_code == ErrorCode.not_controller
            assert str(leader.node_id) in str(refused.value)
            # an op with no records appends nothing
            end = leader.plog.log_end_offset
            assert (await RaftMetadataRuntime(leader).write(0, lambda image: ("ok", []), 1000)) == ("ok", [])
            assert leader.plog.log_end_offset == end
        finally:
            for s in shells.values():
                await s.close()
    asyncio.run(run())


def test_a_cut_off_leader_loses_its_write_with_an_unknown_outcome_and_a_new_leader_commits(tmp_path: Path) -> None:
    async def run() -> None:
        net = Net()
        shells = await start_quorum(tmp_path, net)
        try:
            old = active(net)
            net.cut.add(old.node_id)
            with pytest.raises(CoordinatorUnavailable) as lost:
                await RaftMetadataRuntime(old).write(0, create("maybe"), 1000)
            assert lost.value.error_code == ErrorCode.request_timed_out  # check-quorum resigned it
            assert old.role != "leader"
            survivors = [s for s in shells.values() if s is not old]
            await async_wait_until(lambda: any(s.is_active for s in survivors), 10, what="a new active controller")
            new = next(s for s in survivors if s.is_active)
            assert new.epoch > old.epoch or new.epoch == old.core.epoch
            await RaftMetadataRuntime(new).write(0, create("after"), 1000)
            net.cut.clear()
            # the old leader rejoins as a follower: its uncommitted "maybe" is truncated
            await async_wait_until(lambda: "after" in old.metadata.image.topics, 10, what="the old leader catching up")
            assert "maybe" not in old.metadata.image.topics
            assert all("maybe" not in s.metadata.image.topics for s in shells.values())
        finally:
            for s in shells.values():
                await s.close()
    asyncio.run(run())


def test_a_restarted_voter_keeps_its_epoch_and_applies_only_what_commits(tmp_path: Path) -> None:
    async def run() -> None:
        net = Net()
        shells = await start_quorum(tmp_path, net)
        leader = active(net)
        await RaftMetadataRuntime(leader).write(0, lambda image: (None, [NoOpRecord()]), 1000)
        follower = next(s for s in shells.values() if s is not leader)
        await async_wait_until(lambda: follower.applied_end == leader.applied_end, 5, what="the follower applied")
        epoch, store = follower.epoch, follower.store
        await follower.close()
        follower.metadata.close()
        net.shells.pop(follower.node_id)
        restarted = RaftShell(node_id=follower.node_id, voters=VOTERS,
                              metadata=MetadataLog(str(tmp_path / f"node-{follower.node_id}"), 0, True),
                              store=store, transport=net.transport(follower.node_id), durable=FakeFsync(),
                              config=FAST, rng=random.Random(9))
        assert restarted.epoch == epoch and restarted.core.log.end_offset == leader.plog.log_end_offset
        assert restarted.applied_end == 0 and not restarted.metadata.image.brokers  # nothing applied yet
        net.shells[restarted.node_id] = restarted
        restarted.start()
        try:
            await async_wait_until(lambda: restarted.applied_end >= leader.applied_end, 5,
                                   what="the restarted voter applying the committed log")
        finally:
            for s in net.shells.values():
                await s.close()
    asyncio.run(run())


# --- the quorum-state file -------------------------------------------------------------

def test_the_quorum_state_file_is_kafkas_json_written_atomically(tmp_path: Path) -> None:
    store = QuorumStateStore(str(tmp_path), [3002, 3000, 3001])
    assert store.read() is None
    store.write(ElectionState(4, 3001, 3001))
    doc = json.loads((tmp_path / "quorum-state").read_text())
    assert doc == {"clusterId": "", "leaderId": 3001, "leaderEpoch": 4, "votedId": 3001, "appliedOffset": 0,
                   "currentVoters": [{"voterId": 3000}, {"voterId": 3001}, {"voterId": 3002}], "data_version": 0}
    assert not (tmp_path / "quorum-state.tmp").exists()
    assert QuorumStateStore(str(tmp_path), [3000]).read() == ElectionState(4, 3001, 3001)
    (tmp_path / "quorum-state").write_text("{not json")
    with pytest.raises(QuorumStateError):
        store.read()


# --- snapshots -------------------------------------------------------------------------

def test_a_snapshot_trims_the_leaders_log_and_a_voter_behind_it_installs_it(tmp_path: Path) -> None:
    async def run() -> None:
        net = Net()
        shells = await start_quorum(tmp_path, net)
        for s in shells.values():
            s.install = lambda sid, data, s=s: install_snapshot(s.metadata, sid, data)
        try:
            leader = active(net)
            lagging = next(s for s in shells.values() if s is not leader)
            net.cut.add(lagging.node_id)
            for name in ("a", "b", "c"):
                await RaftMetadataRuntime(leader).write(0, create(name), 1000)
            snapshotter = Snapshotter(leader.metadata, max_bytes=1, interval_ms=0,
                                      applied_end=lambda: leader.applied_end,
                                      wait_commit=lambda timeout_s: asyncio.sleep(timeout_s),
                                      on_created=leader.snapshot_created)
            leader.on_trim = snapshotter.trim
            sid = await snapshotter.create()
            assert sid is not None and sid.offset == leader.applied_end
            assert leader.plog.log_start_offset == sid.offset == leader.core.log.start_offset
            assert lagging.plog.log_end_offset < sid.offset  # behind the leader's log start
            net.cut.clear()
            await async_wait_until(lambda: lagging.metadata.snapshot_id == sid, 10,
                                   what="the lagging voter installing the leader's snapshot")
            await async_wait_until(lambda: lagging.applied_end >= sid.offset, 5, what="applied to the snapshot")
            assert sorted(lagging.metadata.image.topics) == ["a", "b", "c"]
            await RaftMetadataRuntime(leader).write(0, create("d"), 1000)
            await async_wait_until(lambda: "d" in lagging.metadata.image.topics, 5, what="fetching on after it")
            assert lagging.plog.log_start_offset == sid.offset
        finally:
            for s in shells.values():
                await s.close()
        # a voter restarted on a snapshotted log starts from the snapshot's image
        leader.metadata.close()
        reopened = MetadataLog(str(tmp_path / f"node-{leader.node_id}"), 0, True)
        restarted = RaftShell(node_id=leader.node_id, voters=VOTERS, metadata=reopened, store=leader.store,
                              transport=Recorder(), durable=FakeFsync(), config=FAST)
        assert restarted.applied_end == sid.offset and restarted.core.log.snapshot == sid
        assert sorted(reopened.image.topics) == ["a", "b", "c"]  # "d" is in the log: applied once committed
    asyncio.run(run())


def test_a_lone_voter_elects_itself_at_start_with_one_quorum_state_write(tmp_path: Path) -> None:
    """No election timeout for the only voter, and its candidacy and leadership (queued
    back to back) are one write of the leader state."""
    async def run() -> None:
        store = FakeStore()
        shell = make_shell(tmp_path, 1, Recorder(), store=store, voters=(1,),
                           config=RaftConfig(election_timeout_ms=60_000, leader_change_payload=leader_change_batch))
        shell.start()
        assert shell.role == "leader" and shell.epoch == 1
        await async_wait_until(lambda: shell.is_active, 5, what="active once the LeaderChange is durable")
        assert store.written == [ElectionState(1, 1, 1)]
        await shell.close()
        assert store.written == [ElectionState(1, 1, 1)]  # no resignation to announce
    asyncio.run(run())
