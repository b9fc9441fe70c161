"""KIP-890 verification with a transaction coordinator on another broker.

A transactional Produce to a partition led here, whose producer has no open transaction
in it yet, must be confirmed by the transaction coordinator of its transactional id (see
:class:`~hightide.log.transactions.TxnVerifier`); so must every TxnOffsetCommit. When that
coordinator is another broker, Kafka's broker sends it AddPartitionsToTxn v4+ with
``verify_only=true`` and holds the request until it answers (AddPartitionsToTxnManager).
So does this:

* :meth:`RemoteTxnVerifier.verify` (the produce path): a task resolving to the
  coordinator's answer, which the Produce handler holds the partition on and then
  appends or refuses (see handlers/produce.py). Produces of one producer id, epoch and
  partition that arrive while the question is asked share it (one request to the other
  broker) and are appended in arrival order; once answered it is forgotten, so every new
  transaction of the producer in the partition asks again (the first batch of each
  transaction and partition asks; later ones find the partition's open transaction);
* :meth:`RemoteTxnVerifier.ask` (TxnOffsetCommit, whose handler awaits it as Kafka's
  group coordinator does in ``scheduleTransactionalWriteOperation``): its own question.

Every question is bounded by ``timeout_s`` (the inter-broker request timeout; Kafka bounds
its verification by ``request.timeout.ms``): no answer by then, or a failed call, is
NETWORK_EXCEPTION, what Kafka's sender reports for a timed-out or disconnected
verification; a coordinator refusing the broker itself (CLUSTER_AUTHORIZATION_FAILED) is
INVALID_TXN_STATE, as Kafka's AddPartitionsToTxnManager turns it; a coordinator that
cannot be reached (not registered, fenced) COORDINATOR_NOT_AVAILABLE. Closing the
verifier (the broker stopping) answers every held question NOT_COORDINATOR at once, and
a question asked after that too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..client.errors import KafkaError
from ..protocol.errors import ErrorCode
from ..node.inter_broker import REQUEST_TIMEOUT_S

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.txn")

_Key = tuple[int, int, str, int]  # producer id, epoch, topic, partition


def answer_of(question: asyncio.Future[ErrorCode]) -> ErrorCode:
    """What a question ended with (see the module doc): its answer; NETWORK_EXCEPTION
    when it is not done (a waiter's own deadline passed) or failed; NOT_COORDINATOR when
    it was cancelled (the verifier closed)."""
    if not question.done():
        return ErrorCode.network_exception
    if question.cancelled():
        return ErrorCode.not_coordinator
    if question.exception() is not None:
        return ErrorCode.network_exception
    return question.result()


class RemoteTxnVerifier:
    """Verify-only AddPartitionsToTxn to another broker's transaction coordinator (see
    the module doc)."""

    def __init__(self, broker: Broker, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.broker = broker
        self.timeout_s = timeout_s  # the longest a question waits for its answer
        self._peers = broker.inter_broker.clients(f"hightide-txn-verify-{broker.node_id}", timeout_s)
        self._asking: dict[_Key, asyncio.Task[ErrorCode]] = {}  # the produce path's shared questions
        self._held: set[asyncio.Task[ErrorCode]] = set()  # every question not answered yet
        self._closed = False

    def verify(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> asyncio.Future[ErrorCode]:
        """The question to broker ``node`` (the coordinator of ``transactional_id``) about
        the partition, for a produce to hold on: a task resolving within ``timeout_s`` to
        the answer (the same answers as :meth:`ask`; cancelled when the verifier closes,
        see :func:`answer_of`), shared with the produces of that producer id, epoch and
        partition arriving until it is answered. Closed: a done future, NOT_COORDINATOR.
        A caller must not cancel it (``asyncio.wait`` does not)."""
        if self._closed:
            done: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            done.set_result(ErrorCode.not_coordinator)
            return done
        key = (producer_id, producer_epoch, topic, partition)
        task = self._asking.get(key)
        if task is None or task.done():  # done: answered before its done callbacks ran; ask again
            task = self._question(node, transactional_id, key)
            self._asking[key] = task
            task.add_done_callback(lambda t: self._asking.pop(key) if self._asking.get(key) is t else None)
        return task

    async def ask(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                  partition: int) -> ErrorCode:
        """Ask broker ``node`` (the coordinator of ``transactional_id``) and wait for its
        answer, at most ``timeout_s``: the coordinator's answer (its top-level error, or
        the partition's); NETWORK_EXCEPTION when no answer came in time or the call
        failed; COORDINATOR_NOT_AVAILABLE when ``node`` cannot be reached (not
        registered, fenced); NOT_COORDINATOR when the verifier is closed meanwhile (the
        broker is stopping). Each call asks once: an answer is about the transaction as
        it is when asked. Never raises (a cancelled caller cancels its question)."""
        if self._closed:
            return ErrorCode.not_coordinator
        task = self._question(node, transactional_id, (producer_id, producer_epoch, topic, partition))
        try:
            await asyncio.wait((task,), timeout=self.timeout_s + 1.0)  # the question bounds itself
        finally:
            if not task.done():
                task.cancel()
        return answer_of(task)

    def _question(self, node: int, transactional_id: str, key: _Key) -> asyncio.Task[ErrorCode]:
        """A task asking broker ``node`` (see :meth:`_answer`), cancelled if the verifier closes."""
        task = asyncio.get_running_loop().create_task(self._answer(node, transactional_id, key),
                                                      name=f"verify txn {transactional_id}")
        self._held.add(task)
        task.add_done_callback(self._held.discard)
        return task

    async def _answer(self, node: int, transactional_id: str, key: _Key) -> ErrorCode:
        """The coordinator's answer within ``timeout_s``, else NETWORK_EXCEPTION; never raises
        but CancelledError."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._request(node, transactional_id, key)
        except TimeoutError:
            log.warning("verifying the transaction of %r with broker %d: no answer within %.1f s", transactional_id,
                        node, self.timeout_s)
            return ErrorCode.network_exception
        except Exception as exc:  # noqa: BLE001 - a verification never fails its request
            log.error("verifying the transaction of %r with broker %d failed: %r", transactional_id, node, exc)
            return ErrorCode.network_exception

    async def _request(self, node: int, transactional_id: str, key: _Key) -> ErrorCode:
        producer_id, epoch, topic, partition = key
        addr = self._peers.address(node)
        if addr is None:
            return ErrorCode.coordinator_not_available
        body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                  "producer_epoch": epoch, "verify_only": True,
                                  "topics": [{"name": topic, "partitions": [partition]}]}]}
        try:
            resp = await self._peers.request(node, addr[0], addr[1], 24, 4, body)
        except (KafkaError, OSError) as exc:
            log.warning("verifying the transaction of %r with broker %d failed: %s", transactional_id, node, exc)
            return ErrorCode.network_exception
        if resp.error_code == ErrorCode.cluster_authorization_failed:
            return ErrorCode.invalid_txn_state  # Kafka: the client must not see the broker's own refusal
        if resp.error_code != ErrorCode.none:
            return ErrorCode(resp.error_code)
        for txn in resp.results_by_transaction:
            for t in txn.topic_results:
                for r in t.results_by_partition:
                    if (t.name, int(r.partition_index)) == (topic, partition):
                        return ErrorCode(r.partition_error_code)
        return ErrorCode.coordinator_not_available

    def stop_waiting(self) -> None:
        """The broker is stopping: every held question answers NOT_COORDINATOR now (see
        :meth:`ask` and :func:`answer_of`), so do later ones."""
        self._closed = True
        for task in list(self._held):
            task.cancel()
        self._asking.clear()

    async def close(self) -> None:
        """Stop asking (:meth:`stop_waiting`) and close the connections."""
        self.stop_waiting()
        await self._peers.close()
