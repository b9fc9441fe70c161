"""The transaction coordinator: :class:`~hightide.txn.coordinator.TxnShard` s over the
partitions of ``__transaction_state``, run by the one
:class:`~.runtime.CoordinatorRuntime` (``broker.txns``).

A request (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) picks the
transactional id's partition (Kafka's ``abs(hashCode) % transaction.state.log.num.partitions``),
runs the shard's method on the working shard, appends its records, and answers once they
are committed; reads (KIP-890 verification, describe, list) see committed state only.

*Markers* (Kafka's TransactionMarkerChannelManager, on one node): when a result carries
:class:`~hightide.txn.coordinator.Markers` — an EndTxn, a fencing InitProducerId or a
timed-out transaction decided PrepareCommit/PrepareAbort — a completion task writes a
COMMIT/ABORT marker to every partition of the transaction, each through its owner: data
partitions with ``PartitionLog.append_marker`` (parked fetches woken, fsynced first when
the topic's flush policy asks for it, as after a produce), ``__consumer_offsets``
partitions through the group coordinator's write path, so the group shard makes the
transaction's pending offsets visible (or drops them) exactly when the marker is in its
log. Then the CompleteCommit/CompleteAbort record. In cluster mode a partition another
broker leads gets its marker from that broker: one WriteTxnMarkers per broker and round
(:meth:`TransactionCoordinator.send_markers`), to its inter-broker listener; a leader that
moved answers NOT_LEADER_OR_FOLLOWER and the marker is sent again, after backoff, to the
leader the image then names. A marker that cannot be written now
(log offline, coordinator loading) is retried with backoff; a partition deleted meanwhile
is skipped, as Kafka does. EndTxn answers once the decision is committed and, unless that
takes longer than ``END_TXN_WAIT_S``, once the markers are written too (so the client's next
transaction does not meet CONCURRENT_TRANSACTIONS).

*Timers* (:meth:`TransactionCoordinator.run_timers`): at start, once the partitions are
loaded, every transaction found in a Prepare state is completed; then every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` ongoing transactions past
their ``transaction.timeout.ms`` are aborted with their epoch bumped (the producer is
fenced), and every ``transaction.remove.expired.transaction.cleanup.interval.ms`` idle
transactional ids older than ``transactional.id.expiration.ms`` are removed (tombstones).

Built from the node's :class:`~.env.CoordinatorEnv`, the group coordinator (markers to
``__consumer_offsets``), ``next_producer_id()``, :class:`~.env.PeerClients` for
WriteTxnMarkers and a :class:`~.txn_verify.RemoteTxnVerifier`: never the broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..client.errors import KafkaError
from ..group.records import OFFSETS_TOPIC
from ..group.shard import CoordinatorResult
from ..log.producer_state import ProducerStateError
from ..protocol.errors import ErrorCode
from ..txn.batch import TxnBatch
from ..txn.coordinator import NEED_PRODUCER_ID, InitResponse, Markers, TxnConfig, TxnResult, TxnShard
from ..txn.records import STATE_TOPIC, TxnRecordError, decode_key, decode_value, encode_key, encode_value
from ..txn.records import partition_for as txn_partition_for
from ..txn.state import TopicPartition, TxnMetadata, TxnState
from .internal_topic import CoordinatorUnavailable
from .runtime import _HW_REACHED, fsync_due
from .service import AdapterDefaults, CoordinatorService, returning
from .env import NoPeers, PeerClients
from .txn_verify import RemoteTxnVerifier

if TYPE_CHECKING:
    from .env import CoordinatorEnv
    from .groups import GroupRuntime

log = logging.getLogger("hightide.txn")

END_TXN_WAIT_S = 5.0  # EndTxn waits this long for its markers before answering anyway
MARKER_RETRY_MAX_S = 1.0  # backoff cap of a marker that could not be written
#: How long a data marker waits for its replication before answering REQUEST_TIMED_OUT
#: (below the inter-broker request timeout, so the coordinator hears the answer).
MARKER_REPLICATION_TIMEOUT_S = 5.0

#: a marker error that means "do not retry": the partition is gone, or a newer epoch or
#: coordinator already wrote there (the producer was fenced)
_FINAL = frozenset({ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_producer_epoch,
                    ErrorCode.transaction_coordinator_fenced})


class TxnAdapter(AdapterDefaults[TxnShard]):
    """:class:`~.runtime.ShardAdapter` of ``__transaction_state`` (a failed
    fsync answers NOT_COORDINATOR, as Kafka's coordinator answers a storage error)."""

    topic = STATE_TOPIC
    storage_error_code = ErrorCode.not_coordinator

    def __init__(self, config: TxnConfig) -> None:
        self.config = config

    def new_shard(self, partition: int) -> TxnShard:
        return TxnShard(self.config)

    def load_record(self, shards: Sequence[TxnShard], partition: int, offset: int, key: bytes | None,
                    value: bytes | None) -> bool:
        try:
            tid = decode_key(key) if key is not None else None
            if tid is None:
                return False
            meta = decode_value(tid, value)
        except (TxnRecordError, UnicodeDecodeError) as exc:
            log.error("skipping malformed record at %s-%d offset %d: %s", STATE_TOPIC, partition, offset, exc)
            return False
        for shard in shards:
            shard.replay(tid, meta)
        return True

    def loaded(self, shards: Sequence[TxnShard], partition: int, count: int) -> None:
        if count:
            log.info("loaded %d records (%d transactional ids) into transaction coordinator %s-%d", count,
                     len(shards[0].txns), STATE_TOPIC, partition)

    def encode(self, records: list[tuple[str, TxnMetadata | None]]) -> list[tuple[bytes | None, bytes | None]]:
        return [(encode_key(tid), encode_value(meta)) for tid, meta in records]

    def replay(self, shard: TxnShard, partition: int, result: TxnResult, offsets: list[int]) -> None:
        for tid, meta in result.records:
            shard.replay(tid, meta)


class TransactionCoordinator(CoordinatorService[TxnShard, str]):
    """The transaction coordinator (``broker.txns``), also the broker's KIP-890
    :class:`~hightide.log.transactions.TxnVerifier`. Start-up, topic creation and close:
    :class:`~.service.CoordinatorService`.

    Built from the node's :class:`~.env.CoordinatorEnv` and: ``groups``, the group
    coordinator (markers to ``__consumer_offsets`` go through its write path; None:
    such markers answer COORDINATOR_NOT_AVAILABLE); ``next_producer_id()``, a new
    producer id (the node's producer id blocks); ``peers``, the connections markers are
    sent to other brokers over; ``verifier``, KIP-890 questions to another broker's
    coordinator. Without peers (the single node) no other broker is reachable."""

    topic = STATE_TOPIC
    place_task = "place transactions"

    def __init__(self, env: CoordinatorEnv, *, groups: GroupRuntime | None = None,
                 next_producer_id: Callable[[], Awaitable[int]] | None = None, peers: PeerClients | None = None,
                 verifier: RemoteTxnVerifier | None = None) -> None:
        cfg = env.config
        self.config = TxnConfig(max_timeout_ms=cfg["transaction.max.timeout.ms"],
                                id_expiration_ms=cfg["transactional.id.expiration.ms"])
        super().__init__(env, TxnAdapter(self.config), cfg["transaction.state.log.num.partitions"])
        self._completing: dict[str, asyncio.Task] = {}  # transactional id -> its markers being written
        self.groups = groups
        self._next_producer_id = next_producer_id
        self._peers: PeerClients = peers if peers is not None else NoPeers()
        self._remote = verifier if verifier is not None else RemoteTxnVerifier(NoPeers())

    def topic_configs(self) -> dict[str, str]:
        """``cleanup.policy=compact``, as Kafka's."""
        return {"cleanup.policy": "compact",
                "segment.bytes": str(self.env.config["transaction.state.log.segment.bytes"])}

    async def move_misplaced(self, now_ms: int) -> set[int]:
        """Nothing: hightide always placed transactional ids by Kafka's rule."""
        return set()

    def partition_for(self, key: str) -> int:
        return txn_partition_for(key, self.num_partitions)

    # -- requests ----------------------------------------------------------------------------
    async def _write(self, transactional_id: str, fn: Callable[[TxnShard], TxnResult]) -> TxnResult:
        """Run ``fn`` on the id's working shard through the write path (the topic created
        on first use); start writing the markers of a decided transaction. Raises
        CoordinatorUnavailable."""
        if self.env.stopping():
            raise CoordinatorUnavailable("the broker is shutting down", ErrorCode.not_coordinator)
        await self.ensure_topic()
        partition = self.partition_for(transactional_id)
        self._check_led_here(partition)
        result: TxnResult = await self.runtime.write(partition, fn, self.env.clock.now_ms())
        if result.markers is not None:
            self._start_completion(result.markers)
        return result

    def coordinator_epoch(self, partition: int) -> int:
        """The coordinator epoch markers carry: the leader epoch of the transactional
        id's ``__transaction_state`` partition (0 on the single node), so a partition
        refuses markers of a coordinator that lost it (TRANSACTION_COORDINATOR_FENCED)."""
        topic = self.env.image().topics.get(STATE_TOPIC)
        pimg = topic.partitions.get(partition) if topic is not None else None
        return max(pimg.leader_epoch, 0) if pimg is not None else 0

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> InitResponse:
        """InitProducerId with a transactional id (see :meth:`TxnShard.init_producer_id`);
        a new producer id comes from the broker's producer id blocks. Raises
        CoordinatorUnavailable."""
        new_pid: int | None = None
        while True:
            now = self.env.clock.now_ms()
            result = await self._write(transactional_id, lambda s: s.init_producer_id(
                transactional_id, timeout_ms, expected, new_pid, now))
            resp = result.response
            assert isinstance(resp, InitResponse)
            if resp is not NEED_PRODUCER_ID:
                return resp
            if self._next_producer_id is None:
                raise CoordinatorUnavailable("no producer id source", ErrorCode.coordinator_not_available)
            new_pid = await self._next_producer_id()

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        """AddPartitionsToTxn / AddOffsetsToTxn: the error for every partition. Raises
        CoordinatorUnavailable."""
        parts = list(partitions)
        now = self.env.clock.now_ms()
        result = await self._write(transactional_id, lambda s: s.add_partitions(
            transactional_id, producer_id, producer_epoch, parts, now))
        return _code(result)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> ErrorCode:
        """EndTxn: answered once the decision (PrepareCommit/PrepareAbort) is committed
        and, within ``END_TXN_WAIT_S``, its markers are written. Raises
        CoordinatorUnavailable."""
        now = self.env.clock.now_ms()
        result = await self._write(transactional_id, lambda s: s.end_txn(
            transactional_id, producer_id, producer_epoch, commit, now))
        task = self._completing.get(transactional_id)
        if result.markers is not None and task is not None:
            await asyncio.wait([task], timeout=END_TXN_WAIT_S)
        return _code(result)

    # -- reads: KIP-890 verification, describe, list -------------------------------------------
    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
               partition: int) -> ErrorCode | asyncio.Future[ErrorCode]:
        """:class:`~hightide.log.transactions.TxnVerifier`: is the partition in the
        producer's ongoing transaction (committed state)? In cluster mode, when another
        broker leads the id's ``__transaction_state`` partition, that broker is asked and
        the answer is a question to hold the produce on
        (:meth:`~.txn_verify.RemoteTxnVerifier.verify`)."""
        remote = self._remote_coordinator(transactional_id)
        if remote is not None:
            return self._remote.verify(remote, transactional_id, producer_id, producer_epoch, topic, partition)
        return self.verify_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)])[
            (topic, partition)]

    async def verify_held(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                          partition: int) -> ErrorCode:
        """:meth:`verify` for a caller that can wait (TxnOffsetCommit): when another broker
        leads the id's ``__transaction_state`` partition, it is asked and the answer
        awaited, bounded (:meth:`~.txn_verify.RemoteTxnVerifier.ask`: NETWORK_EXCEPTION
        when none came in time, NOT_COORDINATOR once this coordinator is closed), as
        Kafka's group coordinator holds the request until verified. Never raises."""
        remote = self._remote_coordinator(transactional_id)
        if remote is not None:
            return await self._remote.ask(remote, transactional_id, producer_id, producer_epoch, topic, partition)
        return self.verify_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)])[
            (topic, partition)]

    def _remote_coordinator(self, transactional_id: str) -> int | None:
        """Cluster mode: the broker leading the id's ``__transaction_state`` partition
        when it is another one; None when it is this broker, nobody, or on the single node
        (then the local shard answers, NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE if
        it is not loaded here)."""
        leader = self._leader(STATE_TOPIC, self.partition_for(transactional_id))
        if self._cluster and leader is not None and leader >= 0 and leader != self.env.node_id:
            return leader
        return None

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn verifyOnly (v4+): the error of each partition (see
        :meth:`TxnShard.verify`), or the coordinator's (loading, unavailable) for all."""
        parts = list(partitions)
        try:
            shard = self.shard_for(transactional_id)
        except CoordinatorUnavailable as exc:
            return {tp: exc.error_code for tp in parts}
        return shard.verify(transactional_id, producer_id, producer_epoch, parts)

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        """The committed state of a transactional id (None: unknown; DescribeTransactions
        answers TRANSACTIONAL_ID_NOT_FOUND). Raises CoordinatorLoadInProgress /
        CoordinatorUnavailable."""
        return self.shard_for(transactional_id).describe(transactional_id)

    def list_transactions(self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
                          min_duration_ms: int = -1) -> list[TxnMetadata]:
        """Every transactional id this coordinator holds (ListTransactions: filters by
        Kafka's state names, producer ids, and ongoing for at least ``min_duration_ms``),
        committed state, sorted by id. Raises ValueError for an unknown state name and
        CoordinatorLoadInProgress while a partition is loading."""
        wanted = [TxnState.from_label(s) for s in states] if states else None
        now = self.env.clock.now_ms()
        out = [m for shard in self.runtime.active_shards().values()
               for m in shard.transactions(wanted, producer_ids, min_duration_ms, now)]
        return sorted(out, key=lambda m: m.transactional_id)

    # -- markers ---------------------------------------------------------------------------------
    def _start_completion(self, markers: Markers) -> None:
        """Write ``markers`` and complete the transaction in a task (one per id at a time)."""
        tid = markers.transactional_id
        task = self._completing.get(tid)
        if task is not None and not task.done():
            return
        markers = replace(markers, coordinator_epoch=self.coordinator_epoch(self.partition_for(tid)))
        task = asyncio.get_running_loop().create_task(self._complete(markers), name=f"complete txn {tid}")
        self._completing[tid] = task

        def done(t: asyncio.Task) -> None:
            if self._completing.get(tid) is t:
                del self._completing[tid]
            if not t.cancelled() and t.exception() is not None:
                log.error("completing the transaction of %r failed: %s", tid, t.exception())
        task.add_done_callback(done)

    async def _complete(self, m: Markers) -> None:
        """Markers to every partition (retrying those that can be retried), then the
        CompleteCommit/CompleteAbort record."""
        todo = list(m.partitions)
        delay = 0.05
        while todo:
            errors = await self.send_markers(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, todo)
            todo = [tp for tp, err in errors.items() if err not in _FINAL]
            if todo:
                if self.env.stopping():
                    return  # the next start completes it (the Prepare record is in the log)
                log.warning("markers of %r to %s not written yet (%s), retrying", m.transactional_id, todo,
                            ", ".join(sorted({errors[tp].name for tp in todo})))
                await self.env.clock.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_MAX_S)
        while True:
            now = self.env.clock.now_ms()
            try:
                await self.runtime.write(self.partition_for(m.transactional_id), lambda s: s.complete(m, now), now)
                return
            except CoordinatorUnavailable as exc:
                if self.env.stopping() or exc.error_code == ErrorCode.not_coordinator:
                    return  # shutting down, or the partition moved: its next owner completes it
                log.warning("completing the transaction of %r failed (%s), retrying", m.transactional_id, exc)
                await self.env.clock.sleep(MARKER_RETRY_MAX_S)

    def _leader(self, topic: str, partition: int) -> int | None:
        """The leader of a partition in the image (-1: none), None if it does not exist."""
        timg = self.env.image().topics.get(topic)
        pimg = timg.partitions.get(partition) if timg is not None else None
        return None if pimg is None else pimg.leader

    async def send_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                           partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's TransactionMarkerChannelManager, one round: the markers of partitions
        led here (or gone: UNKNOWN_TOPIC_OR_PARTITION) are written locally, the others are
        sent to their leaders, one WriteTxnMarkers per broker, all brokers at once. Returns
        the error of each partition; a leaderless partition answers NOT_LEADER_OR_FOLLOWER
        and an unreachable broker BROKER_NOT_AVAILABLE or NETWORK_EXCEPTION (retriable)."""
        me = self.env.node_id
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        out: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            leader = self._leader(*tp)
            if leader is None or leader == me:
                local.append(tp)
            elif leader < 0:
                out[tp] = ErrorCode.not_leader_or_follower
            else:
                remote.setdefault(leader, []).append(tp)
        sends = [self._remote_markers(node, tps, producer_id, producer_epoch, commit, coordinator_epoch)
                 for node, tps in remote.items()]
        if local:
            out.update(await self.write_markers(producer_id, producer_epoch, commit, coordinator_epoch, local))
        for answer in await asyncio.gather(*sends):
            out.update(answer)
        return out

    async def _remote_markers(self, node: int, partitions: list[TopicPartition], producer_id: int,
                              producer_epoch: int, commit: bool,
                              coordinator_epoch: int) -> dict[TopicPartition, ErrorCode]:
        """WriteTxnMarkers v1 with one marker for ``partitions`` to broker ``node``: the
        error of each partition it answers (a partition missing from the answer, or a
        failed call, gets a retriable error)."""
        addr = self._peers.address(node)
        if addr is None:
            return dict.fromkeys(partitions, ErrorCode.broker_not_available)
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}
        try:
            resp = await self._peers.request(node, addr[0], addr[1], 27, 1, body)
        except (KafkaError, OSError) as exc:
            log.warning("WriteTxnMarkers to broker %d failed: %s", node, exc)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        out = dict.fromkeys(partitions, ErrorCode.network_exception)
        for marker in resp.markers:
            for t in marker.topics:
                for r in t.partitions:
                    if (t.name, int(r.partition_index)) in out:
                        out[(t.name, int(r.partition_index))] = ErrorCode(r.error_code)
        return out

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Write a COMMIT/ABORT marker of the producer to each partition led here
        (WriteTxnMarkers); the error of each (UNKNOWN_TOPIC_OR_PARTITION: no such
        partition; NOT_LEADER_OR_FOLLOWER: another broker leads it, or none does, or
        this one lost the leadership before the marker was replicated). A data marker is
        answered once replicated, like an acks=all write (:meth:`_marker_replicated`)."""
        out: dict[TopicPartition, ErrorCode] = {}
        me = self.env.node_id
        acting = self.env.acting()  # a broker that has not caught up leads nothing
        for topic, p in partitions:
            leader = self._leader(topic, p)
            if (leader is not None and leader != me) or not acting:
                out[(topic, p)] = ErrorCode.not_leader_or_follower
                continue
            if topic == OFFSETS_TOPIC:
                out[(topic, p)] = await self._offsets_marker(p, TxnBatch(producer_id, producer_epoch, commit,
                                                                         coordinator_epoch))
            else:
                out[(topic, p)] = await self._data_marker(topic, p, producer_id, producer_epoch, commit,
                                                          coordinator_epoch)
        return out

    async def _offsets_marker(self, partition: int, marker: TxnBatch) -> ErrorCode:
        """The marker through the group coordinator's write path: committed in its log
        and replayed, the producer's pending offsets become visible (or are dropped)."""
        groups = self.groups
        if groups is None:
            return ErrorCode.coordinator_not_available
        if partition not in groups.runtime.partitions:
            if OFFSETS_TOPIC not in self.env.image().topics:
                return ErrorCode.unknown_topic_or_partition
            return ErrorCode.coordinator_load_in_progress
        try:
            await groups.runtime.write(partition, returning(CoordinatorResult(txn_batch=marker)),
                                       self.env.clock.now_ms(), internal=True)
        except CoordinatorUnavailable as exc:
            return exc.error_code
        except ProducerStateError as exc:
            return ErrorCode(exc.error_code)
        return ErrorCode.none

    async def _data_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int) -> ErrorCode:
        timg = self.env.image().topics.get(topic)
        if timg is None or partition not in timg.partitions:
            return ErrorCode.unknown_topic_or_partition
        plog = self.env.partition_log(topic, partition)
        if plog is None:
            return ErrorCode.kafka_storage_error
        try:
            offset = plog.append_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                        self.env.clock.now_ms())
        except ProducerStateError as exc:
            log.warning("marker of producer %d (epoch %d) to %s-%d refused: %s", producer_id, producer_epoch,
                        topic, partition, exc)
            return ErrorCode(exc.error_code)
        except OSError as exc:
            log.error("marker to %s-%d failed: %s", topic, partition, exc)
            return ErrorCode.kafka_storage_error
        self.env.wake((topic, partition))
        if fsync_due(plog):
            try:
                await self.env.durable(plog)
            except OSError as exc:
                log.error("fsync of the marker to %s-%d failed: %s", topic, partition, exc)
                return ErrorCode.kafka_storage_error
        return await self._marker_replicated(topic, partition, offset + 1)

    async def _marker_replicated(self, topic: str, partition: int, end: int) -> ErrorCode:
        """Wait until the high watermark passes a marker (acks=all, as Kafka appends
        markers with requiredAcks=-1), at most :data:`MARKER_REPLICATION_TIMEOUT_S`: a
        leader deposed meanwhile answers NOT_LEADER_OR_FOLLOWER and a timeout
        REQUEST_TIMED_OUT, and the coordinator writes the marker again at the leader."""
        if self.env.replicated is None:
            return ErrorCode.none  # the single node: nothing to replicate to
        fut = self.env.replicated(topic, partition, end)
        done, _ = await asyncio.wait((fut,), timeout=MARKER_REPLICATION_TIMEOUT_S)
        if not done:
            fut.cancel()
            return ErrorCode.request_timed_out
        if fut.cancelled() or fut.exception() is not None:
            return ErrorCode.not_leader_or_follower
        code = fut.result()
        return ErrorCode.none if code in _HW_REACHED else code

    # -- timers ------------------------------------------------------------------------------------
    async def run_timers(self) -> None:
        """Complete decided transactions after loading, then abort timed-out ones and
        remove expired ids on their intervals (see the module doc). Runs until cancelled."""
        cfg = self.env.config
        abort_every = cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        expire_every = cfg["transaction.remove.expired.transaction.cleanup.interval.ms"]
        await self.wait_loaded()
        next_expiry = self.env.clock.now_ms() + expire_every
        while True:
            try:
                self.resume_completions()
                await self.abort_timed_out(self.env.clock.now_ms())
                if self.env.clock.now_ms() >= next_expiry:
                    next_expiry = self.env.clock.now_ms() + expire_every
                    await self.expire_ids(self.env.clock.now_ms())
            except Exception:
                log.exception("transaction timers failed")
            await self.env.clock.sleep(abort_every / 1000)

    def resume_completions(self) -> int:
        """Start writing the markers of every decided transaction not being completed
        (after a load, or after a completion gave up). Returns how many were started."""
        started = 0
        for p, part in list(self.runtime.partitions.items()):
            try:
                shard = self.runtime.shard(p)
            except CoordinatorUnavailable:
                continue
            for m in shard.completing():
                if m.transactional_id not in self._completing:
                    log.info("completing the %s of %r (decided before)", "commit" if m.commit else "abort",
                             m.transactional_id)
                    self._start_completion(m)
                    started += 1
        return started

    async def abort_timed_out(self, now_ms: int) -> int:
        """Abort every ongoing transaction past its timeout (epoch bumped). Returns how many."""
        aborted = 0
        for p in list(self.runtime.partitions):
            shard = self.runtime.working_shard(p)
            if shard is None:
                continue
            for meta in shard.timed_out(now_ms):
                tid, pid, epoch = meta.transactional_id, meta.producer_id, meta.producer_epoch
                try:
                    result = await self.runtime.write(p, lambda s: s.abort_timed_out(tid, pid, epoch, now_ms), now_ms)
                except CoordinatorUnavailable as exc:
                    log.warning("aborting the timed-out transaction of %r failed: %s", tid, exc)
                    continue
                if result.markers is not None:
                    log.info("aborting the transaction of %r (producer %d, epoch %d): older than its timeout "
                             "of %d ms; the producer is fenced", tid, pid, epoch, meta.timeout_ms)
                    self._start_completion(result.markers)
                    aborted += 1
        return aborted

    async def expire_ids(self, now_ms: int) -> int:
        """Remove transactional ids idle past ``transactional.id.expiration.ms``. Returns how many."""
        removed = 0
        for p in list(self.runtime.partitions):
            try:
                result: TxnResult = await self.runtime.write(p, lambda s: s.expire(now_ms), now_ms)
            except CoordinatorUnavailable:
                continue
            removed += len(result.records)
        if removed:
            log.info("removed %d expired transactional id(s)", removed)
        return removed

    def close(self) -> None:
        """Shutting down: completions stop (the next start resumes them from the log), held
        verifications answer NOT_COORDINATOR."""
        for task in self._completing.values():
            task.cancel()
        self._completing.clear()
        self._remote.stop_waiting()  # held TxnOffsetCommits answer NOT_COORDINATOR
        super().close()

    async def close_connections(self) -> None:
        """Close the connections to other brokers (after :meth:`close`)."""
        await self._peers.close()
        await self._remote.close()


def _code(result: TxnResult) -> ErrorCode:
    """The error code a shard result answers."""
    assert isinstance(result.response, ErrorCode)
    return result.response
