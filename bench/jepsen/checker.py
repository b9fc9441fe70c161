"""The checker: from a recorded history (see :mod:`history`), find every anomaly.

Modelled on Jepsen's Kafka queue workload (``jepsen.tests.kafka``): producers write
unique values, consumers poll and commit, and at the end one full read of every
partition is the authority on what the log holds. Pure: a list of events in, a JSON-ready
report out, so hand-made histories test it (tests/unit/test_jepsen_checker.py).

Checks (the names are the keys of ``report["checks"]``; each counts its cases and keeps
a few examples):

- ``lost-write``: a send acknowledged (``ok``) whose value the final read does not hold.
- ``offset-mismatch``: an acknowledged value the final read holds at another partition
  or offset than the broker acknowledged.
- ``duplicate``: a value the final read holds more than once (producers are idempotent
  and every value is unique, so any copy is a duplicate append).
- ``nonmonotonic-send``: one producer's acknowledged sends to one partition whose
  offsets do not grow with the producer's sequence (idempotent producers keep order).
- ``out-of-order``: in the final read, one producer's values on one partition not in
  the producer's sequence order.
- ``nonmonotonic-poll``: a group member, while it owns a partition, polled an offset at
  or below one it polled before.
- ``poll-behind-commit``: a member polled an offset below a commit of its group that
  completed before the member was assigned the partition (or below its own commit
  while it owned it): the consumer went back past a commit.
- ``committed-regress``: a read of a group's committed offset lower than one read, or
  one committed (``ok``), before the read began.
- ``committed-ahead``: a read of a committed offset higher than every commit sent
  before the read ended (an offset nobody committed).
- ``inconsistent-offsets``: one partition offset seen with two different values (by
  the acknowledgement, any poll, share poll or the final read).
- ``vanished``: an offset a consumer (group or share) read that the final read does not
  hold: visible once, then gone.
- ``phantom``: a consumer read a value no producer ever sent.
- ``unread-partition``: a partition that was written or read with no final read: the
  run cannot vouch for it.

``report["valid"]`` is True when every check is empty.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from .history import Event

__all__ = ["CHECKS", "check"]

CHECKS = ("lost-write", "offset-mismatch", "duplicate", "nonmonotonic-send", "out-of-order",
          "nonmonotonic-poll", "poll-behind-commit", "committed-regress", "committed-ahead",
          "inconsistent-offsets", "vanished", "phantom", "unread-partition")

Offset = tuple[int, int]  # (partition, offset)


class _Findings:
    """Per check: a count and the first ``limit`` examples."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count: Counter[str] = Counter()
        self.examples: dict[str, list[Any]] = defaultdict(list)

    def add(self, name: str, example: Any) -> None:
        assert name in CHECKS, name
        self.count[name] += 1
        if len(self.examples[name]) < self.limit:
            self.examples[name].append(example)

    def report(self) -> dict[str, dict[str, Any]]:
        return {n: {"count": self.count[n], "examples": self.examples.get(n, [])} for n in CHECKS}


class _Running:
    """The largest value among entries completed before a time: ``(t, value)`` pairs,
    answered by :meth:`max_before` with a bisection over a prefix maximum."""

    def __init__(self, pairs: Iterable[tuple[float, int]]) -> None:
        ordered = sorted(pairs)
        self.times = [t for t, _ in ordered]
        self.prefix: list[int] = []
        best = -1
        for _, v in ordered:
            best = max(best, v)
            self.prefix.append(best)

    def max_before(self, t: float) -> int:
        """The largest value whose time is strictly below ``t``; -1 if none."""
        i = bisect.bisect_left(self.times, t)
        return self.prefix[i - 1] if i else -1


def _t0(ev: Event) -> float:
    """When the operation was invoked (its completion if it has no ``t0``)."""
    return float(ev["t0"] if "t0" in ev else ev["t"])


def _offsets(ev: Event) -> dict[int, int]:
    return {int(p): int(o) for p, o in ev.get("offsets", {}).items()}


class _Run:
    """One check of one history (the events sorted by completion time)."""

    def __init__(self, events: list[Event], limit: int) -> None:
        self.events = sorted(events, key=lambda e: e["t"])
        self.found = _Findings(limit)
        self.final: dict[int, dict[int, str]] = {}       # partition -> offset -> value
        self.final_at: dict[str, list[Offset]] = defaultdict(list)  # value -> where the final read has it
        self.seen: dict[Offset, tuple[str, str]] = {}     # first observation: (value, by whom)
        self.sent_values: set[str] = set()
        self.stats: Counter[str] = Counter()
        by_key: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
        for ev in self.events:
            if ev["f"] == "commit" and ev["type"] == "ok":
                for p, o in _offsets(ev).items():
                    by_key[(ev["group"], p)].append((ev["t"], o))
        self._ok_commits = {k: _Running(v) for k, v in by_key.items()}

    # -- the pieces ----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        for ev in self.events:
            self.stats[f"{ev['f']}:{ev['type']}"] += 1
            if ev["f"] == "send":
                self.sent_values.add(ev["value"])
            elif ev["f"] == "final-read":
                self._final(ev)
        self._sends()
        self._final_log()
        self._polls()
        self._committed()
        self._observations()
        self._coverage()
        checks = self.found.report()
        return {"valid": not any(c["count"] for c in checks.values()), "checks": checks,
                "stats": self._stats()}

    def _final(self, ev: Event) -> None:
        part = int(ev["partition"])
        got = self.final.setdefault(part, {})
        for off, value in ev["records"]:
            got[int(off)] = value
            self.final_at[value].append((part, int(off)))

    def _observe(self, where: Offset, value: str, by: str) -> None:
        had = self.seen.get(where)
        if had is None:
            self.seen[where] = (value, by)
        elif had[0] != value:
            self.found.add("inconsistent-offsets", {"partition": where[0], "offset": where[1],
                                                    "values": [had[0], value], "seen_by": [had[1], by]})

    def _sends(self) -> None:
        """lost-write, offset-mismatch, nonmonotonic-send; acknowledged offsets observed."""
        acked: dict[tuple[str, int], list[tuple[int, int, str]]] = defaultdict(list)
        for ev in self.events:
            if ev["f"] != "send" or ev["type"] != "ok":
                continue
            part, off, value = int(ev["partition"]), int(ev["offset"]), ev["value"]
            acked[(str(ev["producer"]), part)].append((int(ev["seq"]), off, value))
            if part not in self.final:
                continue
            where = self.final_at.get(value)
            if not where:
                self.found.add("lost-write", {"value": value, "partition": part, "offset": off, "t": ev["t"]})
            elif (part, off) not in where:
                self.found.add("offset-mismatch", {"value": value, "acknowledged": [part, off], "read": where})
        for (producer, part), sends in acked.items():
            sends.sort()
            for (s1, o1, v1), (s2, o2, v2) in zip(sends, sends[1:]):
                if o2 <= o1:
                    self.found.add("nonmonotonic-send", {"producer": producer, "partition": part,
                                                         "sends": [[v1, o1], [v2, o2]]})

    def _final_log(self) -> None:
        """duplicate, out-of-order (final read)."""
        for value, where in self.final_at.items():
            if len(where) > 1:
                self.found.add("duplicate", {"value": value, "at": sorted(where)})
        seqs = {ev["value"]: (str(ev["producer"]), int(ev["seq"])) for ev in self.events if ev["f"] == "send"}
        for part, log in sorted(self.final.items()):
            last: dict[str, tuple[int, str]] = {}
            for off in sorted(log):
                value = log[off]
                self._observe((part, off), value, "final-read")
                if value not in seqs:
                    continue
                producer, seq = seqs[value]
                prev = last.get(producer)
                if prev is not None and seq < prev[0]:  # (equal: a duplicate, reported as such)
                    self.found.add("out-of-order", {"partition": part, "producer": producer,
                                                    "values": [prev[1], value], "offset": off})
                last[producer] = (seq, value)

    def _commits(self, group: str, part: int) -> _Running:
        """The group's acknowledged commits of ``part`` (completion time, offset)."""
        return self._ok_commits.get((group, part)) or _Running(())

    def _polls(self) -> None:
        """nonmonotonic-poll, poll-behind-commit; polled offsets observed."""
        last: dict[tuple[str, int], int] = {}       # (process, partition) -> last polled offset
        floor: dict[tuple[str, int], int] = {}      # (process, partition) -> lowest offset allowed
        for ev in self.events:
            f, proc = ev["f"], ev["process"]
            if f == "assign":
                for p in ev["partitions"]:
                    last.pop((proc, int(p)), None)
                    floor[(proc, int(p))] = self._commits(ev["group"], int(p)).max_before(ev["t"])
            elif f == "revoke":
                for p in ev["partitions"]:
                    last.pop((proc, int(p)), None)
                    floor.pop((proc, int(p)), None)
            elif f == "commit" and ev["type"] == "ok":
                for p, o in _offsets(ev).items():
                    if (proc, p) in floor:
                        floor[(proc, p)] = max(floor[(proc, p)], o)
            elif f in ("poll", "share-poll") and ev["type"] == "ok":
                for p, off, value in ev["records"]:
                    p, off = int(p), int(off)
                    self._observe((p, off), value, f"{f} by {proc}")
                    if value not in self.sent_values:
                        self.found.add("phantom", {"value": value, "partition": p, "offset": off, "process": proc})
                    if f == "poll":
                        self._poll_order(proc, p, off, ev, last, floor)

    def _poll_order(self, proc: str, p: int, off: int, ev: Event, last: dict[tuple[str, int], int],
                    floor: dict[tuple[str, int], int]) -> None:
        key = (proc, p)
        prev = last.get(key)
        if prev is not None and off <= prev:
            self.found.add("nonmonotonic-poll", {"process": proc, "partition": p, "offsets": [prev, off],
                                                 "t": ev["t"]})
        low = floor.get(key, -1)
        if off < low:
            self.found.add("poll-behind-commit", {"process": proc, "group": ev["group"], "partition": p,
                                                  "offset": off, "committed": low, "t": ev["t"]})
        last[key] = off

    def _committed(self) -> None:
        """committed-regress, committed-ahead."""
        reads: dict[tuple[str, int], list[tuple[float, float, int]]] = defaultdict(list)
        sent: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
        for ev in self.events:
            if ev["f"] == "committed" and ev["type"] == "ok":
                for p, o in _offsets(ev).items():
                    reads[(ev["group"], p)].append((_t0(ev), ev["t"], o))
            elif ev["f"] == "commit" and ev["type"] != "fail":
                for p, o in _offsets(ev).items():
                    sent[(ev["group"], p)].append((_t0(ev), o))
        for key, rs in reads.items():
            completed = _Running((t, o) for _, t, o in rs)
            invoked = _Running(sent.get(key, ()))
            committed = self._commits(*key)
            for t0, t, o in rs:
                low = max(completed.max_before(t0), committed.max_before(t0))
                if o < low:
                    self.found.add("committed-regress", {"group": key[0], "partition": key[1], "read": o,
                                                         "earlier": low, "t": t})
                if o >= 0 and o > invoked.max_before(t):
                    self.found.add("committed-ahead", {"group": key[0], "partition": key[1], "read": o,
                                                       "highest_sent": invoked.max_before(t), "t": t})

    def _observations(self) -> None:
        """inconsistent-offsets for acknowledgements; vanished."""
        for ev in self.events:
            if ev["f"] == "send" and ev["type"] == "ok":
                self._observe((int(ev["partition"]), int(ev["offset"])), ev["value"], f"ack to {ev['process']}")
        for (p, off), (value, by) in self.seen.items():
            if by.startswith(("poll", "share-poll")) and p in self.final and off not in self.final[p]:
                self.found.add("vanished", {"partition": p, "offset": off, "value": value, "seen_by": by})

    def _coverage(self) -> None:
        touched = {int(ev["partition"]) for ev in self.events if ev["f"] == "send" and ev["type"] == "ok"}
        touched |= {p for p, _ in self.seen}
        for p in sorted(touched - set(self.final)):
            self.found.add("unread-partition", {"partition": p})

    def _stats(self) -> dict[str, Any]:
        acked = {ev["value"] for ev in self.events if ev["f"] == "send" and ev["type"] == "ok"}
        consumed = {r[2] for ev in self.events if ev["f"] == "poll" and ev["type"] == "ok" for r in ev["records"]}
        shared = [r[2] for ev in self.events if ev["f"] == "share-poll" and ev["type"] == "ok" for r in ev["records"]]
        return {
            "ops": dict(sorted(self.stats.items())),
            "acknowledged": len(acked),
            "final_records": sum(len(v) for v in self.final.values()),
            "acknowledged_never_polled": len(acked - consumed),
            "share_deliveries": len(shared),
            "share_distinct": len(set(shared)),
            "faults": dict(Counter(ev["fault"] for ev in self.events
                                   if ev["f"] == "nemesis" and ev.get("phase") == "start")),
        }


def check(events: Iterable[Event], *, examples: int = 5) -> dict[str, Any]:
    """Check a history; returns ``{"valid", "checks": {name: {"count", "examples"}},
    "stats"}`` (see the module doc). Never raises for an anomaly; raises KeyError or
    ValueError only for a malformed event."""
    return _Run(list(events), examples).run()
