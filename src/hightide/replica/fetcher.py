"""Followers fetch from leaders (Kafka's ``ReplicaFetcherManager`` / ``ReplicaFetcherThread``
/ ``AbstractFetcherThread``).

Theory of operation. The replica manager (:mod:`.manager`) tells the
:class:`ReplicaFetcherManager` which partitions this broker follows, from whom and in which
leader epoch (:meth:`~ReplicaFetcherManager.follow` / :meth:`~ReplicaFetcherManager.stop_following`,
from ``apply_image``). The manager keeps one :class:`ReplicaFetcher` task per leader
broker, each fetching all the partitions it follows from that leader in one Fetch (v17;
ReplicaState = this node's id and broker epoch, per partition CurrentLeaderEpoch,
FetchOffset = the local log end, LastFetchedEpoch = the local log's latest epoch, the
follower's log start offset; MaxWaitMs ``replica.fetch.wait.max.ms`` 500, MinBytes 1,
1 MiB per partition, 10 MiB per response), packed and its answer decoded by hand
(:mod:`hightide.protocol.replica_fetch`: no kio on this path, the records are views of
the answer's frame).

Per partition, each answer is one of:

* **DivergingEpoch** (Fetch v12+): the leader's log differs from ours after the epoch we
  named. We truncate where :func:`~hightide.log.leader_epochs.truncation_point` says
  (Kafka's rules), wait until the truncation is durable (the flusher rewrites the
  recovery point and the epoch checkpoint, off the loop), and fetch again from the new
  log end with our new latest epoch; the leader checks again.
* **records**: appended as they are (:meth:`PartitionLog.append_as_follower`: the
  leader's offsets, epochs and bytes; CRC checked first), then the leader's high
  watermark (capped at our log end) and log start offset are taken. When the topic's
  ``flush.messages`` says so, the next fetch waits until they are fsynced, so the fetch
  offset that tells the leader we have them is never ahead of what is durable; otherwise
  the flusher's usual policy (``flush.ms``) applies, as on the leader.
* **OFFSET_OUT_OF_RANGE**: below the leader's log start we restart empty there
  (``truncate_fully_and_start_at``); past its end we ask OffsetForLeaderEpoch (23) for
  our latest epoch and truncate to its answer (Kafka's "truncating" state, also used
  when our log knows no epoch at all).
* **FENCED_LEADER_EPOCH** (our epoch is older than the leader's): the partition waits
  until the metadata gives it a newer epoch (the next ``follow``). **NOT_LEADER_OR_FOLLOWER**,
  **UNKNOWN_LEADER_EPOCH**, an unknown topic and every other error: the partition backs
  off ``replica.fetch.backoff.ms`` (1 s) and retries; so does every partition when the
  leader cannot be reached.

Appends and truncations run on the event loop like a produce (page cache writes, no
fsync); every fsync is the flusher's, on its threads.

Built from (never the broker): ``peers`` (:class:`~.peers.PeerClients`: the leaders'
addresses and requests to them), this broker's ``node_id`` and ``broker_epoch`` (a
callable: -1 until registered), ``logs`` (a callable: the open partition logs), ``image``
(a callable: the metadata image, for topic ids), ``durable`` (the flusher's: a future
resolved once a log is fsynced), ``waiters`` (woken when a follower's high watermark
moves, for parked fetches) and ``clock`` (:mod:`hightide.aio.clock`: backoffs, append
times).
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..client.errors import KafkaError
from ..log.leader_epochs import truncation_point
from ..log.partition_log import LogOffline, PartitionLog, UnexpectedAppendOffset
from ..protocol.errors import ErrorCode
from ..protocol.records import InvalidRecords, validate_batches
from ..protocol.replica_fetch import FetchPartitionRequest, decode_replica_fetch_response, encode_replica_fetch
from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.tasks import STOP_WAIT_S, cancel_and_wait, wait_event
from ..aio.waiters import AppendWaiters
from .peers import PeerClients

if TYPE_CHECKING:
    from ..cluster.image import MetadataImage
    from ..log.manager import LogManager

log = logging.getLogger("hightide.replica_fetcher")

TopicPartition = tuple[str, int]
FETCH = 1
FETCH_VERSION = 17  # the version :mod:`hightide.protocol.replica_fetch` encodes and decodes by hand
OFFSET_FOR_LEADER_EPOCH = 23
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
REPLICA_FETCH_WAIT_MAX_MS = 500  # replica.fetch.wait.max.ms
REPLICA_FETCH_MIN_BYTES = 1  # replica.fetch.min.bytes
REPLICA_FETCH_MAX_BYTES = 1 << 20  # replica.fetch.max.bytes (per partition)
REPLICA_FETCH_RESPONSE_MAX_BYTES = 10 << 20  # replica.fetch.response.max.bytes
REPLICA_FETCH_BACKOFF_S = 1.0  # replica.fetch.backoff.ms
REQUEST_TIMEOUT_S = 30.0  # replica.socket.timeout.ms


@dataclass(eq=False)
class PartitionFetchState:
    """One followed partition (Kafka's ``PartitionFetchState``)."""

    tp: TopicPartition
    leader_epoch: int
    #: ask OffsetForLeaderEpoch before fetching (our log knows no epoch, or it is past the
    #: leader's end)
    truncating: bool = False
    #: not before this monotonic time (a backoff); ``math.inf``: fenced, until the next follow
    delayed_until: float = 0.0
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False)  # whose monotonic() ``delayed_until`` is on

    def delay(self, seconds: float = REPLICA_FETCH_BACKOFF_S) -> None:
        self.delayed_until = self.clock.monotonic() + seconds


class ReplicaFetcherManager:
    """The follower side of every partition this broker follows (see the module doc)."""

    def __init__(self, peers: PeerClients, *, node_id: int, broker_epoch: Callable[[], int],
                 logs: Callable[[], LogManager | None], image: Callable[[], MetadataImage],
                 durable: Callable[[PartitionLog], Awaitable[None]], waiters: AppendWaiters,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.peers = peers
        self.clock = clock  # backoffs, record timestamps (the long-poll waits run on the loop's time)
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.logs = logs
        self.image = image
        self.durable = durable
        self.waiters = waiters
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self._closed = False

    def follow(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> None:
        """Fetch ``tp`` from ``leader_id`` in ``leader_epoch`` from now on (moving it from
        the fetcher of a former leader). A new epoch of the same leader restarts its
        state: the next fetch names our latest epoch and the leader checks divergence."""
        if self._closed or leader_id < 0:
            self.stop_following(tp)
            return
        old = self._leader_of.get(tp)
        if old is not None and old != leader_id:
            self.stop_following(tp)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
            fetcher.start()
        self._leader_of[tp] = leader_id
        fetcher.add(tp, leader_epoch)
        log.info("following %s-%d: leader %d, leader epoch %d", tp[0], tp[1], leader_id, leader_epoch)

    def stop_following(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp`` (its fetcher stops when it has no partition left)."""
        leader_id = self._leader_of.pop(tp, None)
        if leader_id is None:
            return
        fetcher = self.fetchers.get(leader_id)
        if fetcher is not None and fetcher.remove(tp) == 0:
            del self.fetchers[leader_id]
            fetcher.stop()

    def following(self) -> dict[TopicPartition, int]:
        """Followed partitions and their leader ids."""
        return dict(self._leader_of)

    async def close(self, stop_wait_s: float = STOP_WAIT_S) -> None:
        """Stop every fetcher (each waited for up to ``stop_wait_s``: a round in progress
        ends at its next await; a warning names one that does not) and close the
        connections."""
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._leader_of.clear()
        for f in fetchers:
            f.stop()
        await asyncio.gather(*(f.wait_stopped(stop_wait_s) for f in fetchers))
        await self.peers.close()


class ReplicaFetcher:
    """Fetches every partition followed from one leader broker (one asyncio task)."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self._manager = manager
        self.leader_id = leader_id
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._unreachable_logged = False

    # -- membership ---------------------------------------------------------------------------
    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        st = self.partitions.get(tp)
        if st is not None and st.leader_epoch == leader_epoch and st.delayed_until != math.inf:
            return
        self.partitions[tp] = PartitionFetchState(tp, leader_epoch, clock=self._manager.clock)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> int:
        """Drop ``tp``; returns how many partitions remain."""
        self.partitions.pop(tp, None)
        self._wakeup.set()
        return len(self.partitions)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self, timeout_s: float = STOP_WAIT_S) -> bool:
        """Wait up to ``timeout_s`` for the task (cancelled by :meth:`stop`) to end; True
        if it has. A cancellation of the caller propagates."""
        return await cancel_and_wait(self._task, timeout_s)

    # -- the loop -----------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopped:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for leader %d failed a round; retrying", self.leader_id)
                await self._manager.clock.sleep(REPLICA_FETCH_BACKOFF_S)

    async def _round(self) -> None:
        """Wait until some partition may fetch, then one OffsetForLeaderEpoch (for the
        truncating ones) or one Fetch (for the others) round trip and its processing."""
        now = self._manager.clock.monotonic()
        ready = [st for st in self.partitions.values() if st.delayed_until <= now]
        if not ready:
            self._wakeup.clear()
            nxt = min((st.delayed_until for st in self.partitions.values()), default=math.inf)
            await wait_event(self._wakeup, None if nxt == math.inf else max(0.0, nxt - now))
            return
        addr = self._manager.peers.address(self.leader_id)
        if addr is None:  # not registered, fenced, or no inter-broker listener: the metadata will move it
            self._backoff(ready, "leader %d has no alive endpoint", self.leader_id)
            return
        truncating = [st for st in ready if st.truncating]
        try:
            if truncating:
                await self._offsets_for_leader_epoch(addr, truncating)
            else:
                await self._fetch(addr, ready)
        except (KafkaError, OSError) as exc:
            self._backoff(ready, "fetch from leader %d at %s:%d failed: %s", self.leader_id, *addr, exc)
            return
        self._unreachable_logged = False

    def _backoff(self, states: list[PartitionFetchState], msg: str, *args: Any) -> None:
        if not self._unreachable_logged:
            log.warning(msg + " (retrying every %.0f s)", *args, REPLICA_FETCH_BACKOFF_S)
            self._unreachable_logged = True
        for st in states:
            st.delay()

    def _log(self, tp: TopicPartition) -> PartitionLog | None:
        logs = self._manager.logs()
        return None if logs is None else logs.get(tp)

    def _current(self, st: PartitionFetchState) -> bool:
        """Still followed with the same state (not removed or re-added meanwhile)."""
        return self.partitions.get(st.tp) is st

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        t = self._manager.image().topics.get(topic)
        return None if t is None else t.topic_id

    # -- Fetch --------------------------------------------------------------------------------
    async def _fetch(self, addr: tuple[str, int], ready: list[PartitionFetchState]) -> None:
        by_topic: dict[uuid.UUID, list[FetchPartitionRequest]] = {}
        sent: dict[tuple[uuid.UUID, int], tuple[PartitionFetchState, PartitionLog, int]] = {}
        for st in ready:
            plog, tid = self._log(st.tp), self._topic_id(st.tp[0])
            if plog is None or tid is None:
                st.delay()
                continue
            if plog.epochs.latest_epoch is None and plog.log_end_offset > plog.log_start_offset:
                st.truncating = True  # data without any epoch: ask the leader first
                continue
            last = plog.epochs.latest_epoch
            by_topic.setdefault(tid, []).append(FetchPartitionRequest(
                st.tp[1], st.leader_epoch, plog.log_end_offset, -1 if last is None else last, plog.log_start_offset,
                REPLICA_FETCH_MAX_BYTES))
            sent[(tid, st.tp[1])] = (st, plog, plog.log_end_offset)
        if not sent:
            return
        body = encode_replica_fetch(self._manager.node_id, self._manager.broker_epoch(), REPLICA_FETCH_WAIT_MAX_MS,
                                    REPLICA_FETCH_MIN_BYTES, REPLICA_FETCH_RESPONSE_MAX_BYTES, list(by_topic.items()))
        resp = await self._manager.peers.request(self.leader_id, addr[0], addr[1], FETCH, FETCH_VERSION, body,
                                                 decoder=decode_replica_fetch_response)
        if resp.error_code != ErrorCode.none:
            self._backoff([s for s, _, _ in sent.values()], "leader %d answered Fetch with %s", self.leader_id,
                          ErrorCode(resp.error_code).name.upper())
            return
        durable: list[PartitionLog] = []
        for t in resp.responses:
            for pd in t.partitions:
                entry = sent.get((t.topic_id, int(pd.partition_index)))
                if entry is None or not self._current(entry[0]):
                    continue  # no longer followed, or followed afresh (a new leader epoch)
                st, plog, offset = entry
                if plog is not self._log(st.tp) or plog.log_end_offset != offset:
                    continue  # reopened or changed meanwhile: the next round starts afresh
                if await self._partition_answer(st, plog, pd):
                    durable.append(plog)
        if durable:  # flush.messages reached, or a truncation: durable before the next fetch
            await asyncio.gather(*(self._manager.durable(p) for p in durable), return_exceptions=True)

    async def _partition_answer(self, st: PartitionFetchState, plog: PartitionLog, pd: Any) -> bool:
        """Apply one partition of a Fetch answer; True if it must be made durable before
        the next fetch."""
        code = ErrorCode(int(pd.error_code))
        tp = st.tp
        if code == ErrorCode.none:
            div = pd.diverging_epoch
            if div is not None and (div.epoch >= 0 or div.end_offset >= 0):
                return self._truncate(st, plog, int(div.epoch), int(div.end_offset), "DivergingEpoch")
            need_flush = False
            records = pd.records
            if records:
                need_flush = self._append(st, plog, records)
            plog.high_watermark = min(int(pd.high_watermark), plog.log_end_offset)
            if pd.log_start_offset >= 0:
                plog.maybe_increment_log_start(int(pd.log_start_offset))
            self._manager.waiters.wake(tp)
            return need_flush
        if code == ErrorCode.offset_out_of_range:
            leader_start = int(pd.log_start_offset)
            if plog.swap_pending:  # the log cleaner is installing a swap: no truncation now
                st.delay(0.1)
                return False
            if 0 <= leader_start and plog.log_end_offset < leader_start:
                log.info("%s-%d: fetch offset %d is below the leader's log start offset %d: restarting the "
                         "log there", *tp, plog.log_end_offset, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
                return True
            st.truncating = True  # past the leader's end (or unknown): ask where our epoch ends
            return False
        if code == ErrorCode.fenced_leader_epoch:
            log.info("%s-%d: leader %d has a newer leader epoch than %d; waiting for the metadata", *tp,
                     self.leader_id, st.leader_epoch)
            st.delayed_until = math.inf
            return False
        log.log(logging.INFO if code in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch)
                else logging.WARNING, "%s-%d: leader %d answered %s; retrying in %.0f s", *tp, self.leader_id,
                code.name.upper(), REPLICA_FETCH_BACKOFF_S)
        st.delay()
        return False

    def _append(self, st: PartitionFetchState, plog: PartitionLog, records: bytes | memoryview) -> bool:
        """Append fetched records; True if the flush policy wants them fsynced now."""
        try:
            headers = validate_batches(records, None, client_origin=False)
            plog.append_as_follower(records, headers, self._manager.clock.now_ms())
        except (InvalidRecords, UnexpectedAppendOffset) as exc:
            log.error("%s-%d: records from leader %d not appended: %s", *st.tp, self.leader_id, exc)
            st.delay()
            return False
        except LogOffline as exc:
            log.error("%s-%d: %s", *st.tp, exc)
            st.delayed_until = math.inf
            return False
        except OSError as exc:
            log.error("%s-%d: append failed: %s", *st.tp, exc)
            st.delay()
            return False
        n = plog.config.flush_interval_messages
        return n is not None and plog.unflushed_messages >= n

    def _truncate(self, st: PartitionFetchState, plog: PartitionLog, epoch: int, end_offset: int, why: str) -> bool:
        """Truncate where the leader's answer says; True (the truncation must be made
        durable before the next fetch) unless the log cleaner is installing a swap
        (then the partition retries shortly)."""
        if plog.swap_pending:
            st.delay(0.1)
            return False
        offset, done = truncation_point(epoch, end_offset, plog.epochs, plog.log_end_offset, plog.high_watermark)
        if offset < plog.log_end_offset:
            log.info("%s-%d: truncating to offset %d (log end %d) after %s (epoch %d, end offset %d) from "
                     "leader %d", *st.tp, offset, plog.log_end_offset, why, epoch, end_offset, self.leader_id)
        plog.truncate_to(offset)
        st.truncating = st.truncating and not done
        return True

    # -- OffsetForLeaderEpoch -----------------------------------------------------------------
    async def _offsets_for_leader_epoch(self, addr: tuple[str, int], states: list[PartitionFetchState]) -> None:
        """Kafka's truncating state: ask where our latest epoch ends on the leader and
        truncate there (to our high watermark when our log knows no epoch)."""
        asks: dict[TopicPartition, tuple[PartitionFetchState, PartitionLog, int]] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        durable = []
        for st in states:
            plog = self._log(st.tp)
            if plog is None:
                st.delay()
                continue
            last = plog.epochs.latest_epoch
            if last is None:
                if plog.swap_pending:  # the log cleaner is installing a swap: no truncation now
                    st.delay(0.1)
                    continue
                plog.truncate_to(plog.high_watermark)  # Kafka's truncateToHighWatermark
                st.truncating = False
                durable.append(plog)
                continue
            asks[st.tp] = (st, plog, plog.log_end_offset)
            topics.setdefault(st.tp[0], []).append(
                {"partition": st.tp[1], "current_leader_epoch": st.leader_epoch, "leader_epoch": last})
        if topics:
            body = {"replica_id": self._manager.node_id,
                    "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]}
            resp = await self._manager.peers.request(self.leader_id, addr[0], addr[1], OFFSET_FOR_LEADER_EPOCH,
                                                     OFFSET_FOR_LEADER_EPOCH_VERSION, body)
            for t in resp.topics:
                for p in t.partitions:
                    entry = asks.get((t.topic, int(p.partition)))
                    if entry is None or not self._current(entry[0]) or entry[1].log_end_offset != entry[2]:
                        continue
                    st, plog, _ = entry
                    code = ErrorCode(int(p.error_code))
                    if code != ErrorCode.none:
                        log.info("%s-%d: OffsetForLeaderEpoch answered %s by leader %d", *st.tp, code.name.upper(),
                                 self.leader_id)
                        if code == ErrorCode.fenced_leader_epoch:
                            st.delayed_until = math.inf  # until the metadata names a newer epoch
                        else:
                            st.delay()
                        continue
                    before = plog.log_end_offset
                    if self._truncate(st, plog, int(p.leader_epoch), int(p.end_offset), "OffsetForLeaderEpoch"):
                        durable.append(plog)
                    if plog.log_end_offset == before:
                        st.delay()  # nothing to cut: the fetch that sent us here would fail the same way at once
        if durable:
            await asyncio.gather(*(self._manager.durable(p) for p in durable), return_exceptions=True)
