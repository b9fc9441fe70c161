"""The share-partition core (KIP-932): the in-flight records of one share group on one
topic partition. Sans-IO: time (``now_ms``) is an argument, the log is described to it by
the batch headers the shell read, and persistence is the shell's job
(:meth:`SharePartition.to_state_batches` / :meth:`SharePartition.from_state`).

Theory of operation
-------------------
The *in-flight window* covers offsets ``[spso, end)``: ``spso`` is the share-partition
start offset (SPSO) and ``end - 1`` the share-partition end offset (SPEO). Offsets below
the SPSO are all done; offsets at or past ``end`` have never been acquired. Inside the
window every offset has a :class:`RecordState` and a delivery count. The window is kept
as a sorted list of *runs*: maximal ranges of offsets with one state, delivery count,
owner and lock deadline. Whole batches move together, so the cost of acquiring or
acknowledging a range is proportional to the number of runs it touches, not to the
number of records.

Transitions (Kafka's ``SharePartition``)::

    AVAILABLE --acquire--> ACQUIRED (delivery count + 1, owner, lock deadline)
    ACQUIRED  --ACCEPT---> ACKNOWLEDGED
    ACQUIRED  --REJECT/GAP--> ARCHIVED
    ACQUIRED  --RELEASE / lock expiry / owner leaves--> AVAILABLE,
                     or ARCHIVED once the delivery count reached the limit
    ACQUIRED  --RENEW----> ACQUIRED with a fresh lock deadline

ACKNOWLEDGED and ARCHIVED are terminal. After every change the SPSO moves past the
leading terminal runs. New records (past the window) are acquired in whole log batches;
control batches and offsets missing from the log (compacted away) enter the window as
ARCHIVED and are never delivered. The window never grows beyond
``partition_max_record_locks`` offsets.

Lag (seed 002) = LEO - SPSO - DeliveryCompleteCount, where DeliveryCompleteCount counts
the terminal offsets inside the window.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter
from typing import NamedTuple

from .types import (
    AcknowledgeType,
    RecordState,
    ShareError,
    ShareGroupSettings,
    ShareState,
    StateBatch,
)

__all__ = ["RENEW", "AckBatch", "AckError", "Acquired", "LogBatch", "SharePartition"]

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ACKNOWLEDGED = RecordState.ACKNOWLEDGED
ARCHIVED = RecordState.ARCHIVED
TERMINAL = (ACKNOWLEDGED, ARCHIVED)
RENEW = 4  # AcknowledgeTypes value 4 (ShareFetch/ShareAcknowledge v2)

# Kafka error codes answered by acknowledge (same numbers as protocol.errors.ErrorCode).
INVALID_REQUEST = 42
INVALID_RECORD_STATE = 121


class LogBatch(NamedTuple):
    """What the shell read from the log: one batch's offsets and whether it is a control
    batch (or an aborted transactional batch: both are never delivered)."""

    base_offset: int
    last_offset: int
    skip: bool = False


class Acquired(NamedTuple):
    """One AcquiredRecords entry of a ShareFetch response (inclusive range)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AckBatch(NamedTuple):
    """One AcknowledgementBatch: one type for the whole range, or one type per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


class AckError(ShareError):
    """An acknowledgement that cannot be applied; ``error_code`` is Kafka's answer."""


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    state: RecordState
    count: int
    member: str | None = None
    deadline: int = 0  # lock deadline (ms) while ACQUIRED

    def same(self, o: _Run) -> bool:
        return (self.state == o.state and self.count == o.count and self.member == o.member
                and self.deadline == o.deadline)


_first = attrgetter("first")


class SharePartition:
    """In-flight state of one share partition. Every method is synchronous and pure
    apart from mutating this object; none reads a clock."""

    def __init__(self, start_offset: int, settings: ShareGroupSettings | None = None, *,
                 state_epoch: int = 0) -> None:
        if start_offset < 0:
            raise ValueError("a share partition starts at a non-negative offset")
        self.settings = settings or ShareGroupSettings()
        self.state_epoch = state_epoch
        self._spso = start_offset
        self._end = start_offset
        self._runs: list[_Run] = []

    # -- persistence --------------------------------------------------------------
    @classmethod
    def from_state(cls, state: ShareState, settings: ShareGroupSettings | None = None) -> SharePartition:
        """Rebuild from persisted state. Offsets inside the window that no batch covers
        are AVAILABLE with delivery count 0; batches below the SPSO are dropped; AVAILABLE
        records that already reached the delivery count limit (their last delivery's lock
        was lost in a restart) are ARCHIVED, as the lock expiry would have done."""
        sp = cls(max(state.start_offset, 0), settings, state_epoch=state.state_epoch)
        pos = sp._spso
        for b in sorted(state.state_batches, key=attrgetter("first_offset")):
            first = max(b.first_offset, pos)
            if b.last_offset < first:
                continue
            if first > pos:
                sp._runs.append(_Run(pos, first - 1, AVAILABLE, 0))
            st = RecordState(b.delivery_state)
            if st in (ACQUIRED, AVAILABLE):
                st = ARCHIVED if b.delivery_count >= sp.settings.delivery_count_limit else AVAILABLE
            sp._runs.append(_Run(first, b.last_offset, st, b.delivery_count))
            pos = b.last_offset + 1
        sp._end = pos
        sp._merge(0, len(sp._runs))
        sp._advance()
        return sp

    def to_state_batches(self) -> tuple[StateBatch, ...]:
        """The window as persisted state batches (ACQUIRED written as AVAILABLE: a lock
        never survives a restart), adjacent equal batches merged."""
        out: list[StateBatch] = []
        for r in self._runs:
            st = AVAILABLE if r.state == ACQUIRED else r.state
            if out and out[-1].last_offset + 1 == r.first and out[-1].delivery_state == st \
                    and out[-1].delivery_count == r.count:
                out[-1] = StateBatch(out[-1].first_offset, r.last, int(st), r.count)
            else:
                out.append(StateBatch(r.first, r.last, int(st), r.count))
        return tuple(out)

    # -- reads ----------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        """SPSO: the first offset not yet done."""
        return self._spso

    @property
    def end_offset(self) -> int:
        """SPEO: the last offset of the window (``start_offset - 1`` when it is empty)."""
        return self._end - 1

    @property
    def delivery_complete_count(self) -> int:
        """ACKNOWLEDGED/ARCHIVED offsets at or above the SPSO."""
        return sum(r.last - r.first + 1 for r in self._runs if r.state in TERMINAL)

    def lag(self, log_end_offset: int) -> int:
        """Share-partition lag = LEO - SPSO - DeliveryCompleteCount (never below 0)."""
        return max(log_end_offset - self._spso - self.delivery_complete_count, 0)

    def counts(self) -> dict[RecordState, int]:
        """Offsets per state inside the window."""
        out = {s: 0 for s in RecordState}
        for r in self._runs:
            out[r.state] += r.last - r.first + 1
        return out

    def state_at(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, owner) of one offset inside the window, else None."""
        i = self._find(offset)
        if i < 0:
            return None
        r = self._runs[i]
        return r.state, r.count, r.member

    def runs(self) -> list[tuple[int, int, RecordState, int, str | None]]:
        """The window as (first, last, state, delivery count, owner) runs (for tests)."""
        return [(r.first, r.last, r.state, r.count, r.member) for r in self._runs]

    @property
    def next_fetch_offset(self) -> int:
        """Where the shell should read the log from: the first AVAILABLE offset in the
        window, else the end of the window."""
        for r in self._runs:
            if r.state == AVAILABLE:
                return r.first
        return self._end

    def can_acquire(self) -> bool:
        """True when an acquire could hand out something: an AVAILABLE record in the
        window, or room in the window for new records."""
        return self.next_fetch_offset < self._end or self._end - self._spso < self.settings.partition_max_record_locks

    def next_lock_deadline(self) -> int | None:
        """The earliest acquisition-lock deadline, None when nothing is acquired."""
        ds = [r.deadline for r in self._runs if r.state == ACQUIRED]
        return min(ds) if ds else None

    def holders(self) -> set[str]:
        """Members holding acquired records."""
        return {r.member for r in self._runs if r.state == ACQUIRED and r.member is not None}

    def acquired_count(self, member_id: str | None = None) -> int:
        return sum(r.last - r.first + 1 for r in self._runs
                   if r.state == ACQUIRED and (member_id is None or r.member == member_id))

    # -- acquire --------------------------------------------------------------------
    def acquire(self, member_id: str, batches: Sequence[LogBatch], max_records: int, now_ms: int, *,
                batch_size: int = 0, strict: bool = False) -> list[Acquired]:
        """Acquire records for ``member_id`` out of the log batches the shell read.

        AVAILABLE records already in the window come first, then new records past it, in
        whole log batches (``strict``: cut exactly at ``max_records``, the record-limit
        acquire mode). The window never grows past ``partition_max_record_locks``
        offsets (a log batch is cut if needed). ``batch_size`` > 0 splits new records
        into AcquiredRecords ranges of about that many records at batch boundaries.
        Returns the acquired ranges in offset order.
        """
        if not batches or max_records <= 0:
            return []
        read_first, read_last = batches[0].base_offset, batches[-1].last_offset
        deadline = now_ms + self.settings.record_lock_duration_ms
        out: list[Acquired] = []
        budget = max_records
        # 1. AVAILABLE runs inside the window and inside what was read.
        if read_first < self._end and self._runs:
            lo = max(read_first, self._spso)
            hi = min(read_last, self._end - 1)
            if lo <= hi:
                budget = self._acquire_window(member_id, lo, hi, budget, deadline, strict, out)
        # 2. New records past the window.
        if budget > 0 and read_last >= self._end:
            self._acquire_new(member_id, batches, budget, deadline, batch_size, strict, out)
        self._advance()
        return out

    def _acquire_window(self, member: str, lo: int, hi: int, budget: int, deadline: int, strict: bool,
                        out: list[Acquired]) -> int:
        i = self._find(lo)
        while i < len(self._runs) and budget > 0:
            r = self._runs[i]
            if r.first > hi:
                break
            if r.state != AVAILABLE:
                i += 1
                continue
            first, last = max(r.first, lo), min(r.last, hi)
            if strict and last - first + 1 > budget:
                last = first + budget - 1
            i = self._isolate(first, last)
            r = self._runs[i]
            r.state, r.count, r.member, r.deadline = ACQUIRED, r.count + 1, member, deadline
            out.append(Acquired(first, last, r.count))
            budget -= last - first + 1
            i += 1
        return budget

    def _acquire_new(self, member: str, batches: Sequence[LogBatch], budget: int, deadline: int,
                     batch_size: int, strict: bool, out: list[Acquired]) -> None:
        room = self.settings.partition_max_record_locks - (self._end - self._spso)
        group: list[int] = []  # [first, last] of the AcquiredRecords range being built

        def close_group() -> None:
            if group:
                self._runs.append(_Run(group[0], group[1], ACQUIRED, 1, member, deadline))
                out.append(Acquired(group[0], group[1], 1))
                group.clear()

        for b in batches:
            if budget <= 0 or room <= 0:
                break
            if b.last_offset < self._end:
                continue
            first = max(b.base_offset, self._end)
            if first > self._end:  # offsets missing from the log (compacted away)
                close_group()
                n = min(first - self._end, room)
                self._runs.append(_Run(self._end, self._end + n - 1, ARCHIVED, 0))
                self._end += n
                room -= n
                if room <= 0:
                    break
            last = min(b.last_offset, first + room - 1)
            if b.skip:
                close_group()
                self._runs.append(_Run(first, last, ARCHIVED, 0))
            else:
                if strict:
                    last = min(last, first + budget - 1)
                if group:
                    group[1] = last
                else:
                    group[:] = [first, last]
                budget -= last - first + 1
                if batch_size > 0 and group[1] - group[0] + 1 >= batch_size:
                    close_group()
            room -= last - self._end + 1
            self._end = last + 1
        close_group()
        self._merge(0, len(self._runs))

    # -- acknowledge ----------------------------------------------------------------
    def acknowledge(self, member_id: str, batches: Iterable[AckBatch], now_ms: int) -> None:
        """Apply acknowledgement batches atomically: either all apply or none does.

        Every offset named (at or above the SPSO) must be ACQUIRED by ``member_id``.
        Raises :class:`AckError` with INVALID_REQUEST (malformed batch, offsets past the
        window, unknown type) or INVALID_RECORD_STATE (a record not acquired by this
        member). Ranges entirely below the SPSO are ignored, as in Kafka.
        """
        plan: list[tuple[int, int, int]] = []
        prev_last = -1
        for b in batches:
            if b.first_offset > b.last_offset or b.first_offset < prev_last or not b.types:
                raise AckError(INVALID_REQUEST, "malformed acknowledgement batch")
            if len(b.types) > 1 and len(b.types) != b.last_offset - b.first_offset + 1:
                raise AckError(INVALID_REQUEST, "acknowledge types do not match the batch length")
            prev_last = b.last_offset
            if len(b.types) == 1:
                plan.append((b.first_offset, b.last_offset, b.types[0]))
            else:
                off = b.first_offset
                for t, grp in groupby(b.types):
                    n = sum(1 for _ in grp)
                    plan.append((off, off + n - 1, t))
                    off += n
        for first, last, t in plan:
            if t not in (0, 1, 2, 3, RENEW):
                raise AckError(INVALID_REQUEST, f"invalid acknowledge type {t}")
            if last < self._spso:
                continue
            if last >= self._end:
                raise AckError(INVALID_REQUEST, "acknowledged offsets are past the acquired records")
            self._check_owned(member_id, max(first, self._spso), last)
        for first, last, t in plan:
            if last >= self._spso:
                self._apply(max(first, self._spso), last, t, now_ms)
        self._advance()

    def _check_owned(self, member: str, first: int, last: int) -> None:
        i = self._find(first)
        while i < len(self._runs) and self._runs[i].first <= last:
            r = self._runs[i]
            if r.state != ACQUIRED:
                raise AckError(INVALID_RECORD_STATE, f"offsets {max(r.first, first)}-{min(r.last, last)} "
                               f"are {r.state.name}, not acquired")
            if r.member != member:
                raise AckError(INVALID_RECORD_STATE, "member is not the owner of the records")
            i += 1

    def _apply(self, first: int, last: int, ack_type: int, now_ms: int) -> None:
        i = self._isolate(first, last)
        j = i
        while j < len(self._runs) and self._runs[j].first <= last:
            r = self._runs[j]
            if ack_type == RENEW:
                r.deadline = now_ms + self.settings.record_lock_duration_ms
            elif ack_type == AcknowledgeType.ACCEPT:
                r.state, r.member, r.deadline = ACKNOWLEDGED, None, 0
            elif ack_type == AcknowledgeType.RELEASE:
                self._release_run(r)
            else:  # REJECT, GAP
                r.state, r.member, r.deadline = ARCHIVED, None, 0
            j += 1
        self._merge(i, j)

    def _release_run(self, r: _Run) -> None:
        r.state = ARCHIVED if r.count >= self.settings.delivery_count_limit else AVAILABLE
        r.member, r.deadline = None, 0

    # -- lock expiry and members leaving -------------------------------------------
    def expire_locks(self, now_ms: int) -> bool:
        """Release every record whose lock deadline is ``<= now_ms``. True if any was."""
        return self._release_where(lambda r: r.deadline <= now_ms)

    def release_member(self, member_id: str) -> bool:
        """Release every record acquired by ``member_id`` (its share session closed or it
        left the group). True if any was."""
        return self._release_where(lambda r: r.member == member_id)

    def _release_where(self, pred: Callable[[_Run], bool]) -> bool:
        changed = False
        for r in self._runs:
            if r.state == ACQUIRED and pred(r):
                self._release_run(r)
                changed = True
        if changed:
            self._merge(0, len(self._runs))
            self._advance()
        return changed

    # -- log start moving (retention / DeleteRecords) -------------------------------
    def move_start(self, log_start_offset: int) -> bool:
        """The log no longer holds offsets below ``log_start_offset``: the SPSO moves up
        to it (records below are gone and can never be delivered). True if it moved."""
        if log_start_offset <= self._spso:
            return False
        while self._runs and self._runs[0].last < log_start_offset:
            self._runs.pop(0)
        if self._runs and self._runs[0].first < log_start_offset:
            self._runs[0].first = log_start_offset
        self._spso = log_start_offset
        self._end = max(self._end, log_start_offset)
        self._advance()
        return True

    # -- run bookkeeping ------------------------------------------------------------
    def _find(self, offset: int) -> int:
        """Index of the run holding ``offset``, -1 if outside the window."""
        if offset < self._spso or offset >= self._end:
            return -1
        return bisect_right(self._runs, offset, key=_first) - 1

    def _split(self, at: int) -> None:
        """Make ``at`` the first offset of a run (if it is inside the window)."""
        i = self._find(at)
        if i < 0:
            return
        r = self._runs[i]
        if r.first == at:
            return
        self._runs.insert(i + 1, _Run(at, r.last, r.state, r.count, r.member, r.deadline))
        r.last = at - 1

    def _isolate(self, first: int, last: int) -> int:
        """Split so that [first, last] is covered by whole runs; return the first index."""
        self._split(first)
        self._split(last + 1)
        return self._find(first)

    def _merge(self, i: int, j: int) -> None:
        """Merge equal neighbours among runs[i-1 .. j]."""
        runs = self._runs
        k = max(i, 1)
        stop = min(j + 1, len(runs))
        while k < stop and k < len(runs):
            a, b = runs[k - 1], runs[k]
            if a.last + 1 == b.first and a.same(b):
                a.last = b.last
                del runs[k]
                stop -= 1
            else:
                k += 1

    def _advance(self) -> None:
        """Move the SPSO past the leading terminal runs."""
        runs = self._runs
        n = 0
        while n < len(runs) and runs[n].state in TERMINAL:
            n += 1
        if n:
            self._spso = runs[n - 1].last + 1
            del runs[:n]
        if not runs:
            self._spso = self._end
