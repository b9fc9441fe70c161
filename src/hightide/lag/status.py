"""Burrow-style consumer status per partition and per group over a sliding window.

Theory of operation. A monitor samples, for every (group, partition), the committed
offset and the end offset at some interval and feeds the samples to a
:class:`StatusTracker`. The status of a partition is decided from the samples inside
the window ``(now - window_ms, now]`` by the first rule that matches (the same rules
are written in ``docs/lag.md``):

1. **ERR**: the newest sample has no commit, no end offset, a committed offset past the
   end, or a committed offset below the log start offset (records lost to retention).
2. **OK**: the lag was 0 (or less) in at least one sample of the window: the consumer
   caught up recently.
3. **STOP**: the group is known to have no active members (and is behind): nobody is
   consuming. (Groups that commit with ``assign()`` have no members: they show STOP
   while behind, as kafka-consumer-groups.sh shows "no active members".)
4. **OK, incomplete**: fewer than ``max(2, min_samples)`` samples in the
   window; nothing more can be said yet (``complete=False``).
5. **REWIND**: the committed offset went backwards between two samples.
6. **STOP**: the committed offset did not move during the window nor for
   ``stop_after_ms``. **STALL**: it did not move during the window, but for less than
   ``stop_after_ms`` (the consumer may be there but makes no progress while lag stays
   or grows).
7. **WARN**: the committed offset moved but the lag never decreased between two
   consecutive samples: the consumer is falling behind (or not catching up).
8. **OK** otherwise.

A group's status is the most severe status of its partitions, in the order
OK < WARN < REWIND < STALL < STOP < ERR. Everything is pure: time is an argument.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["GroupStatus", "PartitionStatus", "Sample", "Status", "StatusRules", "StatusTracker",
           "evaluate_group", "evaluate_partition"]


class Status(StrEnum):
    OK = "OK"
    WARN = "WARN"
    REWIND = "REWIND"
    STALL = "STALL"
    STOP = "STOP"
    ERR = "ERR"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {s: i for i, s in enumerate(Status)}


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation; offsets are None (or -1) when unknown."""

    time_ms: int
    committed: int | None
    end_offset: int | None
    log_start_offset: int | None = None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end_offset is None or self.committed < 0 or self.end_offset < 0:
            return None
        return self.end_offset - self.committed


@dataclass(frozen=True, slots=True)
class StatusRules:
    """``window_ms``: sliding window length; ``min_samples``: samples needed in it for a
    complete evaluation; ``stop_after_ms``: an unmoving offset for this long is STOP
    (default: twice the window)."""

    window_ms: int = 600_000
    min_samples: int = 10
    stop_after_ms: int | None = None

    def __post_init__(self) -> None:
        if self.window_ms <= 0 or self.min_samples < 1:
            raise ValueError("window_ms must be > 0 and min_samples >= 1")

    @property
    def stop_ms(self) -> int:
        return self.stop_after_ms if self.stop_after_ms is not None else 2 * self.window_ms


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    status: Status
    reason: str
    complete: bool
    lag: int | None = None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    status: Status
    complete: bool
    partitions: dict[Hashable, PartitionStatus] = field(default_factory=dict)
    worst: Hashable | None = None
    """The key of the partition that decided the status (largest lag among equals)."""
    total_lag: int = 0


def _error_reason(s: Sample) -> str | None:
    if s.committed is None or s.committed < 0:
        return "no_commit"
    if s.end_offset is None or s.end_offset < 0:
        return "end_unknown"
    if s.committed > s.end_offset:
        return "committed_past_end"
    if s.log_start_offset is not None and s.log_start_offset >= 0 and s.committed < s.log_start_offset:
        return "committed_before_log_start"
    return None


def evaluate_partition(samples: Sequence[Sample], now_ms: int, rules: StatusRules = StatusRules(), *,
                       active_members: int | None = None,
                       committed_since_ms: int | None = None) -> PartitionStatus:
    """The status of one partition from its samples (oldest first, any length; those
    outside the window are ignored except to find when the offset last moved).

    ``active_members``: the group's member count if known (0 turns an unmoving offset
    into STOP at once). ``committed_since_ms``: when the committed offset took its
    current value, if the caller knows it better than ``samples`` do.
    """
    if not samples:
        return PartitionStatus(Status.ERR, "no_samples", False)
    last = samples[-1]
    reason = _error_reason(last)
    if reason is not None:
        return PartitionStatus(Status.ERR, reason, True, last.lag)
    window = [s for s in samples if now_ms - rules.window_ms < s.time_ms <= now_ms] or [last]
    lags = [s.lag for s in window]
    if any(lag is not None and lag <= 0 for lag in lags):
        return PartitionStatus(Status.OK, "caught_up_in_window", len(window) >= rules.min_samples, last.lag)
    if active_members == 0:
        return PartitionStatus(Status.STOP, "no_active_members", len(window) >= rules.min_samples, last.lag)
    if len(window) < max(2, rules.min_samples):
        return PartitionStatus(Status.OK, "window_incomplete", False, last.lag)
    commits = [s.committed for s in window]
    if any(b is not None and a is not None and b < a for a, b in zip(commits, commits[1:])):
        return PartitionStatus(Status.REWIND, "committed_offset_decreased", True, last.lag)
    if all(c == commits[0] for c in commits):
        since = committed_since_ms if committed_since_ms is not None else _since(samples)
        if now_ms - since >= rules.stop_ms:
            return PartitionStatus(Status.STOP, "offset_unchanged_for_stop_after", True, last.lag)
        return PartitionStatus(Status.STALL, "offset_unchanged_lag_not_decreasing", True, last.lag)
    if all(b is not None and a is not None and b >= a for a, b in zip(lags, lags[1:])):
        return PartitionStatus(Status.WARN, "lag_not_decreasing", True, last.lag)
    return PartitionStatus(Status.OK, "progressing", True, last.lag)


def _since(samples: Sequence[Sample]) -> int:
    """Time of the oldest sample of the trailing run with the newest committed offset."""
    current = samples[-1].committed
    since = samples[-1].time_ms
    for s in reversed(samples):
        if s.committed != current:
            break
        since = s.time_ms
    return since


def evaluate_group(partitions: dict[Hashable, PartitionStatus]) -> GroupStatus:
    """Combine partition statuses: the most severe wins (largest lag among equals); an
    empty group is OK and complete."""
    if not partitions:
        return GroupStatus(Status.OK, True, {}, None, 0)
    worst = max(partitions, key=lambda k: (partitions[k].status.severity, partitions[k].lag or 0))
    total = sum(max(0, p.lag) for p in partitions.values() if p.lag is not None)
    return GroupStatus(partitions[worst].status, all(p.complete for p in partitions.values()),
                       dict(partitions), worst, total)


class _History:
    __slots__ = ("samples", "since_ms")

    def __init__(self) -> None:
        self.samples: deque[Sample] = deque()
        self.since_ms: int | None = None


class StatusTracker:
    """Keeps each (group, partition)'s recent samples and evaluates statuses.

    Samples older than the window (and than ``stop_after_ms``) are dropped; the time the
    committed offset last changed is remembered separately, so STOP needs no long
    history. Partitions not observed for ``forget_after_ms`` (default 3 windows) are
    forgotten by :meth:`expire`.
    """

    def __init__(self, rules: StatusRules = StatusRules(), forget_after_ms: int | None = None) -> None:
        self.rules = rules
        self.forget_after_ms = forget_after_ms if forget_after_ms is not None else 3 * rules.window_ms
        self._groups: dict[str, dict[Hashable, _History]] = {}

    def observe(self, group: str, key: Hashable, sample: Sample) -> None:
        """Add a sample (ignored unless newer than the partition's newest)."""
        h = self._groups.setdefault(group, {}).setdefault(key, _History())
        if h.samples and sample.time_ms <= h.samples[-1].time_ms:
            return
        if not h.samples or h.samples[-1].committed != sample.committed:
            h.since_ms = sample.time_ms
        h.samples.append(sample)
        horizon = sample.time_ms - self.rules.window_ms
        while len(h.samples) > 1 and h.samples[0].time_ms <= horizon:
            h.samples.popleft()

    def samples(self, group: str, key: Hashable) -> list[Sample]:
        h = self._groups.get(group, {}).get(key)
        return list(h.samples) if h else []

    def partition_status(self, group: str, key: Hashable, now_ms: int,
                         active_members: int | None = None) -> PartitionStatus:
        h = self._groups.get(group, {}).get(key)
        if h is None:
            return PartitionStatus(Status.ERR, "no_samples", False)
        return evaluate_partition(list(h.samples), now_ms, self.rules, active_members=active_members,
                                  committed_since_ms=h.since_ms)

    def group_status(self, group: str, now_ms: int, active_members: int | None = None,
                     keys: Iterable[Hashable] | None = None) -> GroupStatus:
        """Status of ``group`` over ``keys`` (default: every partition it was seen on)."""
        parts = self._groups.get(group, {})
        wanted = list(parts) if keys is None else list(keys)
        return evaluate_group({k: self.partition_status(group, k, now_ms, active_members) for k in wanted})

    def expire(self, now_ms: int) -> None:
        """Forget partitions (and groups) without a sample for ``forget_after_ms``."""
        for g in list(self._groups):
            parts = self._groups[g]
            for k in [k for k, h in parts.items() if now_ms - h.samples[-1].time_ms > self.forget_after_ms]:
                del parts[k]
            if not parts:
                del self._groups[g]
