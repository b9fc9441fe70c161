"""The Jepsen-style checker (bench/jepsen/checker.py) on hand-made histories: a clean
history passes every check, and each violating history makes exactly the check meant for
it fire (so a run that reports no anomaly is evidence, not a checker that cannot fail)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.jepsen.checker import CHECKS, check
from bench.jepsen.history import History


def send(t: float, producer: int, seq: int, partition: int, offset: int | None, type_: str = "ok") -> dict[str, Any]:
    ev = {"f": "send", "type": type_, "process": f"producer-{producer}", "t": t, "producer": producer,
          "seq": seq, "value": f"p{producer}-{seq}", "partition": partition}
    if offset is not None:
        ev["offset"] = offset
    return ev


def poll(t: float, proc: str, records: list[list[Any]], f: str = "poll") -> dict[str, Any]:
    return {"f": f, "type": "ok", "process": proc, "t": t, "group": "g", "records": records}


def assign(t: float, proc: str, parts: list[int], f: str = "assign") -> dict[str, Any]:
    return {"f": f, "type": "ok", "process": proc, "t": t, "group": "g", "partitions": parts}


def commit(t0: float, t: float, proc: str, offsets: dict[int, int], type_: str = "ok") -> dict[str, Any]:
    return {"f": "commit", "type": type_, "process": proc, "t0": t0, "t": t, "group": "g", "offsets": offsets}


def committed(t0: float, t: float, offsets: dict[int, int]) -> dict[str, Any]:
    return {"f": "committed", "type": "ok", "process": "reader", "t0": t0, "t": t, "group": "g",
            "offsets": offsets}


def final(t: float, partition: int, records: list[list[Any]]) -> dict[str, Any]:
    return {"f": "final-read", "type": "ok", "process": "final", "t": t, "partition": partition,
            "records": records, "end": (records[-1][0] + 1) if records else 0}


def clean() -> list[dict[str, Any]]:
    """Two producers on two partitions, a member that polls, commits, is revoked and a
    second member that takes over from the commit, a committed-offset reader, a share
    consumer, a fault, and the final read agreeing with all of it. One timed-out send
    (info) that did land and one that did not."""
    return [
        {"f": "nemesis", "type": "info", "process": "nemesis", "t": 0.5, "fault": "kill", "node": 1,
         "phase": "start"},
        send(1.0, 0, 0, 0, 0), send(1.1, 1, 0, 0, 1), send(1.2, 0, 1, 1, 0), send(1.3, 0, 2, 0, 2),
        send(1.4, 1, 1, 1, None, "info"),          # timed out, landed at 1/1
        send(1.5, 1, 2, 1, None, "info"),          # timed out, never landed
        send(1.6, 1, 3, 1, 2),
        assign(2.0, "c1", [0, 1]),
        poll(2.1, "c1", [[0, 0, "p0-0"], [0, 1, "p1-0"], [1, 0, "p0-1"]]),
        commit(2.2, 2.3, "c1", {0: 2, 1: 1}),
        committed(2.4, 2.5, {0: 2, 1: 1}),
        poll(2.6, "c1", [[0, 2, "p0-2"]]),
        assign(3.0, "c1", [0, 1], "revoke"),
        commit(3.05, 3.1, "c1", {0: 3}, "info"),    # unknown outcome: may or may not have landed
        assign(3.2, "c2", [0, 1]),
        poll(3.3, "c2", [[0, 2, "p0-2"], [1, 1, "p1-1"], [1, 2, "p1-3"]]),  # re-reads 0/2: allowed
        commit(3.4, 3.5, "c2", {0: 3, 1: 3}),
        committed(3.6, 3.7, {0: 3, 1: 3}),
        poll(3.8, "s1", [[1, 0, "p0-1"], [1, 0, "p0-1"], [0, 2, "p0-2"]], "share-poll"),  # redelivery: fine
        final(5.0, 0, [[0, "p0-0"], [1, "p1-0"], [2, "p0-2"]]),
        final(5.1, 1, [[0, "p0-1"], [1, "p1-1"], [2, "p1-3"]]),
    ]


def fired(events: list[dict[str, Any]]) -> set[str]:
    return {name for name, c in check(events)["checks"].items() if c["count"]}


def test_clean_history_passes_every_check():
    report = check(clean())
    assert report["valid"], {k: v for k, v in report["checks"].items() if v["count"]}
    assert set(report["checks"]) == set(CHECKS)
    assert report["stats"]["acknowledged"] == 5 and report["stats"]["final_records"] == 6
    assert report["stats"]["faults"] == {"kill": 1}
    assert report["stats"]["share_deliveries"] == 3 and report["stats"]["share_distinct"] == 2


def test_history_round_trips_through_a_file(tmp_path):
    h = History(clean())
    h.dump(tmp_path / "h.jsonl")
    back = History.load(tmp_path / "h.jsonl").events()
    assert back == json.loads(json.dumps(clean()))  # partitions in offset maps become strings
    assert check(back)["valid"]


def replace(events: list[dict[str, Any]], i: int, **changes: Any) -> list[dict[str, Any]]:
    out = [dict(e) for e in events]
    out[i].update(changes)
    return out


def index(events: list[dict[str, Any]], f: str, n: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["f"] == f][n]


def test_lost_write():
    ev = clean()
    fin = index(ev, "final-read")
    ev[fin] = final(5.0, 0, [[0, "p0-0"], [1, "p1-0"]])  # p0-2 (acked at 0/2) is gone
    got = check(ev)
    assert got["checks"]["lost-write"]["count"] == 1
    assert got["checks"]["lost-write"]["examples"][0]["value"] == "p0-2"
    # it was also polled by c1 and c2 at 0/2 and delivered to the share group: visible, then gone
    assert fired(ev) == {"lost-write", "vanished"}


def test_offset_mismatch_and_inconsistent_offsets():
    ev = clean()
    ev[index(ev, "final-read", 1)] = final(5.1, 1, [[0, "p0-1"], [1, "p1-3"], [2, "p1-1"]])
    assert fired(ev) == {"offset-mismatch", "inconsistent-offsets", "out-of-order"}


def test_duplicate():
    ev = clean()
    ev[index(ev, "final-read", 1)] = final(5.1, 1, [[0, "p0-1"], [1, "p1-1"], [2, "p1-3"], [3, "p1-3"]])
    assert fired(ev) == {"duplicate"}


def test_nonmonotonic_send():
    ev = clean()
    i = [k for k, e in enumerate(ev) if e.get("value") == "p0-2"][0]
    ev = replace(ev, i, seq=-1)  # p0's 'later' value acknowledged at a higher offset than an earlier one
    assert "nonmonotonic-send" in fired(ev)


def test_out_of_order_in_the_final_read():
    ev = clean()
    ev.append(send(1.7, 0, 3, 0, 3))
    ev.append(send(1.8, 0, 4, 0, 4))
    ev[index(ev, "final-read")] = final(5.0, 0, [[0, "p0-0"], [1, "p1-0"], [2, "p0-2"], [3, "p0-4"], [4, "p0-3"]])
    assert "out-of-order" in fired(ev)


def test_nonmonotonic_poll():
    ev = clean()
    ev.insert(index(ev, "poll", 1) + 1, poll(2.65, "c1", [[0, 1, "p1-0"]]))  # back to 0/1 while owning 0
    assert fired(ev) == {"nonmonotonic-poll", "poll-behind-commit"}


def test_poll_behind_commit_after_a_rebalance():
    ev = clean()
    # c2 takes partition 0 over after c1's commit of 2 and starts at offset 1
    i = index(ev, "poll", 2)
    ev[i] = poll(3.3, "c2", [[0, 1, "p1-0"], [0, 2, "p0-2"], [1, 1, "p1-1"], [1, 2, "p1-3"]])
    assert fired(ev) == {"poll-behind-commit"}


def test_committed_regress():
    ev = clean()
    ev.append(committed(4.0, 4.1, {0: 2, 1: 3}))  # after 3 was read and committed
    got = check(ev)
    assert fired(ev) == {"committed-regress"}
    assert got["checks"]["committed-regress"]["examples"][0]["earlier"] == 3


def test_committed_read_overlapping_a_commit_is_not_a_regression():
    ev = clean()
    ev.append(commit(4.0, 4.4, "c2", {0: 3, 1: 3}))
    ev.append(committed(4.1, 4.2, {0: 3, 1: 3}))  # began before the commit completed
    assert check(ev)["valid"]


def test_committed_ahead():
    ev = clean()
    ev.append(committed(4.0, 4.1, {0: 9}))
    assert fired(ev) == {"committed-ahead"}


def test_vanished_share_delivery():
    ev = clean()
    ev.append(poll(3.9, "s1", [[1, 7, "p1-2"]], "share-poll"))  # the unacknowledged send, seen at 1/7
    assert fired(ev) == {"vanished"}


def test_phantom():
    ev = clean()
    ev.append(poll(3.9, "c2", [[1, 3, "nobody-sent-this"]]))
    assert "phantom" in fired(ev)


def test_unread_partition():
    ev = [e for e in clean() if not (e["f"] == "final-read" and e["partition"] == 1)]
    assert fired(ev) == {"unread-partition"}


@pytest.mark.parametrize("name", CHECKS)
def test_every_check_is_exercised_above(name):
    """Each named check fires on at least one of the violating histories above."""
    histories = []
    ev = clean()
    ev[index(ev, "final-read")] = final(5.0, 0, [[0, "p0-0"], [1, "p1-0"]])
    histories.append(ev)
    ev = clean()
    ev[index(ev, "final-read", 1)] = final(5.1, 1, [[0, "p0-1"], [1, "p1-3"], [2, "p1-1"], [3, "p1-1"]])
    histories.append(ev)
    ev = clean()
    i = [k for k, e in enumerate(ev) if e.get("value") == "p0-2"][0]
    histories.append(replace(ev, i, seq=-1))
    ev = clean()
    ev.insert(index(ev, "poll", 1) + 1, poll(2.65, "c1", [[0, 1, "p1-0"]]))
    histories.append(ev)
    histories.append([*clean(), committed(4.0, 4.1, {0: 2, 1: 3}), committed(4.2, 4.3, {0: 9})])
    histories.append([*clean(), poll(3.9, "c2", [[1, 3, "nobody-sent-this"]])])
    histories.append([e for e in clean() if not (e["f"] == "final-read" and e["partition"] == 1)])
    assert any(check(h)["checks"][name]["count"] for h in histories)


def test_write_gaps_measure_the_longest_stall_after_each_fault():
    from bench.jepsen.availability import write_gaps
    ev = [send(0.1 * i, 0, i, i % 2, i // 2) for i in range(10)]        # both partitions every 0.2 s
    ev.append({"f": "nemesis", "type": "info", "process": "nemesis", "t": 1.05, "fault": "kill", "node": 0,
               "phase": "start"})
    ev += [send(1.1, 1, 0, 1, 5), send(4.0, 1, 1, 0, 5)]                # partition 0 stalls 0.8 -> 4.0
    ev.append({"f": "nemesis", "type": "info", "process": "nemesis", "t": -1.0, "fault": "pause", "node": 1,
               "phase": "start"})                                       # before any ack: not measured
    got = write_gaps(ev)
    assert got["kill"] == {"faults": 1, "p50_ms": 3200, "p99_ms": 3200, "max_ms": 3200, "not_measured": 0}
    assert got["pause"]["faults"] == 0 and got["pause"]["not_measured"] == 1
