"""Transactional offset commits in the group coordinator over a real ``__consumer_offsets``
log: TxnOffsetCommit's offsets are appended as a transactional batch of the producer and
stay pending (invisible to OffsetFetch) until the transaction's marker reaches the
partition (COMMIT: visible; ABORT: dropped), across transactions and epochs of one
producer, and a reload from the log rebuilds exactly that (Kafka's
pendingTransactionalOffsetCommits)."""

from __future__ import annotations

import asyncio

from hightide.group.offsets import CommitRequest
from hightide.group.shard import CoordinatorResult
from hightide.protocol.errors import ErrorCode
from hightide.coordinator.service import returning
from hightide.coordinator.groups import GroupRuntime
from hightide.txn.batch import TxnBatch
from tests.unit.test_coordinator_runtime import T0, FakeBroker, env_of

GROUP = "g"
PID = 5


def _runtime(broker: FakeBroker) -> GroupRuntime:
    groups = GroupRuntime(env_of(broker))
    groups.runtime.load([0], now=True)
    return groups


async def _txn_commit(groups: GroupRuntime, epoch: int, offset: int) -> None:
    commit = CommitRequest("t", 0, offset)
    group_error, errors = await groups.execute(GROUP, lambda s: s.txn_commit_offsets(
        GROUP, PID, epoch, -1, "", None, [commit], T0, lambda t, p: True), T0)
    assert (group_error, errors) == (ErrorCode.none, {("t", 0): ErrorCode.none})


async def _marker(groups: GroupRuntime, epoch: int, commit: bool) -> None:
    await groups.runtime.write(0, returning(CoordinatorResult(txn_batch=TxnBatch(PID, epoch, commit))), T0)


def _fetched(groups: GroupRuntime) -> tuple[int, bool]:
    shard = groups.shard_for(GROUP)
    return shard.fetch_offsets(GROUP, [("t", 0)])[0].offset, shard.has_pending_offsets(GROUP, ("t", 0))


def test_pending_until_the_marker_across_transactions_epochs_and_reloads(tmp_path):
    broker = FakeBroker(tmp_path)
    groups = _runtime(broker)

    async def scenario() -> None:
        await _txn_commit(groups, 0, 10)
        assert _fetched(groups) == (-1, True)  # pending: not visible
        await _marker(groups, 0, False)
        assert _fetched(groups) == (-1, False)  # aborted: dropped
        await _txn_commit(groups, 0, 20)  # the next transaction of the same epoch
        await _txn_commit(groups, 0, 21)  # twice in one transaction: the last wins
        await _marker(groups, 0, True)
        assert _fetched(groups) == (21, False)
        await _txn_commit(groups, 1, 30)  # a bumped epoch
        await _marker(groups, 1, True)
        assert _fetched(groups) == (30, False)
        await _txn_commit(groups, 1, 40)  # left open across the reload
        assert _fetched(groups) == (30, True)

    asyncio.run(scenario())
    reloaded = _runtime(broker)
    assert _fetched(reloaded) == (30, True)

    async def after() -> None:
        await _marker(reloaded, 1, True)

    asyncio.run(after())
    assert _fetched(reloaded) == (40, False)
    assert _fetched(_runtime(broker)) == (40, False)


def test_require_stable_answers_unstable_offset_commit_while_pending(tmp_path):
    """KIP-447: OffsetFetch with require_stable gets UNSTABLE_OFFSET_COMMIT for a partition
    whose offset is pending in a transaction; without it, the last committed offset."""
    groups = _runtime(FakeBroker(tmp_path))

    async def scenario() -> None:
        await _txn_commit(groups, 0, 10)
        await _marker(groups, 0, True)
        await _txn_commit(groups, 0, 20)
        shard = groups.shard_for(GROUP)
        stable = shard.fetch_offsets(GROUP, [("t", 0), ("t", 1)], require_stable=True)
        assert [(f.offset, f.error_code) for f in stable] == [(-1, ErrorCode.unstable_offset_commit),
                                                             (-1, ErrorCode.none)]
        assert shard.fetch_offsets(GROUP, [("t", 0)])[0].offset == 10
        await _marker(groups, 0, True)
        again = groups.shard_for(GROUP).fetch_offsets(GROUP, [("t", 0)], require_stable=True)[0]
        assert (again.offset, again.error_code) == (20, ErrorCode.none)

    asyncio.run(scenario())


async def _plain_commit(groups: GroupRuntime, offset: int) -> None:
    group_error, _ = await groups.execute(GROUP, lambda s: s.commit_offsets(
        GROUP, -1, "", [CommitRequest("t", 0, offset)], T0, lambda t, p: True), T0)
    assert group_error == ErrorCode.none


async def _other_txn_commit(groups: GroupRuntime, pid: int, offset: int) -> None:
    group_error, _ = await groups.execute(GROUP, lambda s: s.txn_commit_offsets(
        GROUP, pid, 0, -1, "", None, [CommitRequest("t", 0, offset)], T0, lambda t, p: True), T0)
    assert group_error == ErrorCode.none


def test_the_commit_later_in_the_log_wins_as_in_kafka(tmp_path):
    """A plain OffsetCommit written after a transaction's offset is kept when the
    transaction commits; of two transactions, the offset written later wins whichever
    commits first; a reload decides the same."""
    broker = FakeBroker(tmp_path)
    groups = _runtime(broker)

    async def scenario() -> None:
        await _txn_commit(groups, 0, 10)
        await _plain_commit(groups, 15)  # later in the log than the pending 10
        await _marker(groups, 0, True)
        assert _fetched(groups) == (15, False)
        await _txn_commit(groups, 0, 20)  # producer 5, earlier in the log
        await _other_txn_commit(groups, 6, 30)  # producer 6, later
        await groups.runtime.write(0, returning(CoordinatorResult(txn_batch=TxnBatch(6, 0, True))), T0)
        await _marker(groups, 0, True)  # commits after, but was written before: 30 stays
        assert _fetched(groups) == (30, False)

    asyncio.run(scenario())
    assert _fetched(_runtime(broker)) == (30, False)
