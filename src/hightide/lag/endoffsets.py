"""End offsets that never go backwards across a leader failover.

A partition's high watermark (HW), last stable offset (LSO) and log start offset only
grow while its leader changes cleanly: the new leader was in the ISR, so it holds every
record below the old HW. What a reader sees can still dip for a moment: a new leader's
own HW may be below the old one until its followers fetch (Kafka, and hightide, answer
ListOffsets LATEST with OFFSET_NOT_AVAILABLE meanwhile), a dead leader answers nothing
until the controller elects another, and a tool that reads a follower (or any other
Kafka-compatible system) may get a smaller number. Reporting those as they come would
show lag shrinking (or turning negative) because of a failover, not because a consumer
read anything.

:class:`EndOffsetMemory` keeps, per partition, the highest end offsets read in earlier
*rounds* (a round is one snapshot of a monitor: every reading of a round is taken after
every reading of the previous one, so in a clean failover no reading is below an earlier
round's) and settles each new reading (:meth:`EndOffsetMemory.settle`):

* a reading at or above the remembered one is taken as it is;
* an unknown (None) or smaller HW, or a smaller LSO, is replaced by the remembered
  offsets, marked **stale**, for at most ``grace_ms`` (30 s, Kafka's
  ``replica.lag.time.max.ms``: by then a new leader's followers have fetched or left the
  ISR, so its HW is known again);
* past ``grace_ms`` the reading is taken as it is (an unknown end stays unknown; a
  smaller one is a real regression — an unclean leader election lost records, or the
  topic was recreated — and becomes the remembered one).

Readings within one round are not compared with each other (two groups' coordinators
answer at slightly different times); the highest good reading of a round is remembered
for the next one (:meth:`EndOffsetMemory.end_round`).

Pure: no I/O, time is an argument (milliseconds).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_GRACE_MS", "EndOffsetMemory", "EndOffsets"]

DEFAULT_GRACE_MS = 30_000


class EndOffsets(NamedTuple):
    """A partition's remembered end offsets standing in for an unknown or smaller
    reading (None where never known); ``stale_since_ms``: when the first such reading
    came."""

    high_watermark: int | None
    log_start_offset: int | None
    last_stable_offset: int | None
    stale_since_ms: int


class _Offsets:
    """End offsets remembered from earlier rounds (the end is known), or the highest
    read in this round (None until one is read)."""

    __slots__ = ("bad", "bad_since", "hw", "lso", "reset", "start")

    def __init__(self, hw: int | None = None, start: int | None = None, lso: int | None = None) -> None:
        self.hw, self.start, self.lso = hw, start, lso
        self.bad_since: int | None = None  # remembered: first regressed reading since the last good round
        self.bad = False  # this round: a regressed reading came
        self.reset = False  # this round: a regressed reading past the grace replaces the remembered ones

    def take(self, hw: int | None, start: int | None, lso: int | None) -> None:
        """Keep the highest of each offset read this round."""
        if hw is not None and (self.hw is None or hw > self.hw):
            self.hw = hw
        if start is not None and (self.start is None or start > self.start):
            self.start = start
        if lso is not None and (self.lso is None or lso > self.lso):
            self.lso = lso


def _not_below(offset: int | None, remembered: int | None) -> bool:
    return offset is None or remembered is None or offset >= remembered


def _known(offset: int | None) -> int | None:
    return None if offset is None or offset < 0 else offset


class EndOffsetMemory:
    """The remembered end offsets per key (any hashable, e.g. a TopicPartition); see the
    module doc. ``grace_ms``: how long an unknown or smaller reading is replaced by the
    remembered one. ``read_committed``: the end that must be known is the LSO, not the
    HW (a read_committed reading from ListOffsets has no HW). Use: :meth:`settle` every
    reading of a round, then :meth:`end_round`."""

    __slots__ = ("_base", "_round", "grace_ms", "read_committed")

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS, *, read_committed: bool = False) -> None:
        self.grace_ms = grace_ms
        self.read_committed = read_committed
        self._base: dict[object, _Offsets] = {}  # of earlier rounds (end known)
        self._round: dict[object, _Offsets] = {}  # this round's highest good readings

    def __len__(self) -> int:
        return len(self._base)

    def settle(self, key: object, high_watermark: int | None, log_start_offset: int | None,
               last_stable_offset: int | None, now_ms: int) -> EndOffsets | None:
        """None when the reading (negative offsets = unknown) is to be reported as it
        is; else the remembered offsets to report instead, stale.

        A reading is *regressed* when its end (HW, or LSO for ``read_committed``) is
        unknown, or its HW or LSO is below the remembered one (an offset that is simply
        not part of the reading — ListOffsets gives the LSO to read_committed callers
        only — is no regression). A
        regressed reading less than ``grace_ms`` after the first regressed one (since the
        last good round) gets the remembered offsets; a later one is reported as it is and,
        with a known HW, replaces them at the end of the round. Never raises."""
        hw, lso = _known(high_watermark), _known(last_stable_offset)
        start = _known(log_start_offset)
        r = self._round.get(key)
        if r is None:
            r = self._round[key] = _Offsets()
        base = self._base.get(key)
        end = lso if self.read_committed else hw
        if base is None or (end is not None and _not_below(hw, base.hw) and _not_below(lso, base.lso)):
            r.take(hw, start, lso)
            return None
        r.bad = True
        since = base.bad_since
        if since is None:
            since = base.bad_since = now_ms
        if now_ms - since < self.grace_ms:
            return EndOffsets(base.hw, start if start is not None else base.start, base.lso, since)
        if end is not None:  # a real regression, past the grace
            r.reset = True
            r.take(hw, start, lso)
        return None

    def end_round(self) -> None:
        """The round's highest good readings become the remembered offsets (its lower
        ones past the grace replace them); a partition read without any regressed reading
        is no longer stale."""
        base_of = self._base
        for key, r in self._round.items():
            base = base_of.get(key)
            if base is not None and not r.bad:
                base.bad_since = None
            if (r.lso if self.read_committed else r.hw) is None:
                continue  # no end read this round: keep what is remembered
            if base is None or r.reset:
                base_of[key] = _Offsets(r.hw, r.start, r.lso)
            else:
                base.take(r.hw, r.start, r.lso)
        self._round.clear()
