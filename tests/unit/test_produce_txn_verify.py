"""A transactional Produce whose transaction coordinator is on another broker (KIP-890
verification, the produce half of issue 26 item 6): the partition is held until that
broker answers the verify-only AddPartitionsToTxn and then appended, as Kafka's
``ReplicaManager.handleProduceAppend`` holds it (AddPartitionsToTxnManager), instead of
answering the retriable NOT_ENOUGH_REPLICAS while the question runs in the background.
Refusals are answered as Kafka translates them for Produce, the wait is bounded, a
stopping broker answers a held produce at once, produces of one producer and partition
that arrive while a question is asked share it and are appended in arrival order, and
nothing changes for batches that need no question.

The handler runs for real on an embedded broker (records are views of a real frame,
overwritten once the handler's synchronous part returns); its verifier is a
:class:`TransactionCoordinator` in cluster mode whose ``__transaction_state`` partition
broker 2 leads, with the network call to broker 2 replaced by a fake coordinator that
answers after a delay (see test_txn_offset_commit_verify.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.produce.v9.response import ProduceResponse
from kio.serial import entity_reader

from hightide.cluster.controller import NewTopic
from hightide.config import BrokerConfig
from hightide.protocol.build import materialize
from hightide.protocol.codec import decode_request, encode_request, parse_header, request_schema
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, decode_records
from hightide.server.broker import Broker
from hightide.server.context import RequestContext
from hightide.server.handlers import produce
from hightide.server.registry import CloseConnection
from hightide.coordinator.transactions import TransactionCoordinator
from tests.unit.test_coordinator_runtime import env_of
from tests.unit.test_txn_offset_commit_verify import EPOCH, PID, REMOTE, TXN, _FakeRemote, _TxnBroker

TOPIC = "t"


def _batch(seq: int, n: int = 3, *, txn: bool = True) -> bytes:
    return build_batch([(b"k", f"v{seq + i}".encode(), [], 1_700_000_000_000) for i in range(n)],
                       producer_id=PID, producer_epoch=EPOCH, base_sequence=seq, is_transactional=txn)


class _Env:
    """An embedded broker with topic ``t`` (2 partitions) and a produce path whose
    verifier asks the fake broker 2."""

    def __init__(self, tmp_path: Path, answer: ErrorCode, delay_s: float | None) -> None:
        self.tmp_path = tmp_path
        self.broker = Broker(BrokerConfig(), data_dir=str(tmp_path / "data"), listen=("127.0.0.1", 0))
        self.txns = TransactionCoordinator(env_of(_TxnBroker(tmp_path / "txn")))
        self.remote = _FakeRemote(answer, delay_s)
        self.txns._remote._request = self.remote  # type: ignore[method-assign]
        self.services: Any = None

    async def __aenter__(self) -> _Env:
        await self.broker.start()
        await self.broker.metadata_writer.create_topics([NewTopic(TOPIC, 2, -1)])
        self.services = dataclasses.replace(self.broker.services, txn_verifier=self.txns)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.txns.close()
        await self.txns.close_connections()
        await self.broker.stop()

    def send(self, batches: dict[int, bytes], acks: int = -1, transactional_id: str | None = TXN) -> Any:
        """Run the handler on a real frame (records are views of it); the frame is
        overwritten as soon as the synchronous part returns. Returns an awaitable of the
        partitions' (error, base offset) by index."""
        body = {"transactional_id": transactional_id, "acks": acks, "timeout": timedelta(seconds=5),
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": p, "records": b}
                                                                  for p, b in batches.items()]}]}
        frame = bytearray(encode_request(0, 9, 1, "c", materialize(request_schema(0, 9), body)))
        view = memoryview(frame)[4:]
        header, off = parse_header(view)
        req = decode_request(header, view, off, {})
        result = produce.handle(RequestContext(self.services, header, "127.0.0.1:1", {}), req)
        del view, req
        frame[:] = b"\xee" * len(frame)  # the receive buffer is reused by the next request

        async def answer() -> dict[int, tuple[ErrorCode, int]] | None:
            raw = await result if hasattr(result, "__await__") else result
            if raw is None:
                return None
            data = b"".join(bytes(b) for b in raw.buffers)
            resp = entity_reader(ProduceResponse)(memoryview(data), 5)[0]  # after the correlation id and tags
            return {p.index: (ErrorCode(p.error_code), p.base_offset)
                    for t in resp.responses for p in t.partition_responses}
        return answer()

    def stored(self, partition: int = 0) -> list[bytes]:
        """The values of every record in the partition, batch by batch."""
        plog = self.broker.hosted.partition_log(TOPIC, partition)
        assert plog is not None
        values, offset = [], 0
        while offset < plog.log_end_offset:
            records = decode_records(plog.read(offset, 1 << 20).data)  # the batch holding ``offset``
            values += [r.value for r in records]
            offset = records[-1].offset + 1
        return values


def _run(tmp_path: Path, answer: ErrorCode, delay_s: float | None, test: Any, timeout_s: float | None = None) -> None:
    async def run() -> None:
        async with _Env(tmp_path, answer, delay_s) as env:
            if timeout_s is not None:
                env.txns._remote.timeout_s = timeout_s
            await test(env)
    asyncio.run(run())


def test_the_first_transactional_batch_waits_for_the_remote_verification_and_is_appended(tmp_path):
    async def test(env: _Env) -> None:
        t0 = time.monotonic()
        got = await env.send({0: _batch(0)})
        assert got == {0: (ErrorCode.none, 0)}  # was NOT_ENOUGH_REPLICAS
        assert time.monotonic() - t0 >= 0.25  # held until broker 2 answered
        assert env.remote.asked == [(REMOTE, TXN, (PID, EPOCH, TOPIC, 0))]
        assert env.stored() == [b"v0", b"v1", b"v2"]  # the held copy, not the overwritten frame
        # the partition now holds the producer's open transaction: no more questions
        assert await env.send({0: _batch(3)}) == {0: (ErrorCode.none, 3)}
        assert len(env.remote.asked) == 1
    _run(tmp_path, ErrorCode.none, 0.3, test)


def test_only_the_partitions_needing_a_question_are_held(tmp_path):
    async def test(env: _Env) -> None:
        assert await env.send({0: _batch(0)}) == {0: (ErrorCode.none, 0)}
        # partition 0 has the open transaction, partition 1 needs the question
        got = await env.send({0: _batch(3), 1: _batch(0)})
        assert got == {0: (ErrorCode.none, 3), 1: (ErrorCode.none, 0)}
        assert [k for _, _, k in env.remote.asked] == [(PID, EPOCH, TOPIC, 0), (PID, EPOCH, TOPIC, 1)]
    _run(tmp_path, ErrorCode.none, 0.05, test)


def test_pipelined_produces_share_the_question_and_are_appended_in_order(tmp_path):
    async def test(env: _Env) -> None:
        first = asyncio.ensure_future(env.send({0: _batch(0)}))
        second = asyncio.ensure_future(env.send({0: _batch(3)}))  # sent before the first is answered
        third = asyncio.ensure_future(env.send({0: _batch(6)}))
        done, _ = await asyncio.wait((first, second, third), timeout=10)
        assert len(done) == 3
        assert [first.result(), second.result(), third.result()] == [
            {0: (ErrorCode.none, 0)}, {0: (ErrorCode.none, 3)}, {0: (ErrorCode.none, 6)}]
        assert len(env.remote.asked) == 1
        assert env.stored() == [f"v{i}".encode() for i in range(9)]
    _run(tmp_path, ErrorCode.none, 0.2, test)


@pytest.mark.parametrize("remote, answered", [
    (ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),  # the partition is not in the transaction
    (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch),  # AddPartitionsToTxnManager's translation
    (ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_producer_id_mapping),
    # ReplicaManager.handleProduceAppend: retriable verification errors become NOT_ENOUGH_REPLICAS
    (ErrorCode.concurrent_transactions, ErrorCode.not_enough_replicas),
    (ErrorCode.network_exception, ErrorCode.not_enough_replicas),
    (ErrorCode.coordinator_load_in_progress, ErrorCode.not_enough_replicas),
    (ErrorCode.coordinator_not_available, ErrorCode.not_enough_replicas),
    (ErrorCode.not_coordinator, ErrorCode.not_enough_replicas),
])
def test_a_refusal_is_answered_as_kafka_answers_it_for_produce(tmp_path, remote, answered):
    async def test(env: _Env) -> None:
        assert await env.send({0: _batch(0)}) == {0: (answered, -1)}
        assert env.stored() == []  # nothing appended
        assert len(env.remote.asked) == 1
    _run(tmp_path, remote, 0.05, test)


def test_no_answer_by_the_deadline_is_retriable_and_appends_nothing(tmp_path):
    async def test(env: _Env) -> None:
        t0 = time.monotonic()
        assert await env.send({0: _batch(0)}) == {0: (ErrorCode.not_enough_replicas, -1)}  # NETWORK_EXCEPTION
        assert 0.25 <= time.monotonic() - t0 < 5
        assert env.stored() == []
    _run(tmp_path, ErrorCode.none, None, test, timeout_s=0.3)


def test_a_stopping_broker_answers_the_held_produce_at_once(tmp_path):
    async def test(env: _Env) -> None:
        held = asyncio.ensure_future(env.send({0: _batch(0)}))
        while not env.remote.asked:
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        env.txns.close()  # Broker.stop
        done, _ = await asyncio.wait((held,), timeout=5)
        assert done and held.result() == {0: (ErrorCode.not_enough_replicas, -1)}
        assert time.monotonic() - t0 < 1
        assert env.stored() == []
        assert await env.send({0: _batch(0)}) == {0: (ErrorCode.not_enough_replicas, -1)}  # not held any more
        assert len(env.remote.asked) == 1
    _run(tmp_path, ErrorCode.none, None, test)


def test_acks_0_is_held_too_and_a_refusal_closes_the_connection(tmp_path):
    async def test(env: _Env) -> None:
        assert await env.send({0: _batch(0)}, acks=0) is None
        assert env.stored() == [b"v0", b"v1", b"v2"]
        env.remote.answer = ErrorCode.invalid_txn_state
        with pytest.raises(CloseConnection):  # how Kafka tells a fire-and-forget producer
            await env.send({1: _batch(0)}, acks=0)
        assert env.stored(1) == []
    _run(tmp_path, ErrorCode.none, 0.05, test)


def test_batches_needing_no_question_are_not_held(tmp_path):
    async def test(env: _Env) -> None:
        plain = env.send({0: _batch(0, txn=False)}, transactional_id=None)
        assert await plain == {0: (ErrorCode.none, 0)}
        # transactional records without the request's transactional id: refused before any question
        assert await env.send({1: _batch(0)}, transactional_id=None) == {
            1: (ErrorCode.transactional_id_authorization_failed, -1)}
        assert env.remote.asked == []
    _run(tmp_path, ErrorCode.none, 0.05, test)
