"""The simulation's invariants, checked as the run goes (sans-IO: it is told what the
clients saw and what the logs hold, and answers with the anomalies it finds).

What it holds:

- **Acknowledged records** (:meth:`Checker.acked`): an idempotent acks=all producer's
  record, its partition, offset and value. Every later read of that offset
  (:meth:`Checker.read`) must find the same value: an acknowledged record is never lost
  or changed. Within a partition a producer's values must appear in sequence order, each
  once: no duplicate, no reorder (:meth:`Checker.read`, over a prefix of the log).
- **High watermarks** (:meth:`Checker.high_watermark`): the highest offset a client saw
  as committed (HW, or LSO) per partition never goes back, and a read never finds the
  log shorter than it.
- **Offset commits** (:meth:`Checker.committed` / :meth:`Checker.fetched`): an
  acknowledged commit of a group's offset is never lost: OffsetFetch afterwards answers
  it or a later commit, never an older one.

Every anomaly is a readable line; the first one ends the run (the driver prints the seed
and the trace).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Anomaly", "Checker"]

TP = tuple[str, int]


class Anomaly(AssertionError):
    """An invariant does not hold (the message says which and where)."""


@dataclass
class _Partition:
    acked: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    hw: int = 0  # the highest committed end a client saw


class Checker:
    """See the module doc."""

    def __init__(self) -> None:
        self._parts: defaultdict[TP, _Partition] = defaultdict(_Partition)
        self._commits: dict[tuple[str, TP], int] = {}  # (group, tp) -> highest acknowledged commit
        self.counts: defaultdict[str, int] = defaultdict(int)

    # --- records -----------------------------------------------------------------------

    def acked(self, tp: TP, offset: int, values: Iterable[bytes]) -> None:
        """A produce of ``values`` (one batch) to ``tp`` was acknowledged at base ``offset``."""
        part = self._parts[tp]
        for i, v in enumerate(values):
            old = part.acked.get(offset + i)
            if old is not None and old != v:
                raise Anomaly(f"{_tp(tp)} offset {offset + i} acknowledged twice: {old!r} then {v!r}")
            part.acked[offset + i] = v
            self.counts["records acked"] += 1

    def read(self, tp: TP, start: int, values: list[bytes], end: int) -> None:
        """A read of ``tp`` from ``start`` found ``values`` (offsets start, start+1, ... —
        control records and aborted data removed by the reader are given as ``b""``) and
        the log end (HW) ``end``. The reader reads from 0 when it checks order."""
        part = self._parts[tp]
        if end < part.hw:
            raise Anomaly(f"{_tp(tp)} read an end of {end} after a high watermark of {part.hw} was seen")
        for i, v in enumerate(values):
            off = start + i
            want = part.acked.get(off)
            if want is not None and want != v:
                raise Anomaly(f"{_tp(tp)} offset {off}: acknowledged {want!r}, read {v!r}")
        if start == 0:
            _check_order(tp, values)
        self.counts["reads"] += 1

    def lost_acked(self, tp: TP, end: int) -> list[int]:
        """Acknowledged offsets at or past ``end`` (the final log end): lost records."""
        return sorted(o for o in self._parts[tp].acked if o >= end)

    def high_watermark(self, tp: TP, hw: int) -> None:
        """A client saw ``hw`` as ``tp``'s committed end (Fetch's HW, ListOffsets latest)."""
        part = self._parts[tp]
        if hw < part.hw:
            raise Anomaly(f"{_tp(tp)} high watermark went back from {part.hw} to {hw}")
        part.hw = hw

    def partitions(self) -> list[TP]:
        return sorted(self._parts)

    # --- offset commits ------------------------------------------------------------------

    def committed(self, group: str, tp: TP, offset: int) -> None:
        """OffsetCommit of ``offset`` was acknowledged."""
        key = (group, tp)
        self._commits[key] = max(offset, self._commits.get(key, -1))
        self.counts["commits acked"] += 1

    def fetched(self, group: str, tp: TP, offset: int, *, since: int) -> None:
        """OffsetFetch answered ``offset`` (-1: none); ``since`` is the highest commit
        acknowledged before the fetch was sent (commits in flight may or may not show)."""
        if offset < since:
            raise Anomaly(f"group {group} {_tp(tp)}: offset fetch answered {offset} after the commit of "
                          f"{since} was acknowledged")
        self.counts["offset fetches"] += 1

    def commit_floor(self, group: str, tp: TP) -> int:
        """The highest acknowledged commit of ``group`` on ``tp`` (-1: none)."""
        return self._commits.get((group, tp), -1)


def _check_order(tp: TP, values: list[bytes]) -> None:
    """Values are ``b"<producer>:<seq>"``: each producer's sequence numbers appear in order,
    each once."""
    last: dict[bytes, int] = {}
    for off, v in enumerate(values):
        if not v:
            continue
        producer, _, seq_s = v.rpartition(b":")
        seq = int(seq_s)
        prev = last.get(producer, -1)
        if seq == prev:
            raise Anomaly(f"{_tp(tp)} offset {off}: duplicate {v!r}")
        if seq < prev:
            raise Anomaly(f"{_tp(tp)} offset {off}: {v!r} after seq {prev} (reordered)")
        last[producer] = seq


def _tp(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"
