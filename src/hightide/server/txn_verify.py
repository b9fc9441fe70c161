"""KIP-890 verification with a transaction coordinator on another broker.

A transactional Produce to a partition led here, whose producer has no open transaction
in it yet, must be confirmed by the transaction coordinator of its transactional id (see
:class:`~hightide.log.transactions.TxnVerifier`). When that coordinator is another
broker, Kafka's broker sends it AddPartitionsToTxn v4+ with ``verify_only=true``. The
verifier seam is synchronous (the produce path answers from memory), so this asks in
the background and answers the produce from the answer:

* no answer yet for (producer id, epoch, partition): the question is sent (once, however
  many produces ask) and the produce answers COORDINATOR_LOAD_IN_PROGRESS, which the
  produce path turns into the retriable NOT_ENOUGH_REPLICAS; the client retries;
* the coordinator's answer, when it came: used by the next produce of that partition and
  then dropped (one-shot), so every new transaction of the producer in the partition is
  verified again, as on the local path (a positive answer lets the append open the
  transaction; from then on the partition's own open transaction answers). An answer
  older than ``ANSWER_TTL_S`` is dropped unused;
* a coordinator that cannot be reached (no leader, fenced, connection failed) answers
  COORDINATOR_NOT_AVAILABLE / NETWORK_EXCEPTION: NOT_ENOUGH_REPLICAS again.

The cost against Kafka, which holds the produce until the answer: the first batch of a
producer in a partition per transaction waits one client retry backoff.

TxnOffsetCommit does not take that path: its handler is asynchronous and awaits
:meth:`RemoteTxnVerifier.ask`, which holds the request until the coordinator answers, as
Kafka's group coordinator does (``scheduleTransactionalWriteOperation`` waits for
AddPartitionsToTxnManager's verification). Every wait is bounded by ``timeout_s`` (the
inter-broker request timeout; Kafka bounds its verification by ``request.timeout.ms``):
no answer by then is NETWORK_EXCEPTION, what Kafka's sender reports for a timed-out
verification. Closing the verifier (the broker stopping) answers every held question
NOT_COORDINATOR at once, and a question asked after that too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..client.errors import KafkaError
from ..protocol.errors import ErrorCode
from .inter_broker import REQUEST_TIMEOUT_S, InterBrokerClients

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("hightide.txn")

ANSWER_TTL_S = 10.0  # an answer not used by a produce within this time is dropped
_Key = tuple[int, int, str, int]  # producer id, epoch, topic, partition


class RemoteTxnVerifier:
    """Verify-only AddPartitionsToTxn to another broker's transaction coordinator (see
    the module doc)."""

    def __init__(self, broker: Broker, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.broker = broker
        self.timeout_s = timeout_s  # the longest a held question (:meth:`ask`) waits
        self._peers = InterBrokerClients(broker, f"hightide-txn-verify-{broker.node_id}", timeout_s)
        self._answers: dict[_Key, tuple[ErrorCode, float]] = {}
        self._asking: dict[_Key, asyncio.Task] = {}
        self._held: set[asyncio.Task[ErrorCode]] = set()  # questions a request awaits (:meth:`ask`)
        self._closed = False

    def verify(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode:
        """The answer of broker ``node`` (the coordinator of ``transactional_id``) if it
        came, else COORDINATOR_LOAD_IN_PROGRESS and the question is sent in the background."""
        key = (producer_id, producer_epoch, topic, partition)
        answer = self._answers.pop(key, None)
        now = time.monotonic()
        if answer is not None and now - answer[1] <= ANSWER_TTL_S:
            return answer[0]
        if key not in self._asking:
            task = asyncio.get_running_loop().create_task(self._ask(node, transactional_id, key),
                                                          name=f"verify txn {transactional_id}")
            self._asking[key] = task
            task.add_done_callback(lambda t: self._asking.pop(key, None))
        if len(self._answers) > 10_000:  # answers nobody came back for
            self._answers = {k: v for k, v in self._answers.items() if now - v[1] <= ANSWER_TTL_S}
        return ErrorCode.coordinator_load_in_progress

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
        key = (producer_id, producer_epoch, topic, partition)
        task = asyncio.get_running_loop().create_task(self._request(node, transactional_id, key),
                                                      name=f"verify txn {transactional_id} (held)")
        self._held.add(task)
        task.add_done_callback(self._held.discard)
        try:
            done, _ = await asyncio.wait((task,), timeout=self.timeout_s)
        finally:
            if not task.done():
                task.cancel()
        if not done:
            log.warning("verifying the transaction of %r with broker %d: no answer within %.1f s", transactional_id,
                        node, self.timeout_s)
            return ErrorCode.network_exception
        if task.cancelled():
            return ErrorCode.not_coordinator
        exc = task.exception()
        if exc is not None:
            log.error("verifying the transaction of %r with broker %d failed: %r", transactional_id, node, exc)
            return ErrorCode.network_exception
        return task.result()

    async def _ask(self, node: int, transactional_id: str, key: _Key) -> None:
        """Send the verify-only request and store the answer."""
        self._answers[key] = (await self._request(node, transactional_id, key), time.monotonic())

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
        :meth:`ask`), so are later ones; background questions stop."""
        self._closed = True
        for task in [*self._held, *self._asking.values()]:
            task.cancel()
        self._asking.clear()

    async def close(self) -> None:
        """Stop asking (:meth:`stop_waiting`) and close the connections."""
        self.stop_waiting()
        await self._peers.close()
