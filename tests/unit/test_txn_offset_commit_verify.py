"""TxnOffsetCommit whose transaction coordinator is on another broker (issue 26 item 6):
the group coordinator asks that broker (KIP-890 verification, AddPartitionsToTxn
verify_only) and holds the request until it answers, as Kafka's
``scheduleTransactionalWriteOperation`` does, instead of answering
COORDINATOR_NOT_AVAILABLE while the question runs in the background. The wait is bounded
(no answer in time: COORDINATOR_LOAD_IN_PROGRESS, Kafka's NETWORK_EXCEPTION normalized),
refusals are answered as Kafka's group coordinator answers them, and a stopping
transaction coordinator answers a held request at once.

The handler runs for real: a :class:`GroupRuntime` over a real ``__consumer_offsets`` log,
and a :class:`TransactionCoordinator` in cluster mode whose ``__transaction_state``
partition is led by broker 2, with the network call to broker 2 replaced by a fake
coordinator that answers after a delay."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from hightide.cluster.image import MetadataImage, PartitionImage, TopicImage
from hightide.node.inter_broker import InterBroker
from hightide.protocol.codec import request_schema
from hightide.protocol.build import materialize
from hightide.protocol.errors import ErrorCode
from hightide.coordinator.groups import GroupRuntime
from hightide.server.handlers import txn_offset_commit
from hightide.coordinator.transactions import TransactionCoordinator
from hightide.txn.records import STATE_TOPIC
from tests.unit.test_coordinator_runtime import T0, FakeBroker, env_of

GROUP, TXN, PID, EPOCH = "g", "txn-1", 5, 0
REMOTE = 2  # the broker leading the transactional id's __transaction_state partition


class _TxnBroker(FakeBroker):
    """Node 1 of a cluster whose only ``__transaction_state`` partition broker 2 leads."""

    def __init__(self, path: Any) -> None:
        path.mkdir()
        super().__init__(path, **{"transaction.state.log.num.partitions": 1})
        self.node_id = 1
        self.stopping = False
        self.cluster = SimpleNamespace(single_node=False)
        self.image = MetadataImage()
        self.image.topics[STATE_TOPIC] = TopicImage(STATE_TOPIC, uuid.uuid4(),
                                                    {0: PartitionImage(0, REMOTE, 3, (REMOTE, 1))})
        self.inter_broker = InterBroker(lambda: self.image, lambda: ("PLAINTEXT", None))


class _FakeRemote:
    """Broker 2's transaction coordinator: answers ``answer`` after ``delay_s`` (None:
    never answers)."""

    def __init__(self, answer: ErrorCode, delay_s: float | None) -> None:
        self.answer, self.delay_s = answer, delay_s
        self.asked: list[tuple[int, str, Any]] = []

    async def __call__(self, node: int, transactional_id: str, key: Any) -> ErrorCode:
        self.asked.append((node, transactional_id, key))
        await asyncio.sleep(3600 if self.delay_s is None else self.delay_s)
        return self.answer


class _Env:
    def __init__(self, tmp_path: Any, answer: ErrorCode, delay_s: float | None) -> None:
        self.groups = GroupRuntime(env_of(FakeBroker(tmp_path)))
        self.groups.runtime.load([0], now=True)
        self.txns = TransactionCoordinator(env_of(_TxnBroker(tmp_path / "txn")))
        self.remote = _FakeRemote(answer, delay_s)
        self.txns._remote._request = self.remote  # type: ignore[method-assign]
        image = MetadataImage()
        image.topics["t"] = TopicImage("t", uuid.uuid4(), {0: PartitionImage(0, 1, 0, (1,))})
        self.ctx = SimpleNamespace(services=SimpleNamespace(config=SimpleNamespace(values={})), groups=self.groups,
                                   txns=self.txns, now_ms=T0, version=3, image=image)

    async def commit(self, offset: int) -> ErrorCode:
        req = materialize(request_schema(28, 3), {
            "transactional_id": TXN, "group_id": GROUP, "producer_id": PID, "producer_epoch": EPOCH,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        resp = await txn_offset_commit.handle(self.ctx, req)  # type: ignore[arg-type]
        return ErrorCode(resp.topics[0].partitions[0].error_code)

    def pending(self) -> bool:
        return self.groups.shard_for(GROUP).has_pending_offsets(GROUP, ("t", 0))


def test_the_first_commit_waits_for_the_remote_verification_and_succeeds(tmp_path):
    env = _Env(tmp_path, ErrorCode.none, 0.3)

    async def run() -> None:
        t0 = time.monotonic()
        assert await env.commit(10) == ErrorCode.none  # was COORDINATOR_NOT_AVAILABLE
        assert time.monotonic() - t0 >= 0.25  # held until broker 2 answered
        assert env.pending()  # written as the producer's pending offsets
        assert env.remote.asked == [(REMOTE, TXN, (PID, EPOCH, "__consumer_offsets", 0))]
        assert await env.commit(11) == ErrorCode.none  # every commit is verified, none answers an error
        assert len(env.remote.asked) == 2
        env.txns.close()
        await env.txns.close_connections()
    asyncio.run(run())


@pytest.mark.parametrize("remote, answered", [
    (ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),  # the group's partition is not in the transaction
    (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch),  # AddPartitionsToTxnManager's translation
    (ErrorCode.concurrent_transactions, ErrorCode.concurrent_transactions),  # passed through as Kafka does
    (ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress),  # handleOperationException
    (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
    (ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_producer_id_mapping),
])
def test_a_refusal_is_answered_as_kafkas_group_coordinator_answers_it(tmp_path, remote, answered):
    env = _Env(tmp_path, remote, 0.05)

    async def run() -> None:
        assert await env.commit(10) == answered
        assert not env.pending()  # nothing written
        env.txns.close()
        await env.txns.close_connections()
    asyncio.run(run())


def test_no_answer_by_the_deadline_is_retriable_and_writes_nothing(tmp_path):
    env = _Env(tmp_path, ErrorCode.none, None)
    env.txns._remote.timeout_s = 0.3

    async def run() -> None:
        t0 = time.monotonic()
        # Kafka: the verification request timed out (NETWORK_EXCEPTION), normalized for TxnOffsetCommit
        assert await env.commit(10) == ErrorCode.coordinator_load_in_progress
        assert 0.25 <= time.monotonic() - t0 < 5
        assert not env.pending()
        env.txns.close()
        await env.txns.close_connections()
    asyncio.run(run())


def test_a_stopping_coordinator_answers_the_held_commit_at_once(tmp_path):
    env = _Env(tmp_path, ErrorCode.none, None)

    async def run() -> None:
        held = asyncio.ensure_future(env.commit(10))
        while not env.remote.asked:
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        env.txns.close()  # Broker.stop
        done, _ = await asyncio.wait((held,), timeout=5)
        assert done and held.result() == ErrorCode.not_coordinator
        assert time.monotonic() - t0 < 1
        assert not env.pending()
        assert await env.commit(11) == ErrorCode.not_coordinator  # and a new one is not held
        await env.txns.close_connections()
    asyncio.run(run())


@pytest.mark.parametrize("code, version, answered", [
    (ErrorCode.transaction_abortable, 3, ErrorCode.invalid_txn_state),  # clients before v4 do not know it
    (ErrorCode.transaction_abortable, 4, ErrorCode.transaction_abortable),
    (ErrorCode.not_leader_or_follower, 3, ErrorCode.not_coordinator),
    (ErrorCode.not_coordinator, 3, ErrorCode.not_coordinator),
    (ErrorCode.none, 3, ErrorCode.none),
])
def test_kafkas_translation_of_verification_errors(code, version, answered):
    assert txn_offset_commit.verification_error(code, version) == answered


def test_a_coordinator_refusing_the_broker_itself_is_invalid_txn_state(tmp_path):
    """Kafka's AddPartitionsToTxnManager: the client must not see CLUSTER_AUTHORIZATION_FAILED."""
    txns = TransactionCoordinator(env_of(_TxnBroker(tmp_path / "txn")))

    async def refused(*args: Any) -> Any:
        return SimpleNamespace(error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())

    txns._remote._peers = SimpleNamespace(address=lambda node: ("127.0.0.1", 1), request=refused,  # type: ignore
                                          close=txns._remote._peers.close)

    async def run() -> None:
        assert await txns.verify_held(TXN, PID, EPOCH, "__consumer_offsets", 0) == ErrorCode.invalid_txn_state
        txns.close()
        await txns.close_connections()
    asyncio.run(run())
