"""The share coordinator shard of one ``__share_group_state`` partition (sans-IO).

Theory of operation. Shaped like Kafka's ``ShareCoordinatorShard``: each request method
validates against the current state and returns a :class:`ShareResult` — the records to
append and the response — without touching state. :meth:`ShareCoordinatorShard.replay`
is the only mutator: the runtime calls it for each record after a successful append, and
for every record of the partition at start-up, so a restart rebuilds exactly the state
that was served. Time is an argument (``now_ms``), never read here; topic existence is a
callable argument (the metadata image lives in the shell).

State per share partition (:class:`PartitionState`): the start offset (SPSO), the state
epoch, the leader epoch, the state batches merged over the last snapshot and the updates
after it, and the DeliveryCompleteCount (DCC).

Writes. The first write after a snapshot, and every write until
``snapshot_update_records_per_snapshot`` updates have been written, is a ShareUpdate that
holds only the written batches; the next one is a ShareSnapshot of the whole merged state.
Initialize always writes a ShareSnapshot (a fresh start); delete writes a tombstone.

Merging batches (Kafka's ``PersisterStateBatchCombiner`` semantics): batches below the
start offset are dropped (a batch straddling it is clipped); where batches overlap, each
offset keeps the greatest (delivery count, delivery state); adjacent runs with the same
state and count are coalesced. The result does not depend on the order of the inputs.

DeliveryCompleteCount. A write carries the writer's DCC (WriteShareGroupState v1; -1 from
v0). A record with DCC -1 (a v0 write, or a record written before the field existed) gets
its DCC recomputed from the merged batches: the ACKNOWLEDGED/ARCHIVED offsets at or above
the SPSO. It stays -1 only while the SPSO is -1 (uninitialised).

Recovery cost. ``redundant_offset`` is the smallest offset still needed to rebuild the
state (the oldest latest-snapshot of any live share partition); the runtime deletes the
records below it. ``cold_snapshots`` re-snapshots share partitions whose snapshot is old
and holds that offset back, so pruning keeps advancing when some partitions go quiet.

Errors (Kafka 4.x): INVALID_REQUEST for a negative partition, and for a read or write of
a share partition that was never initialised; FENCED_STATE_EPOCH / FENCED_LEADER_EPOCH
for a request epoch below the recorded one (-1 skips the check); UNKNOWN_TOPIC_OR_PARTITION
for a topic id or partition the metadata image does not hold.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from .records import (
    ShareKey,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    ShareValue,
)
from .types import RecordState, ShareState, ShareStateKey, StateBatch

Record = tuple[ShareKey, ShareValue | None]
PartitionExists = Callable[[uuid.UUID, int], bool]
Outcome = tuple[ErrorCode, str | None]

_TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True)
class ShareCoordinatorConfig:
    snapshot_update_records_per_snapshot: int = 500
    cold_partition_snapshot_interval_ms: int = 300_000


@dataclass
class ShareResult:
    """Records to append (key, value-or-None) and the response for the caller."""

    records: list[Record] = field(default_factory=list)
    response: Any = None


class PartitionState(NamedTuple):
    """The committed state of one share partition (a tuple: one is built per write)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int  # effective: as written, else recomputed (-1 only while uninitialised)
    updates_since_snapshot: int = 0
    snapshot_offset: int = -1  # log offset of the latest ShareSnapshot


# -- batch arithmetic -------------------------------------------------------------------------
Run = tuple[int, int, int, int]  # (first, last, delivery count, delivery state)


def _clipped(batches: tuple[StateBatch, ...] | list[StateBatch], start_offset: int) -> tuple[list[Run], bool]:
    """The batches as runs clipped at ``start_offset``, and whether they are sorted and disjoint."""
    runs: list[Run] = []
    ordered, prev_last = True, None
    for b in batches:
        first, last = b.first_offset, b.last_offset
        if start_offset != -1:
            if last < start_offset:
                continue
            first = max(first, start_offset)
        if first > last:
            continue
        if prev_last is not None and first <= prev_last:
            ordered = False
        prev_last = last
        runs.append((first, last, b.delivery_count, b.delivery_state))
    return runs, ordered


def _merge_sorted(a: list[Run], b: list[Run]) -> list[Run]:
    """Per-offset max of two sorted, disjoint run lists, in one pass (O(len(a) + len(b)))."""
    out: list[Run] = []
    i = j = 0
    x = a[0] if a else None
    y = b[0] if b else None
    while x is not None and y is not None:
        if x[1] < y[0]:
            out.append(x)
            i += 1
            x = a[i] if i < len(a) else None
        elif y[1] < x[0]:
            out.append(y)
            j += 1
            y = b[j] if j < len(b) else None
        elif x[0] < y[0]:
            out.append((x[0], y[0] - 1, x[2], x[3]))
            x = (y[0], *x[1:])
        elif y[0] < x[0]:
            out.append((y[0], x[0] - 1, y[2], y[3]))
            y = (x[0], *y[1:])
        else:  # same first offset: the common part takes the greater (count, state)
            end = min(x[1], y[1])
            win = x if (x[2], x[3]) >= (y[2], y[3]) else y
            out.append((x[0], end, win[2], win[3]))
            if x[1] == end:
                i += 1
                x = a[i] if i < len(a) else None
            else:
                x = (end + 1, *x[1:])
            if y[1] == end:
                j += 1
                y = b[j] if j < len(b) else None
            else:
                y = (end + 1, *y[1:])
    if x is not None:
        out.append(x)
        out.extend(a[i + 1:])
    if y is not None:
        out.append(y)
        out.extend(b[j + 1:])
    return out


def _sweep(runs: list[Run]) -> list[Run]:
    """Per-offset max of arbitrary (overlapping, unsorted) runs."""
    runs = sorted(runs)
    points = sorted({p for first, last, _, _ in runs for p in (first, last + 1)})
    out: list[Run] = []
    active: list[tuple[int, int, int]] = []  # (-count, -state, last): max-heap of covering runs
    i = 0
    for lo, hi in itertools.pairwise(points):
        while i < len(runs) and runs[i][0] <= lo:
            _, last, count, state = runs[i]
            heapq.heappush(active, (-count, -state, last))
            i += 1
        while active and active[0][2] < lo:
            heapq.heappop(active)
        if active:
            out.append((lo, hi - 1, -active[0][0], -active[0][1]))
    return out


def combine_batches(so_far: tuple[StateBatch, ...] | list[StateBatch], new: tuple[StateBatch, ...] | list[StateBatch],
                    start_offset: int) -> tuple[StateBatch, ...]:
    """Merge two batch lists into sorted, non-overlapping, coalesced batches: clipped at
    ``start_offset`` (unless -1); per offset the greatest (delivery count, state) wins.
    Linear when each list is sorted and disjoint (the stored state always is, and writers'
    batches normally are); any input is accepted."""
    if not so_far and not new:
        return ()
    a, a_ok = _clipped(so_far, start_offset)
    b, b_ok = _clipped(new, start_offset)
    runs = _merge_sorted(a, b) if a_ok and b_ok else _sweep(a + b)
    out: list[StateBatch] = []
    for first, last, count, state in runs:
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset == first - 1 and (prev.delivery_count, prev.delivery_state) == (
                count, state):
            out[-1] = StateBatch(prev.first_offset, last, state, count)
        else:
            out.append(StateBatch(first, last, state, count))
    return tuple(out)


def delivery_complete_count(batches: tuple[StateBatch, ...], start_offset: int) -> int:
    """ACKNOWLEDGED/ARCHIVED offsets at or above ``start_offset`` (-1 if it is -1)."""
    if start_offset < 0:
        return -1
    return sum(b.last_offset - max(b.first_offset, start_offset) + 1 for b in batches
               if b.delivery_state in _TERMINAL and b.last_offset >= start_offset)


def _effective_dcc(written: int, batches: tuple[StateBatch, ...], start_offset: int) -> int:
    return written if written >= 0 and start_offset >= 0 else delivery_complete_count(batches, start_offset)


# -- the shard ------------------------------------------------------------------------------
class ShareCoordinatorShard:
    def __init__(self, config: ShareCoordinatorConfig | None = None) -> None:
        self.config = config or ShareCoordinatorConfig()
        self.states: dict[ShareStateKey, PartitionState] = {}
        self.last_offset = -1  # offset of the last replayed record

    # -- reads ------------------------------------------------------------------------------
    def keys_for_group(self, group_id: str) -> list[ShareStateKey]:
        return sorted((k for k in self.states if k.group_id == group_id), key=lambda k: (str(k.topic_id), k.partition))

    def state(self, key: ShareStateKey) -> PartitionState | None:
        return self.states.get(key)

    @staticmethod
    def _check(key: ShareStateKey, exists: PartitionExists) -> Outcome | None:
        if key.partition < 0:
            return ErrorCode.invalid_request, "The partition id cannot be a negative number."
        if not exists(key.topic_id, key.partition):
            return ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
        return None

    # -- requests -----------------------------------------------------------------------------
    def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int, now_ms: int,
                   exists: PartitionExists) -> ShareResult:
        """InitializeShareGroupState. Response: (error code, message). Writes a fresh
        ShareSnapshot (no batches) with the next snapshot epoch."""
        if key.partition < 0:
            return ShareResult(response=self._check(key, exists))
        cur = self.states.get(key)
        if state_epoch != -1 and cur is not None and cur.state_epoch > state_epoch:
            return ShareResult(response=(ErrorCode.fenced_state_epoch, "The state epoch is older than the recorded one."))
        err = self._check(key, exists)
        if err:
            return ShareResult(response=err)
        value = ShareSnapshotValue(
            snapshot_epoch=0 if cur is None else cur.snapshot_epoch + 1, state_epoch=state_epoch, leader_epoch=0,
            start_offset=start_offset, create_timestamp=now_ms, write_timestamp=now_ms, state_batches=(),
            delivery_complete_count=-1 if start_offset == -1 else 0)
        return ShareResult([(ShareSnapshotKey(key.group_id, key.topic_id, key.partition), value)],
                           (ErrorCode.none, None))

    def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              dcc: int, batches: tuple[StateBatch, ...], now_ms: int, exists: PartitionExists) -> ShareResult:
        """WriteShareGroupState. Response: (error code, message)."""
        if key.partition < 0:
            return ShareResult(response=self._check(key, exists))
        cur = self.states.get(key)
        if cur is None:
            return ShareResult(response=(ErrorCode.invalid_request,
                                         "Write operation on uninitialized share partition not allowed."))
        if leader_epoch != -1 and cur.leader_epoch > leader_epoch:
            return ShareResult(response=(ErrorCode.fenced_leader_epoch, "The leader epoch is older than the recorded one."))
        if state_epoch != -1 and cur.state_epoch > state_epoch:
            return ShareResult(response=(ErrorCode.fenced_state_epoch, "The state epoch is older than the recorded one."))
        err = self._check(key, exists)
        if err:
            return ShareResult(response=err)
        return ShareResult([self._state_record(key, cur, cur.leader_epoch, start_offset, dcc, batches, now_ms)],
                           (ErrorCode.none, None))

    def _state_record(self, key: ShareStateKey, cur: PartitionState, leader_epoch: int, start_offset: int,
                      dcc: int, batches: tuple[StateBatch, ...], now_ms: int) -> Record:
        if cur.updates_since_snapshot >= self.config.snapshot_update_records_per_snapshot:
            start = cur.start_offset if start_offset == -1 else start_offset
            return (ShareSnapshotKey(key.group_id, key.topic_id, key.partition), ShareSnapshotValue(
                cur.snapshot_epoch + 1, cur.state_epoch, leader_epoch, start, now_ms, now_ms,
                combine_batches(cur.batches, batches, start), dcc))
        return (ShareUpdateKey(key.group_id, key.topic_id, key.partition), ShareUpdateValue(
            cur.snapshot_epoch, leader_epoch, start_offset, combine_batches((), batches, start_offset), dcc))

    def read(self, key: ShareStateKey, leader_epoch: int, now_ms: int, exists: PartitionExists) -> ShareResult:
        """ReadShareGroupState. Response: a :class:`ShareState`. A newer leader epoch is
        recorded (one record: the stored progress under the new epoch)."""
        if key.partition < 0:
            return ShareResult(response=_error_state(self._check(key, exists)))
        cur = self.states.get(key)
        if cur is None:
            return ShareResult(response=_error_state((ErrorCode.invalid_request,
                                                      "Read on uninitialized share partition not allowed.")))
        if leader_epoch != -1 and cur.leader_epoch > leader_epoch:
            return ShareResult(response=_error_state((ErrorCode.fenced_leader_epoch,
                                                      "The leader epoch is older than the recorded one.")))
        err = self._check(key, exists)
        if err:
            return ShareResult(response=_error_state(err))
        state = ShareState(state_epoch=cur.state_epoch, leader_epoch=cur.leader_epoch, start_offset=cur.start_offset,
                           delivery_complete_count=cur.delivery_complete_count, state_batches=cur.batches)
        if leader_epoch == -1 or leader_epoch == cur.leader_epoch:
            return ShareResult(response=state)
        record = self._state_record(key, cur, leader_epoch, cur.start_offset, cur.delivery_complete_count, (), now_ms)
        return ShareResult([record], state)

    def read_summary(self, key: ShareStateKey, exists: PartitionExists) -> ShareState:
        """ReadShareGroupStateSummary: SPSO, epochs and DCC, never batches. A share
        partition without state answers start offset -1 (uninitialised), no error."""
        err = self._check(key, exists)
        if err:
            return _error_state(err)
        cur = self.states.get(key)
        if cur is None:
            return ShareState(leader_epoch=0)
        return ShareState(state_epoch=cur.state_epoch, leader_epoch=cur.leader_epoch, start_offset=cur.start_offset,
                          delivery_complete_count=cur.delivery_complete_count)

    def delete(self, key: ShareStateKey, exists: PartitionExists) -> ShareResult:
        """DeleteShareGroupState. Response: (error code, message). Deleting a share
        partition without state succeeds and writes nothing."""
        err = self._check(key, exists)
        if err:
            return ShareResult(response=err)
        if key not in self.states:
            return ShareResult(response=(ErrorCode.none, None))
        return ShareResult([(ShareSnapshotKey(key.group_id, key.topic_id, key.partition), None)], (ErrorCode.none, None))

    # -- housekeeping -------------------------------------------------------------------------
    def cold_snapshots(self, now_ms: int) -> list[Record]:
        """ShareSnapshots of share partitions whose last snapshot is older than
        ``cold_partition_snapshot_interval_ms`` and either has updates after it or holds
        back pruning (more records follow it than there are share partitions)."""
        out: list[Record] = []
        n = len(self.states)
        for key, st in self.states.items():
            if now_ms - st.write_timestamp < self.config.cold_partition_snapshot_interval_ms:
                continue
            if st.updates_since_snapshot == 0 and self.last_offset - st.snapshot_offset < n:
                continue
            out.append((ShareSnapshotKey(key.group_id, key.topic_id, key.partition), ShareSnapshotValue(
                st.snapshot_epoch + 1, st.state_epoch, st.leader_epoch, st.start_offset, st.create_timestamp,
                now_ms, st.batches, st.delivery_complete_count)))
        return out

    def redundant_offset(self) -> int | None:
        """Records below this offset are not needed to rebuild the state (None: keep all)."""
        if self.last_offset < 0:
            return None
        if not self.states:
            return self.last_offset + 1
        return min(st.snapshot_offset for st in self.states.values())

    # -- replay (the only mutator) --------------------------------------------------------------
    def replay(self, offset: int, key: ShareKey, value: ShareValue | None) -> None:
        self.last_offset = max(self.last_offset, offset)
        sk = ShareStateKey(key.group_id, key.topic_id, key.partition)
        cur = self.states.get(sk)
        if value is None:
            self.states.pop(sk, None)
        elif isinstance(value, ShareSnapshotValue):
            batches = combine_batches((), value.state_batches, value.start_offset)
            self.states[sk] = PartitionState(
                value.snapshot_epoch, max(value.state_epoch, cur.state_epoch if cur else value.state_epoch),
                max(value.leader_epoch, cur.leader_epoch if cur else value.leader_epoch), value.start_offset,
                value.create_timestamp, value.write_timestamp, batches,
                _effective_dcc(value.delivery_complete_count, batches, value.start_offset), 0, offset)
        elif cur is None:  # an update without a snapshot (its snapshot was pruned or never written)
            batches = combine_batches((), value.state_batches, value.start_offset)
            self.states[sk] = PartitionState(
                value.snapshot_epoch, 0, value.leader_epoch, value.start_offset, -1, -1, batches,
                _effective_dcc(value.delivery_complete_count, batches, value.start_offset), 1, offset)
        else:
            start = cur.start_offset if value.start_offset == -1 else value.start_offset
            batches = combine_batches(cur.batches, value.state_batches, start)
            leader = cur.leader_epoch if value.leader_epoch == -1 else max(cur.leader_epoch, value.leader_epoch)
            self.states[sk] = PartitionState(  # (dataclasses.replace costs 4x this, once per write)
                cur.snapshot_epoch, cur.state_epoch, leader, start, cur.create_timestamp, cur.write_timestamp,
                batches, _effective_dcc(value.delivery_complete_count, batches, start),
                cur.updates_since_snapshot + 1, cur.snapshot_offset)


def _error_state(err: Outcome | None) -> ShareState:
    code, message = err or (ErrorCode.unknown_server_error, None)
    return ShareState(error_code=int(code), error_message=message)
