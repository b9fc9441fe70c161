"""RemoteTxnVerifier (KIP-890 with the transaction coordinator on another broker): the
produce path's question is asked once for every produce of a producer, epoch and
partition that arrives while it is asked, answers what the coordinator said, and is
forgotten once answered (the next transaction asks again); questions are bounded and a
closed verifier answers NOT_COORDINATOR."""

from __future__ import annotations

import asyncio
from typing import Any

from hightide.cluster.image import MetadataImage
from hightide.log.transactions import verification_error_for_produce
from hightide.node.inter_broker import InterBroker
from hightide.protocol.errors import ErrorCode
from hightide.coordinator.env import NoPeers
from hightide.coordinator.txn_verify import RemoteTxnVerifier, answer_of


class _Asked(RemoteTxnVerifier):
    """The verifier with the network call replaced by a scripted answer."""

    def __init__(self, answer: ErrorCode) -> None:
        super().__init__(NoPeers())
        self.answer = answer
        self.asked: list[tuple[int, str, Any]] = []
        self.release = asyncio.Event()

    async def _request(self, node: int, transactional_id: str, key: Any) -> ErrorCode:
        self.asked.append((node, transactional_id, key))
        await self.release.wait()
        return self.answer


def test_one_question_for_the_produces_arriving_while_it_is_asked_then_forgotten() -> None:
    async def run() -> None:
        v = _Asked(ErrorCode.none)
        first = v.verify(2, "t", 7, 0, "topic", 1)
        again = v.verify(2, "t", 7, 0, "topic", 1)
        other = v.verify(2, "t", 7, 0, "topic", 2)
        assert first is again and other is not first
        await asyncio.sleep(0)
        assert v.asked == [(2, "t", (7, 0, "topic", 1)), (2, "t", (7, 0, "topic", 2))]
        v.release.set()
        done, _ = await asyncio.wait((first, other), timeout=5)
        assert len(done) == 2 and answer_of(first) == answer_of(other) == ErrorCode.none
        await asyncio.sleep(0)
        # forgotten once answered: the next transaction in that partition asks again
        later = v.verify(2, "t", 7, 0, "topic", 1)
        assert later is not first
        await asyncio.wait((later,), timeout=5)
        assert len(v.asked) == 3
        await v.close()
    asyncio.run(run())


def test_a_refusal_is_answered_as_the_coordinator_said() -> None:
    async def run() -> None:
        v = _Asked(ErrorCode.invalid_txn_state)
        v.release.set()
        q = v.verify(3, "t", 7, 0, "topic", 0)
        await asyncio.wait((q,), timeout=5)
        assert answer_of(q) == ErrorCode.invalid_txn_state
        await v.close()
    asyncio.run(run())


def test_no_answer_in_time_is_network_exception_and_closing_answers_not_coordinator() -> None:
    async def run() -> None:
        v = _Asked(ErrorCode.none)
        v.timeout_s = 0.1
        late = v.verify(3, "t", 7, 0, "topic", 0)
        await asyncio.wait((late,), timeout=5)
        assert answer_of(late) == ErrorCode.network_exception
        assert verification_error_for_produce(answer_of(late))[0] == ErrorCode.not_enough_replicas
        v.timeout_s = 10
        held = v.verify(3, "t", 7, 0, "topic", 0)
        await asyncio.sleep(0)
        v.stop_waiting()  # Broker.stop
        await asyncio.wait((held,), timeout=5)
        assert answer_of(held) == ErrorCode.not_coordinator
        after = v.verify(3, "t", 7, 0, "topic", 0)
        assert after.done() and answer_of(after) == ErrorCode.not_coordinator
        await v.close()
    asyncio.run(run())
