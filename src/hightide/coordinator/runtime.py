"""One coordinator runtime for every log-backed state machine (Kafka's CoordinatorRuntime
shape): the consumer-group coordinator over ``__consumer_offsets``, the share coordinator
over ``__share_group_state`` and the metadata image over ``__cluster_metadata`` run on it.
The first two share their service shell (start-up, placement, topic creation, routing):
:class:`~.service.CoordinatorService`.

Theory of operation
-------------------
A coordinator is split into a sans-IO *shard* per partition of its log (a state machine
whose request methods return a result holding a response and records, without changing
state, and whose ``replay`` is the only mutator) and this runtime, which does the IO. A
:class:`ShardAdapter` tells the runtime how to make, load, encode, replay and apply one
kind of shard. For each partition the runtime keeps a :class:`_Partition`: a state
(LOADING, ACTIVE, FAILED), its *committed offset*, the writes in flight and two views:

* the **committed shard** (``shard``): exactly the committed prefix of the log. Every
  read (OffsetFetch, describes, lists, ReadShareGroupStateSummary, lag answers) uses it,
  synchronously and without waiting: a read can never see a record that is not
  committed. It is Kafka's snapshot at the last committed offset, kept by replay instead
  of a snapshot registry.
* the **working shard** (``working``): the committed prefix plus every write appended but
  not yet committed. Writes run against it, so each write sees every earlier write of
  its partition (optimistic locking, generations and member epochs stay exact) — as
  Kafka's write operations see uncommitted state.

*Loading.* :meth:`CoordinatorRuntime.load` replays each partition's log, from its log
start offset to its high watermark, into both views (each record decoded once), in a
task that yields to the event loop after every chunk (``LOAD_CHUNK_BYTES``). Until it is
done the partition is LOADING: reads and writes raise :class:`CoordinatorLoadInProgress`
(COORDINATOR_LOAD_IN_PROGRESS; clients retry). A log that cannot be read, or a record
that does not decode (RecordFormatError; as Kafka's loader, which skips only record
types it does not know): FAILED (COORDINATOR_NOT_AVAILABLE), until the partition is
loaded again (a new leadership or restart). Loaded with ``hold=True``, partitions keep answering
COORDINATOR_LOAD_IN_PROGRESS to everyone but their owner's ``internal`` writes until
:meth:`CoordinatorRuntime.release`: the group and share coordinators first move records an
older hightide stored in the wrong partition (see ``CoordinatorService.move_misplaced``).

*Writes* (:meth:`CoordinatorRuntime.write`) are pipelined. A write runs the operation on
the working shard, appends its records as one batch (page cache, synchronous), replays
them (and the result's live state) into the working shard at once, asks the flusher for
an fsync if the flush policy wants one, and parks the answer in the partition's
in-flight queue. The next write of the partition runs right away, without waiting for
the previous commit: writes that arrive during an fsync append their own batches and
share the next fsync round (group commit), instead of one write per fsync round. All of
this happens between two awaits, so the event loop serializes the writes of a partition
without a lock. Timers (session timeouts, offset expiry, share-state snapshots) are
writes too. An operation that appends nothing still waits behind the writes before it
(its answer may depend on them), like Kafka's writes that wait for the high watermark.

*Committed* is one notion, the partition's committed offset; the in-flight queue is
committed from its head, in log order: a write whose append made an fsync due
(``flush.messages`` / ``log.flush.interval.messages`` reached; always, for 1) once an
fsync covering it is reported done; any other write (interval flushing, the default) as
soon as everything before it is committed — its records are in the page cache, and a
machine crash before the next periodic fsync can lose them, exactly as it can lose an
acknowledged produce. Committing a write applies its result to the committed shard
(replay, live state, log lines, parked completions such as a JoinGroup answered by this
write) and only then answers its caller. So an answer is sent only after its records are
committed, and every read after it sees them.

*Replicated partitions* (cluster mode, a coordinator topic with followers): a write also
waits until the partition's high watermark passes its end (``replicated(partition,
end)``, the replica manager's ``wait_replicated``: the ISR holds it), as Kafka's
coordinator runtime commits at the high watermark. A partition without followers (the
single node, RF=1) is answered at once, so nothing waits there. A high watermark that
passed the write counts even if the ISR has shrunk below ``min.insync.replicas`` since
(NOT_ENOUGH_REPLICAS_AFTER_APPEND: the records are below the high watermark, in the
committed log every replica keeps). A lost leadership (NOT_LEADER_OR_FOLLOWER) unloads
the partition: its unfinished writes answer NOT_COORDINATOR and clients find the new
coordinator, which loads the log the ISR kept. A partition starts loading only once its
high watermark has reached the log end it found (a new leader's high watermark may
start below it until its followers fetch): the load replays the whole log, so the new
coordinator never answers committed offsets older than the old one did.

Both views replay the same record and live objects, which is sound because they are
immutable (frozen records; a classic group is cloned by the operation that changes it).
A write runs to the end of its append without awaiting, and its answer future is
shielded, so a caller that goes away (its connection closed) never cuts a write off
between the append and the replay.

*Transactional writes.* A result carrying a :class:`~hightide.txn.batch.TxnBatch` as
``txn_batch`` is appended as a transactional batch of that producer (TxnOffsetCommit's
offsets), or as a COMMIT/ABORT marker instead of records (``PartitionLog.append_marker``).
An adapter with a ``load_txn(shards, partition, offset, txn, key, value)`` method gets
such records and markers that way when its partitions are loaded (others never see
them), so pending transactional state is rebuilt exactly as replay built it.

*Serial adapters.* An adapter with ``pipelined = False`` (the metadata image, which the
broker reads directly) has one view: its writes run one at a time, the next one only
after the previous is committed and applied, as Kafka's controller did before it
pipelined. Nothing else differs.

*Failures.* An operation that raises appends nothing and changes nothing. A failed
append (the log refuses: offline, full disk) fails that write alone
(COORDINATOR_NOT_AVAILABLE): nothing of it is in the log or in either view. A failed
fsync fails every write of the partition not yet committed, with the adapter's
``storage_error_code`` (NOT_COORDINATOR for groups, KAFKA_STORAGE_ERROR for share state),
and *unloads* the working shard, as Kafka unloads a coordinator whose log fails: it holds
writes that may be lost, and the log holds records nobody was told about. Parked
requests the partition holds are answered NOT_COORDINATOR (clients look the coordinator
up again). Reads keep serving the committed shard, which is exactly what is durable.
Then:

* the log is offline (a real fsync failure: see ``PartitionLog.end_flush``): writes
  answer the storage error until the broker is restarted and recovers the log from disk;
* the log is still writable (the fsync could not even start, e.g. out of descriptors):
  the partition reloads in the background — first an fsync of everything in the log,
  then a replay of the whole log into fresh views, swapped in at the end, so memory again
  equals the log and nothing in it can be lost. Writes answer
  COORDINATOR_LOAD_IN_PROGRESS meanwhile.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..protocol.coordinator_codec import RecordFormatError
from ..protocol.errors import ErrorCode
from ..services import CoordinatorLoadInProgress as CoordinatorLoadInProgress
from ..services import CoordinatorUnavailable as CoordinatorUnavailable
from ..protocol.kv_batch import build_kv_batch
from ..protocol.records import decode_records, validate_batches
from ..txn.batch import TxnBatch

if TYPE_CHECKING:
    from ..log.partition_log import PartitionLog

log = logging.getLogger("hightide.coordinator")

LOAD_CHUNK_BYTES = 64 * 1024  # replayed between two yields to the event loop
RELOAD_RETRY_S = 1.0  # a reload whose fsync failed while the log stayed writable retries after this
S = TypeVar("S")  # a shard
LoggedRecord = tuple[int, "bytes | None", "bytes | None"]  # offset, key, value as stored
TxnLoggedRecord = tuple[int, "bytes | None", "bytes | None", "TxnBatch | None"]  # and the batch's producer


class ShardAdapter(Protocol[S]):
    """How the runtime makes, loads, encodes, replays and applies one kind of shard."""

    topic: str
    storage_error_code: ErrorCode  # the answer when the fsync of a write fails
    pipelined: bool  # two views and pipelined writes (see the module doc); False: serial

    def new_shard(self, partition: int) -> S: ...

    def load_record(self, shards: Sequence[S], partition: int, offset: int, key: bytes | None,
                    value: bytes | None) -> bool:
        """Replay one stored record of ``partition`` into each of ``shards`` (decoded
        once); False if it was skipped."""

    def loaded(self, shards: Sequence[S], partition: int, count: int) -> None:
        """The partition's log is replayed into ``shards`` (``count`` records): arm
        timers in each, log."""

    def records(self, result: Any) -> list[Any]:
        """The records an operation's result asks to append (empty: nothing to write)."""

    def encode(self, records: list[Any]) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) bytes of the records, in order."""

    def replay(self, shard: S, partition: int, result: Any, offsets: list[int]) -> None:
        """The state change of a result: replay its records (at ``offsets``) and its live
        state into ``shard``; nothing else (the working shard, as soon as appended)."""

    def apply(self, shard: S, partition: int, result: Any, offsets: list[int]) -> None:
        """The result is committed: :meth:`replay` it into the committed shard, then its
        side effects (log lines, parked completions)."""

    def abandon(self, partition: int, shards: Sequence[S], results: Sequence[Any]) -> None:
        """The partition's working shard is unloaded: fail every parked request these
        shards hold or these (failed) results would have completed."""


class LoadState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


@dataclass(eq=False)
class _Write:
    """One write: its operation, then (once run) its result, offsets and end offset."""

    fn: Callable[[Any], Any]
    now_ms: int
    fut: asyncio.Future
    result: Any = None
    offsets: list[int] = field(default_factory=list)
    end: int = 0  # the log end offset after it: committed once the committed offset reaches it
    needs_fsync: bool = False
    replicated: bool = True  # False while the high watermark is below ``end`` (replicated partitions)


@dataclass(eq=False)
class _Partition(Generic[S]):
    shard: S  # committed view: every read
    working: S | None = None  # committed + in flight: every write (None: not writable now)
    state: LoadState = LoadState.LOADING
    committed_offset: int = 0
    written_offset: int = 0  # end of the last append (== committed_offset when idle)
    durable_offset: int = 0  # end covered by the fsyncs reported done
    inflight: deque[_Write] = field(default_factory=deque)  # appended, not committed, log order
    queue: deque[_Write] = field(default_factory=deque)  # serial adapters: not run yet
    fenced: CoordinatorUnavailable | None = None  # why writes are refused (log offline)
    held: bool = False  # loaded, but LOADING to callers until released (start-up migration)
    epoch: int = 0  # bumped when the partition's writes fail: older callbacks are ignored
    task: asyncio.Task | None = None  # loading or reloading


class CoordinatorRuntime(Generic[S]):
    """The partitions of one coordinator log. ``log_for(partition)`` gives the partition's
    log (None if unavailable); ``durable(plog)`` an awaitable resolved when everything
    appended to ``plog`` is fsynced (raises OSError if the fsync failed); ``on_append``
    (optional) is told of every append (wakes long-polls); ``replicated(partition,
    end)`` (optional, cluster mode) a future resolved with an ErrorCode once the
    partition's high watermark reaches ``end`` (see the module doc); ``clock`` (the
    node's :class:`~hightide.aio.clock.Clock`) for the reload retry backoff."""

    def __init__(self, adapter: ShardAdapter[S], log_for: Callable[[int], PartitionLog | None],
                 durable: Callable[[PartitionLog], Awaitable[Any]],
                 on_append: Callable[[int], None] | None = None,
                 replicated: Callable[[int, int], asyncio.Future[ErrorCode]] | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.adapter = adapter
        self.clock = clock  # the reload retry backoff; sleep(0) yields between load chunks
        self._log_for = log_for
        self._durable = durable
        self._on_append = on_append
        self._replicated = replicated
        self.partitions: dict[int, _Partition[S]] = {}
        self.loaded_records = 0  # records replayed by the loads so far (tests, logs)

    # -- loading -------------------------------------------------------------------------------
    def load(self, partitions: range | list[int], *, now: bool = False, hold: bool = False) -> None:
        """Start loading ``partitions`` (each in its own task). ``now=True`` replays on the
        spot instead (for logs known to be empty, e.g. a topic just created). ``hold=True``:
        once loaded, the partitions still answer COORDINATOR_LOAD_IN_PROGRESS to everyone
        but ``internal`` writes, until :meth:`release` (a migration runs in between)."""
        for p in partitions:
            part: _Partition[S] = _Partition(self.adapter.new_shard(p), held=hold)
            self.partitions[p] = part
            if now:
                for _ in self._load_chunks(p, part):
                    pass
            else:
                part.task = asyncio.get_running_loop().create_task(self._load(p, part),
                                                                     name=f"load {self.adapter.topic}-{p}")

    def add_loaded(self, partition: int, shard: S, committed_offset: int) -> None:
        """Serve a partition whose shard was loaded elsewhere (the metadata image; a
        serial adapter, so the shard is both views)."""
        part: _Partition[S] = _Partition(shard, shard, LoadState.ACTIVE)
        part.committed_offset = part.written_offset = part.durable_offset = committed_offset
        self.partitions[partition] = part

    async def _load(self, p: int, part: _Partition[S]) -> None:
        await self._wait_log_end_replicated(p)
        for _ in self._load_chunks(p, part):
            await self.clock.sleep(0)

    async def _wait_log_end_replicated(self, p: int) -> None:
        """Replicated partitions: wait (LOADING meanwhile) until the high watermark reaches
        the log end found now, so the load replays everything the ISR holds."""
        plog = self._log_for(p)
        if self._replicated is None or plog is None or plog.high_watermark >= plog.log_end_offset:
            return
        code = await self._replicated(p, plog.log_end_offset)
        if code not in _HW_REACHED:
            log.warning("%s-%d: loading before its high watermark reached the log end (%s)", self.adapter.topic, p,
                        code.name)

    def _load_chunks(self, p: int, part: _Partition[S]) -> Iterator[None]:
        """Load the partition (a yield after each chunk): ACTIVE at the end, FAILED if its
        log cannot be read or holds a record the adapter cannot decode (Kafka's loader
        fails the load then too)."""
        try:
            views = self._views(p, part.shard)
            yield from self._replay_log(p, views)
            self._install(p, part, views)
            part.state = LoadState.ACTIVE
        except (OSError, RecordFormatError) as exc:
            log.error("loading %s-%d failed: %s", self.adapter.topic, p, exc)
            part.state = LoadState.FAILED

    def _views(self, p: int, committed: S | None = None) -> list[S]:
        """Fresh (committed, working) shards; one shard for a serial adapter."""
        first = committed if committed is not None else self.adapter.new_shard(p)
        return [first, self.adapter.new_shard(p)] if self.adapter.pipelined else [first]

    def _replay_log(self, p: int, views: list[S]) -> Iterator[None]:
        """Replay the partition's log to its high watermark into ``views``, a yield after
        each chunk. Raises OSError if the log cannot be read, RecordFormatError (naming
        the offset) for a record the adapter cannot decode (an adapter may skip those
        itself instead)."""
        plog = self._log_for(p)
        count = 0
        load_txn = getattr(self.adapter, "load_txn", None)  # adapters whose logs hold transactional batches
        chunks = iter_txn_record_chunks(plog) if load_txn is not None else _chunks(plog, LOAD_CHUNK_BYTES, False)
        for chunk in chunks:
            try:
                for offset, key, value, txn in chunk:
                    if txn is None or load_txn is None:
                        count += self.adapter.load_record(views, p, offset, key, value)
                    else:
                        count += load_txn(views, p, offset, txn, key, value)
            except RecordFormatError as exc:
                raise RecordFormatError(f"the record at offset {offset} does not decode: {exc}") from exc
            yield
        self.adapter.loaded(views, p, count)
        self.loaded_records += count

    def _install(self, p: int, part: _Partition[S], views: list[S]) -> None:
        plog = self._log_for(p)
        part.shard, part.working = views[0], views[-1]
        part.committed_offset = part.written_offset = part.durable_offset = \
            plog.high_watermark if plog is not None else 0

    async def wait_loaded(self) -> None:
        """Until every partition has finished loading (or failed)."""
        tasks = [part.task for part in self.partitions.values() if part.task is not None and not part.task.done()]
        if tasks:
            await asyncio.wait(tasks)

    def release(self, exclude: set[int] | frozenset[int] = frozenset()) -> None:
        """Serve the partitions loaded with ``hold=True`` (except ``exclude``)."""
        for p, part in self.partitions.items():
            if p not in exclude:
                part.held = False

    def close(self) -> None:
        """Stop loads and reloads in progress (shutdown)."""
        for part in self.partitions.values():
            if part.task is not None and not part.task.done():
                part.task.cancel()

    def unload(self, partition: int, reason: str) -> None:
        """Stop serving ``partition`` (cluster mode: its leadership moved away): its load
        stops, its writes not committed yet and the requests parked in its shards fail
        with NOT_COORDINATOR (clients look the coordinator up again), and it is no longer
        in :attr:`partitions`. Its log is not touched."""
        part = self.partitions.pop(partition, None)
        if part is None:
            return
        part.epoch += 1  # an fsync still running answers nobody
        if part.task is not None and not part.task.done():
            part.task.cancel()
        err = CoordinatorUnavailable(f"{self.adapter.topic}-{partition} {reason}", ErrorCode.not_coordinator)
        failed = list(part.inflight) + list(part.queue)
        part.inflight.clear()
        part.queue.clear()
        for w in failed:
            if not w.fut.done():
                w.fut.set_exception(err)
        if self.adapter.pipelined:
            shards = [s for s in (part.working, part.shard) if s is not None]
            self.adapter.abandon(partition, shards, [w.result for w in failed])

    # -- reads ---------------------------------------------------------------------------------
    def shard(self, partition: int) -> S:
        """The partition's committed shard: committed state only (see the module doc).
        Raises :class:`CoordinatorLoadInProgress` while loading,
        :class:`CoordinatorUnavailable` if the partition is not loaded or failed to load."""
        return self._active(partition).shard

    def working_shard(self, partition: int) -> S | None:
        """The state the next write of the partition will see (committed plus in flight);
        None if the partition takes no writes now. For deciding which timers are due,
        never for answering a read."""
        part = self.partitions.get(partition)
        if part is None or part.state is not LoadState.ACTIVE or part.fenced is not None or part.held:
            return None
        return part.working

    def _active(self, partition: int, internal: bool = False) -> _Partition[S]:
        part = self.partitions.get(partition)
        if part is None:
            raise CoordinatorUnavailable(f"{self.adapter.topic}-{partition} is not loaded")
        if part.state is LoadState.LOADING or (part.held and not internal):
            raise CoordinatorLoadInProgress(f"{self.adapter.topic}-{partition} is loading")
        if part.state is LoadState.FAILED:
            raise CoordinatorUnavailable(f"{self.adapter.topic}-{partition} failed to load")
        return part

    def active_shards(self) -> dict[int, S]:
        """Committed shards of every ACTIVE partition. Raises
        :class:`CoordinatorLoadInProgress` if some partition is still loading (a listing
        would be incomplete)."""
        if any(part.state is LoadState.LOADING or part.held for part in self.partitions.values()):
            raise CoordinatorLoadInProgress(f"{self.adapter.topic} is loading")
        return {p: part.shard for p, part in self.partitions.items() if part.state is LoadState.ACTIVE}

    def committed_offset(self, partition: int) -> int:
        """The offset below which the partition's records are committed (and applied to
        the committed shard)."""
        return self.partitions[partition].committed_offset

    # -- writes --------------------------------------------------------------------------------
    async def write(self, partition: int, op: Callable[[S], Any], now_ms: int, *, internal: bool = False) -> Any:
        """Run ``op(working shard)``, append the records of its result as one batch, and
        return the result once they are committed and applied to the committed shard (see
        the module doc). Raises :class:`CoordinatorUnavailable` if the partition takes no
        writes (loading, reloading, offline), if the append fails (nothing appended or
        applied) or if the fsync fails (the adapter's ``storage_error_code``; applied to
        no read, the working shard is unloaded); an exception from ``op`` itself
        propagates with nothing appended or applied.

        The write is not cut off if the caller goes away (its connection closed): it
        still commits (or fails) and is applied, so memory never misses records of the
        log. ``internal``: the runtime's owner writing to a held partition (migration)."""
        part = self._writable(partition, internal)
        w = _Write(op, now_ms, asyncio.get_running_loop().create_future())
        if self.adapter.pipelined or not (part.inflight or part.queue):
            self._run(partition, part, w)
            self._advance(partition, part)
        else:
            part.queue.append(w)  # serial: run once the write in flight is committed
        if w.fut.done():  # committed (or failed) at once, e.g. interval flushing: no shield needed
            return w.fut.result()
        w.fut.add_done_callback(_retrieve)
        return await asyncio.shield(w.fut)

    def _writable(self, partition: int, internal: bool = False) -> _Partition[S]:
        part = self._active(partition, internal)
        if part.fenced is not None:
            raise part.fenced
        if part.working is None:
            raise CoordinatorLoadInProgress(f"{self.adapter.topic}-{partition} is reloading after a failed write")
        return part

    def _run(self, p: int, part: _Partition[S], w: _Write) -> None:
        """Run the write's operation, append its records, replay them into the working
        shard (pipelined adapters) and queue it as in flight; or fail its future. No
        await in here: writes of a partition never interleave."""
        assert part.working is not None
        try:
            w.result = w.fn(part.working)
            records = self.adapter.records(w.result)
            txn: TxnBatch | None = getattr(w.result, "txn_batch", None)  # see hightide.txn.batch
            if records or (txn is not None and txn.marker is not None):
                w.offsets, w.needs_fsync = self._append(p, records, w.now_ms, txn)
                part.written_offset = w.offsets[-1] + 1
        except Exception as exc:  # the caller gets it; nothing was appended or replayed
            w.fut.set_exception(exc)
            return
        w.end = part.written_offset
        part.inflight.append(w)
        if self.adapter.pipelined:
            try:
                self.adapter.replay(part.working, p, w.result, w.offsets)
            except Exception as exc:  # a replay bug: the working shard is broken, unload it
                log.exception("replaying a write into %s-%d failed", self.adapter.topic, p)
                self._fail(p, part, exc)
                return
        if w.needs_fsync:
            self._when_durable(p, part, w)
        if self._replicated is not None and w.offsets:
            self._when_replicated(p, part, w)

    def _append(self, p: int, records: list[Any], now_ms: int,
                txn: TxnBatch | None = None) -> tuple[list[int], bool]:
        """Append ``records`` as one batch (``txn``: a transactional batch of that producer,
        or its marker instead of records): their offsets (the marker's), and whether the
        flush policy wants them fsynced before they count as committed. Raises
        CoordinatorUnavailable."""
        plog = self._log_for(p)
        if plog is None:
            raise CoordinatorUnavailable(f"{self.adapter.topic}-{p} is not available")
        try:
            if txn is not None and txn.marker is not None:
                base = plog.append_marker(txn.producer_id, txn.producer_epoch, txn.marker, txn.coordinator_epoch,
                                          now_ms)
                count = 1
            else:
                batch = build_kv_batch(self.adapter.encode(records), now_ms,
                                       producer_id=-1 if txn is None else txn.producer_id,
                                       producer_epoch=-1 if txn is None else txn.producer_epoch,
                                       base_sequence=-1 if txn is None else _next_sequence(plog, txn),
                                       is_transactional=txn is not None)
                base = plog.append(batch, validate_batches(batch, client_origin=False), now_ms).base_offset
                count = len(records)
        except OSError as exc:
            log.error("append to %s-%d failed: %s", self.adapter.topic, p, exc)
            raise CoordinatorUnavailable(f"append to {self.adapter.topic}-{p} failed: {exc}") from exc
        if self._on_append is not None:
            self._on_append(p)
        return list(range(base, base + count)), fsync_due(plog)

    def _when_durable(self, p: int, part: _Partition[S], w: _Write) -> None:
        """Ask for an fsync covering ``w`` (shared with every write and produce that asks
        before the flusher's next round); commit or fail when it is done."""
        epoch = part.epoch
        plog = self._log_for(p)
        assert plog is not None
        fut = asyncio.ensure_future(self._durable(plog))

        def done(f: asyncio.Future) -> None:
            exc: BaseException | None = asyncio.CancelledError() if f.cancelled() else f.exception()
            if part.epoch != epoch:
                return  # the partition's writes failed meanwhile
            if exc is None:
                part.durable_offset = max(part.durable_offset, w.end)
                self._advance(p, part)
            else:
                self._fail(p, part, exc)
        fut.add_done_callback(done)

    def _when_replicated(self, p: int, part: _Partition[S], w: _Write) -> None:
        """Replicated partitions: ``w`` commits only once the high watermark passes its
        end (at once for a partition without followers); a lost leadership unloads the
        partition (NOT_COORDINATOR to every unfinished write)."""
        assert self._replicated is not None
        fut = self._replicated(p, w.end)
        if fut.done() and not fut.cancelled() and fut.result() in _HW_REACHED:
            return  # no followers (or already replicated): nothing to wait for
        w.replicated = False
        epoch = part.epoch

        def done(f: asyncio.Future[ErrorCode]) -> None:
            if part.epoch != epoch or self.partitions.get(p) is not part:
                return  # failed or unloaded meanwhile
            code = ErrorCode.not_leader_or_follower if f.cancelled() or f.exception() else f.result()
            if code in _HW_REACHED:
                w.replicated = True
                self._advance(p, part)
            else:
                log.warning("%s-%d: a write was not replicated (%s); unloading", self.adapter.topic, p, code.name)
                self.unload(p, f"lost its leadership while replicating a write ({code.name})")
        fut.add_done_callback(done)

    def _advance(self, p: int, part: _Partition[S]) -> None:
        """Commit the in-flight writes from the head while they are committable; apply
        each to the committed shard and answer it. Serial adapters: then run the next
        queued write."""
        while True:
            while part.inflight:
                w = part.inflight[0]
                if (w.needs_fsync and w.end > part.durable_offset) or not w.replicated:
                    return
                part.inflight.popleft()
                part.committed_offset = max(part.committed_offset, w.end)
                try:
                    self.adapter.apply(part.shard, p, w.result, w.offsets)
                except Exception as exc:  # an apply bug: answer it, reload from the log
                    log.exception("applying a committed write to %s-%d failed", self.adapter.topic, p)
                    w.fut.set_exception(exc)
                    self._fail(p, part, exc)
                    return
                if not w.fut.done():
                    w.fut.set_result(w.result)
            if not part.queue or part.working is None:
                return
            self._run(p, part, part.queue.popleft())

    def _fail(self, p: int, part: _Partition[S], exc: BaseException) -> None:
        """An fsync (or an apply) failed: fail every write of the partition not committed
        yet, unload the working shard and reload from the log if it is writable, else
        refuse writes (reads keep the committed shard)."""
        topic = self.adapter.topic
        err = CoordinatorUnavailable(f"fsync of {topic}-{p} failed: {exc}", self.adapter.storage_error_code)
        part.epoch += 1
        failed = list(part.inflight) + list(part.queue)
        part.inflight.clear()
        part.queue.clear()
        for w in failed:
            if not w.fut.done():
                w.fut.set_exception(err)
        plog = self._log_for(p)
        offline = plog is None or plog.offline_reason is not None
        if self.adapter.pipelined and part.working is not None:
            dirty, part.working = part.working, None
            self.adapter.abandon(p, [dirty, part.shard], [w.result for w in failed])
            log.error("%s-%d: %d write(s) failed (%s); unloaded its working state, %s", topic, p, len(failed),
                      exc, "writes refused until restart (log offline)" if offline else "reloading from the log")
        if offline:
            reason = plog.offline_reason if plog is not None else "no log"
            part.fenced = CoordinatorUnavailable(f"{topic}-{p} takes no writes: {reason}",
                                                 self.adapter.storage_error_code)
        elif self.adapter.pipelined:
            part.task = asyncio.get_running_loop().create_task(self._reload(p, part), name=f"reload {topic}-{p}")
        else:  # serial: memory holds committed writes only; the log may hold the failed one
            part.written_offset = part.durable_offset = part.committed_offset

    async def _reload(self, p: int, part: _Partition[S]) -> None:
        """Make everything in the log durable, then replay it into fresh views and swap
        them in; reads keep the old committed shard meanwhile."""
        plog = self._log_for(p)
        while True:
            try:
                if plog is None or plog.offline_reason is not None:
                    raise OSError(f"log offline: {plog.offline_reason if plog else 'no log'}")
                await self._durable(plog)
                views = self._views(p)
                for _ in self._replay_log(p, views):
                    await self.clock.sleep(0)
            except RecordFormatError as exc:  # (a load decoded the same log: not seen)
                part.fenced = CoordinatorUnavailable(f"{self.adapter.topic}-{p} takes no writes: {exc}",
                                                     self.adapter.storage_error_code)
                log.error("%s-%d: reload failed, writes refused until restart: %s", self.adapter.topic, p, exc)
                return
            except OSError as exc:
                if plog is None or plog.offline_reason is not None:
                    part.fenced = CoordinatorUnavailable(f"{self.adapter.topic}-{p} takes no writes: {exc}",
                                                         self.adapter.storage_error_code)
                    log.error("%s-%d: reload failed, writes refused until restart: %s", self.adapter.topic, p, exc)
                    return
                log.warning("%s-%d: reload failed (%s), retrying", self.adapter.topic, p, exc)
                await self.clock.sleep(RELOAD_RETRY_S)
                continue
            self._install(p, part, views)
            log.warning("%s-%d reloaded from its log (to offset %d)", self.adapter.topic, p, part.committed_offset)
            return


_HW_REACHED = (ErrorCode.none, ErrorCode.not_enough_replicas_after_append)  # the HW passed the write


def _retrieve(fut: asyncio.Future) -> None:
    """Mark a write's exception retrieved (its caller may be gone)."""
    if not fut.cancelled():
        fut.exception()


def _next_sequence(plog: PartitionLog, txn: TxnBatch) -> int:
    """The sequence of the coordinator's next transactional batch of ``txn``'s producer:
    0 in a new epoch, else one past the producer's last. Kafka writes these batches
    without a sequence and skips the sequence checks for coordinator appends; the
    partition log checks every batch of a producer id as a client's, so the coordinator
    numbers its batches the way a client would (readers ignore the field)."""
    entry = plog.producer_state.last_entry(txn.producer_id)
    if entry is None or entry.epoch != txn.producer_epoch or entry.last_seq < 0:
        return 0
    return 0 if entry.last_seq == 2**31 - 1 else entry.last_seq + 1


def fsync_due(plog: PartitionLog) -> bool:
    """True when the log's flush policy says what was just appended must be fsynced
    before it is acknowledged (``flush.messages`` reached), as for a produce."""
    n = plog.config.flush_interval_messages
    return n is not None and plog.unflushed_messages >= n


def iter_record_chunks(plog: PartitionLog | None, chunk_bytes: int = LOAD_CHUNK_BYTES) -> Iterator[list[LoggedRecord]]:
    """The partition's non-control records from its log start offset to its high
    watermark, as lists of ``(offset, key, value)``, about ``chunk_bytes`` of log each."""
    for chunk in _chunks(plog, chunk_bytes, False):
        yield [(offset, key, value) for offset, key, value, _ in chunk]


def iter_txn_record_chunks(plog: PartitionLog | None,
                           chunk_bytes: int = LOAD_CHUNK_BYTES) -> Iterator[list[TxnLoggedRecord]]:
    """Like :func:`iter_record_chunks`, as ``(offset, key, value, txn)``: the records of a
    transactional batch carry its :class:`~hightide.txn.batch.TxnBatch` (else None), and
    each transaction marker comes as ``(offset, None, None, TxnBatch(marker=commit))``."""
    return _chunks(plog, chunk_bytes, True)


def _chunks(plog: PartitionLog | None, chunk_bytes: int, txn: bool) -> Iterator[list[TxnLoggedRecord]]:
    if plog is None:
        return
    offset = plog.log_start_offset
    end = plog.high_watermark
    while offset < end:
        chunk = plog.read(offset, chunk_bytes, max_offset=end)
        if not chunk.data:
            return
        out: list[TxnLoggedRecord] = []
        for h in validate_batches(chunk.data, client_origin=False):
            producer = TxnBatch(h.producer_id, h.producer_epoch) if txn and h.is_transactional else None
            if not h.is_control or producer is not None:
                batch = memoryview(chunk.data)[h.position:h.position + h.size]
                for rec in decode_records(batch):
                    if rec.offset < offset:
                        continue
                    if h.is_control:
                        out.append((rec.offset, None, None, _marker(producer, rec.key, rec.value)))
                    else:
                        out.append((rec.offset, None if rec.key is None else bytes(rec.key),
                                    None if rec.value is None else bytes(rec.value), producer))
            offset = h.last_offset + 1
        yield out


def _marker(producer: TxnBatch | None, key: Any, value: Any) -> TxnBatch | None:
    """The marker a control record holds (key: int16 version, int16 type, 1 = COMMIT;
    value: int16 version, int32 coordinator epoch); None if it is not a marker."""
    if producer is None or key is None or len(key) < 4:
        return None
    ctype = int.from_bytes(bytes(key[2:4]), "big", signed=True)
    if ctype not in (0, 1):
        return None
    epoch = int.from_bytes(bytes(value[2:6]), "big", signed=True) if value is not None and len(value) >= 6 else 0
    return TxnBatch(producer.producer_id, producer.producer_epoch, ctype == 1, epoch)
