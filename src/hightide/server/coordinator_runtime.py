"""One coordinator runtime for every log-backed state machine (Kafka's CoordinatorRuntime
shape): the consumer-group coordinator over ``__consumer_offsets``, the share coordinator
over ``__share_group_state`` and the metadata image over ``__cluster_metadata`` run on it.

Theory of operation
-------------------
A coordinator is split into a sans-IO *shard* per partition of its log (a state machine
whose request methods return a result holding a response and records, without changing
state, and whose ``replay`` is the only mutator) and this runtime, which does the IO. A
:class:`ShardAdapter` tells the runtime how to make, load, encode and apply one kind of
shard. For each partition the runtime keeps a :class:`_Partition`: its shard, a state
(LOADING, ACTIVE, FAILED), its *committed offset* and a write lock.

*Loading.* :meth:`CoordinatorRuntime.load` replays each partition's log, from its log
start offset to its high watermark, in a task that yields to the event loop after every
chunk (``LOAD_CHUNK_BYTES``), so a big log never stalls the loop for long. Until it is done
the partition is LOADING: reads and writes raise :class:`CoordinatorLoadInProgress`
(answered COORDINATOR_LOAD_IN_PROGRESS; clients retry). A partition whose log cannot be
read is FAILED (COORDINATOR_NOT_AVAILABLE).

*Writes* (:meth:`CoordinatorRuntime.write`): under the partition's write lock, call the
operation on the shard, append its records as one batch, wait until that batch is
*committed*, and only then apply the result to the shard (replay the records with their
offsets, then whatever the adapter applies besides: live state, parked completions) and
return it. Timers (session timeouts, offset expiry, share-state snapshots) are
operations too and take the same path. A write runs in a task of its own, so a caller
that goes away (its connection closed) never cuts it off between append and apply.

*Committed* is one notion, the partition's committed offset; a batch is committed once
the committed offset passes its last record. Today (one node) the offset advances:

* with ``flush.messages`` / ``log.flush.interval.messages`` set, when the append makes
  an fsync due (``unflushed >= flush.messages``; always, for 1): once the
  :class:`~.flusher.Flusher` reports the fsync of that batch done — the answer is sent
  after the records are on disk;
* otherwise (interval flushing, the default): right after the append — the records are
  in the page cache; a crash of the machine (not of the process) before the next
  periodic fsync can lose them, exactly as it can lose an acknowledged produce.

With replication the committed offset becomes the high watermark (replicated to the
ISR); nothing above this notion changes.

*Reads serve committed state only.* Because a result is applied only once committed, the
shard always holds exactly the committed prefix of its log: a read (OffsetFetch,
ReadShareGroupStateSummary, describe, lag answers) uses the shard directly, without the
lock, and can never see a record whose commit has not completed. The price, and the
choice made here instead of Kafka's snapshot registry (writes see uncommitted state,
reads a snapshot at the committed offset): the write lock serializes the operations of
one partition, so the next operation runs only after the previous one's records are
committed and applied. Every write therefore sees all earlier writes (read-your-writes
within a shard holds trivially) and no rollback is ever needed. With interval flushing
commit is immediate and nothing waits; with ``flush.messages=1`` a partition completes
one operation per fsync (the flusher's group commit still shares one fsync among
partitions and with produce). Batching several operations of one partition into one
append would need Kafka's snapshots; not needed yet.

*Failures.* A failed append (the log refuses: offline, full disk) raises
:class:`CoordinatorUnavailable` (COORDINATOR_NOT_AVAILABLE) and applies nothing. A
failed fsync raises :class:`CoordinatorUnavailable` with the adapter's
``storage_error_code`` and applies nothing either; the log is then offline for appends
(see ``PartitionLog.end_flush``), so every later write fails the same way while reads
keep serving the committed state — which is what is durable. After a restart the records
whose fsync failed may or may not be in the log, like any unacknowledged write.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..protocol.errors import ErrorCode
from ..protocol.records import build_batch, decode_records, validate_batches

if TYPE_CHECKING:
    from ..log.partition_log import PartitionLog

log = logging.getLogger("hightide.coordinator")

LOAD_CHUNK_BYTES = 64 * 1024  # replayed between two yields to the event loop
S = TypeVar("S")  # a shard
LoggedRecord = tuple[int, "bytes | None", "bytes | None"]  # offset, key, value as stored


class CoordinatorUnavailable(Exception):
    """The coordinator cannot serve this request; answer :attr:`error_code`
    (COORDINATOR_NOT_AVAILABLE unless said otherwise)."""

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.coordinator_not_available) -> None:
        super().__init__(message)
        self.error_code = error_code


class CoordinatorLoadInProgress(CoordinatorUnavailable):
    """The partition's log is still being replayed (COORDINATOR_LOAD_IN_PROGRESS)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.coordinator_load_in_progress)


class ShardAdapter(Protocol[S]):
    """How the runtime makes, loads, encodes and applies one kind of shard."""

    topic: str
    storage_error_code: ErrorCode  # the answer when the fsync of a write fails

    def new_shard(self, partition: int) -> S: ...

    def load_record(self, shard: S, offset: int, key: bytes | None, value: bytes | None) -> bool:
        """Replay one stored record at start-up; False if it was skipped."""

    def loaded(self, shard: S, partition: int, count: int) -> None:
        """The partition's log is replayed (``count`` records): arm timers, log."""

    def records(self, result: Any) -> list[Any]:
        """The records an operation's result asks to append (empty: nothing to write)."""

    def encode(self, records: list[Any]) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) bytes of the records, in order."""

    def apply(self, shard: S, partition: int, result: Any, offsets: list[int]) -> None:
        """The result's records are committed at ``offsets``: replay them, then apply the
        rest of the result (live state, parked completions)."""


class LoadState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


@dataclass(eq=False)
class _Partition(Generic[S]):
    shard: S
    state: LoadState = LoadState.LOADING
    committed_offset: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task | None = None


class CoordinatorRuntime(Generic[S]):
    """The partitions of one coordinator log. ``log_for(partition)`` gives the partition's
    log (None if unavailable); ``durable(plog)`` an awaitable resolved when everything
    appended to ``plog`` is fsynced (raises OSError if the fsync failed); ``on_append``
    (optional) is told of every append (wakes long-polls)."""

    def __init__(self, adapter: ShardAdapter[S], log_for: Callable[[int], PartitionLog | None],
                 durable: Callable[[PartitionLog], Awaitable[Any]],
                 on_append: Callable[[int], None] | None = None) -> None:
        self.adapter = adapter
        self._log_for = log_for
        self._durable = durable
        self._on_append = on_append
        self.partitions: dict[int, _Partition[S]] = {}
        self.loaded_records = 0  # records replayed by the loads so far (tests, logs)

    # -- loading -------------------------------------------------------------------------------
    def load(self, partitions: range | list[int], *, now: bool = False) -> None:
        """Start loading ``partitions`` (each in its own task). ``now=True`` replays on the
        spot instead (for logs known to be empty, e.g. a topic just created)."""
        for p in partitions:
            part: _Partition[S] = _Partition(self.adapter.new_shard(p))
            self.partitions[p] = part
            if now:
                for _ in self._replay_chunks(p, part):
                    pass
            else:
                part.task = asyncio.get_running_loop().create_task(self._load(p, part),
                                                                     name=f"load {self.adapter.topic}-{p}")

    def add_loaded(self, partition: int, shard: S, committed_offset: int) -> None:
        """Serve a partition whose shard was loaded elsewhere (the metadata image)."""
        self.partitions[partition] = _Partition(shard, LoadState.ACTIVE, committed_offset)

    async def _load(self, p: int, part: _Partition[S]) -> None:
        for _ in self._replay_chunks(p, part):
            await asyncio.sleep(0)

    def _replay_chunks(self, p: int, part: _Partition[S]) -> Iterator[None]:
        """Replay the partition's log chunk by chunk (a yield after each); ACTIVE at the end,
        FAILED if the log cannot be read."""
        count = 0
        try:
            plog = self._log_for(p)
            for chunk in iter_record_chunks(plog):
                for offset, key, value in chunk:
                    count += self.adapter.load_record(part.shard, offset, key, value)
                yield
            part.committed_offset = plog.high_watermark if plog is not None else 0
            self.adapter.loaded(part.shard, p, count)
            part.state = LoadState.ACTIVE
        except OSError as exc:
            log.error("loading %s-%d failed: %s", self.adapter.topic, p, exc)
            part.state = LoadState.FAILED
        self.loaded_records += count

    async def wait_loaded(self) -> None:
        """Until every partition has finished loading (or failed)."""
        tasks = [part.task for part in self.partitions.values() if part.task is not None and not part.task.done()]
        if tasks:
            await asyncio.wait(tasks)

    def close(self) -> None:
        """Stop loads in progress (shutdown)."""
        for part in self.partitions.values():
            if part.task is not None and not part.task.done():
                part.task.cancel()

    # -- reads ---------------------------------------------------------------------------------
    def shard(self, partition: int) -> S:
        """The partition's shard, holding committed state only (see the module doc). Raises
        :class:`CoordinatorLoadInProgress` while loading, :class:`CoordinatorUnavailable` if
        the partition is not loaded or failed to load."""
        return self._active(partition).shard

    def _active(self, partition: int) -> _Partition[S]:
        part = self.partitions.get(partition)
        if part is None:
            raise CoordinatorUnavailable(f"{self.adapter.topic}-{partition} is not loaded")
        if part.state is LoadState.LOADING:
            raise CoordinatorLoadInProgress(f"{self.adapter.topic}-{partition} is loading")
        if part.state is LoadState.FAILED:
            raise CoordinatorUnavailable(f"{self.adapter.topic}-{partition} failed to load")
        return part

    def active_shards(self) -> dict[int, S]:
        """Shards of every ACTIVE partition. Raises :class:`CoordinatorLoadInProgress` if
        some partition is still loading (a listing would be incomplete)."""
        if any(part.state is LoadState.LOADING for part in self.partitions.values()):
            raise CoordinatorLoadInProgress(f"{self.adapter.topic} is loading")
        return {p: part.shard for p, part in self.partitions.items() if part.state is LoadState.ACTIVE}

    def committed_offset(self, partition: int) -> int:
        """The offset below which the partition's records are committed (and applied)."""
        return self.partitions[partition].committed_offset

    # -- writes --------------------------------------------------------------------------------
    async def write(self, partition: int, op: Callable[[S], Any], now_ms: int) -> Any:
        """Run ``op(shard)`` under the partition's write lock, append the records of its
        result as one batch, wait until they are committed, apply the result and return
        it. Raises :class:`CoordinatorUnavailable` (nothing applied) if the partition is
        not active, the append fails or the commit fails; an exception from ``op`` itself
        propagates with nothing appended or applied.

        The write runs in its own task: a caller that goes away (its connection closed)
        does not cut it off between the append and the apply, so the shard never misses
        records that are in the log."""
        self._active(partition)
        task = asyncio.ensure_future(self._write(partition, op, now_ms))
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _write(self, partition: int, op: Callable[[S], Any], now_ms: int) -> Any:
        part = self.partitions[partition]
        async with part.lock:
            self._active(partition)  # it may have changed while waiting for the lock
            result = op(part.shard)
            records = self.adapter.records(result)
            offsets: list[int] = []
            if records:
                offsets = await self._append_committed(partition, part, records, now_ms)
            self.adapter.apply(part.shard, partition, result, offsets)
            return result

    async def _append_committed(self, p: int, part: _Partition[S], records: list[Any], now_ms: int) -> list[int]:
        plog = self._log_for(p)
        if plog is None:
            raise CoordinatorUnavailable(f"{self.adapter.topic}-{p} is not available")
        batch = build_batch([(k, v, [], now_ms) for k, v in self.adapter.encode(records)])
        try:
            result = plog.append(batch, validate_batches(batch, client_origin=False), now_ms)
        except OSError as exc:
            log.error("append to %s-%d failed: %s", self.adapter.topic, p, exc)
            raise CoordinatorUnavailable(f"append to {self.adapter.topic}-{p} failed: {exc}") from exc
        if self._on_append is not None:
            self._on_append(p)
        if fsync_due(plog):
            try:
                await self._durable(plog)
            except OSError as exc:
                raise CoordinatorUnavailable(f"fsync of {self.adapter.topic}-{p} failed: {exc}",
                                             self.adapter.storage_error_code) from exc
        part.committed_offset = max(part.committed_offset, result.last_offset + 1)
        return list(range(result.base_offset, result.base_offset + len(records)))


def _retrieve(task: asyncio.Task) -> None:
    """Mark a write's exception retrieved (its caller may be gone)."""
    if not task.cancelled():
        task.exception()


def fsync_due(plog: PartitionLog) -> bool:
    """True when the log's flush policy says what was just appended must be fsynced
    before it is acknowledged (``flush.messages`` reached), as for a produce."""
    n = plog.config.flush_interval_messages
    return n is not None and plog.unflushed_messages >= n


def iter_record_chunks(plog: PartitionLog | None, chunk_bytes: int = LOAD_CHUNK_BYTES) -> Iterator[list[LoggedRecord]]:
    """The partition's non-control records from its log start offset to its high
    watermark, as lists of ``(offset, key, value)``, about ``chunk_bytes`` of log each."""
    if plog is None:
        return
    offset = plog.log_start_offset
    end = plog.high_watermark
    while offset < end:
        chunk = plog.read(offset, chunk_bytes, max_offset=end)
        if not chunk.data:
            return
        out: list[LoggedRecord] = []
        for h in validate_batches(chunk.data, client_origin=False):
            if not h.is_control:
                batch = memoryview(chunk.data)[h.position:h.position + h.size]
                for rec in decode_records(batch):
                    if rec.offset >= offset:
                        out.append((rec.offset, None if rec.key is None else bytes(rec.key),
                                    None if rec.value is None else bytes(rec.value)))
            offset = h.last_offset + 1
        yield out
