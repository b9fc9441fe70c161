"""RemoteTxnVerifier (KIP-890 with the transaction coordinator on another broker): the
question is asked once in the background, the produce answers a retriable error until
the answer is in, and an answer is used once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from hightide.log.transactions import verification_error_for_produce
from hightide.protocol.errors import ErrorCode
from hightide.server.txn_verify import RemoteTxnVerifier
from tests.waiting import async_wait_until


class _Asked(RemoteTxnVerifier):
    """The verifier with the network call replaced by a scripted answer."""

    def __init__(self, answer: ErrorCode) -> None:
        super().__init__(SimpleNamespace(node_id=1))  # type: ignore[arg-type]
        self.answer = answer
        self.asked: list[tuple[int, str, Any]] = []
        self.release = asyncio.Event()

    async def _request(self, node: int, transactional_id: str, key: Any) -> ErrorCode:
        self.asked.append((node, transactional_id, key))
        await self.release.wait()
        return self.answer


def test_asks_once_answers_retriable_meanwhile_then_uses_the_answer_once() -> None:
    async def run() -> None:
        v = _Asked(ErrorCode.none)
        first = v.verify(2, "t", 7, 0, "topic", 1)
        again = v.verify(2, "t", 7, 0, "topic", 1)
        assert first == again == ErrorCode.coordinator_load_in_progress
        assert verification_error_for_produce(first)[0] == ErrorCode.not_enough_replicas
        await asyncio.sleep(0)
        assert v.asked == [(2, "t", (7, 0, "topic", 1))]  # one question for both produces
        v.release.set()
        await async_wait_until(lambda: not v._asking, 5, what="the answer")
        assert v.verify(2, "t", 7, 0, "topic", 1) == ErrorCode.none
        # used once: the next transaction in that partition is verified again
        assert v.verify(2, "t", 7, 0, "topic", 1) == ErrorCode.coordinator_load_in_progress
        await asyncio.sleep(0)
        assert len(v.asked) == 2
        await v.close()
    asyncio.run(run())


def test_a_refusal_is_answered_as_the_coordinator_said() -> None:
    async def run() -> None:
        v = _Asked(ErrorCode.invalid_txn_state)
        v.release.set()
        assert v.verify(3, "t", 7, 0, "topic", 0) == ErrorCode.coordinator_load_in_progress
        await async_wait_until(lambda: not v._asking, 5, what="the answer")
        assert v.verify(3, "t", 7, 0, "topic", 0) == ErrorCode.invalid_txn_state
        await v.close()
    asyncio.run(run())
