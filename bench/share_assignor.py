"""The ``backlog`` share assignor against ``simple``: how long a share group takes to drain
a backlog, through a real ``hightide serve``, when the backlog is skewed, uniform, or moves.

Run:  .venv/bin/python bench/share_assignor.py [--quick] [--records N] [--cost-us C]

What it measures (honestly: a *simulation of consumers* against a real broker). One broker
(``group.share.assignors=simple,backlog``, heartbeat interval 1 s, the backlog assignor's
default ``group.share.backlog.assignor.interval.ms`` of 15 s) serves a 12-partition topic
per run. ``M`` share consumers are asyncio tasks in this process, each on its own
connection, speaking the real share-group protocol: ShareGroupHeartbeat every interval
the broker asks for (taking the assignment it returns), and a ShareFetch loop over the
partitions assigned to it (new ones added to the share session, dropped ones forgotten
once their records are acknowledged). Each consumer "processes" what it acquired by
sleeping ``cost`` per record (a fixed per-record processing cost, no CPU burnt), then
acknowledges it (ACCEPT) in its next ShareFetch. Both assignors get the same broker,
records, consumers and cost; only the group's ``share.assignor`` differs.

Scenarios (12 partitions):

* ``skewed``: 70% of the records in partitions 0 and 1 (35% each), 3% in each other one;
* ``uniform``: the same number in every partition (no regression expected);
* ``moving``: half the records skewed into partitions 0 and 1; once the group has
  acknowledged half of them, the other half is produced into partitions 6 and 7.

Reported per run: ``drain_s`` (consumers started → every partition's share lag 0, as
DescribeShareGroupOffsets reports from the persisted share state), per-member
utilisation (time spent processing / drain time), a share-lag series (total and largest
partition, every 0.5 s), ``target_changes`` (distinct group assignment epochs, later than the
one every member joined at, at which a member's assignment changed: retargets) and ``per_minute`` of them.

The issue asks for 1 M records; the default is 240 000 records of 100 bytes at 500 µs
each (120 s of processing in all, 15 s per member with 8) so a full run stays around six
minutes on a loaded 2-core machine while a drain still spans the backlog assignor's 15 s
retarget interval: the ratios, not the absolute seconds, are the result. Prints one JSON document
(progress on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits
from produce_consume import Broker, create_topics
from share_groups import GROUP_RESOURCE, Conn

from hightide.client import AdminClient

PARTITIONS = 12
MAX_RECORDS = 200  # per ShareFetch: a heavy partition can serve 10 members within its 2000 record locks
HEARTBEAT_MS = 1000
log = _limits.log


def shares(kind: str) -> list[float]:
    if kind == "uniform":
        return [1 / PARTITIONS] * PARTITIONS
    return [0.35, 0.35] + [0.03] * (PARTITIONS - 2)


def produce(bootstrap: str, topic: str, counts: dict[int, int], size: int = 100) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 100,
                  "acks": "all", "compression.type": "none"})
    payload = os.urandom(size)
    for partition, n in counts.items():
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, payload, partition=partition)
                    break
                except BufferError:
                    p.poll(0.005)
    assert p.flush(120) == 0


def _split(n: int, weights: list[float], only: list[int] | None = None) -> dict[int, int]:
    idx = only if only is not None else list(range(len(weights)))
    w = [weights[i] for i in idx]
    counts = {i: int(n * x / sum(w)) for i, x in zip(idx, w)}
    counts[idx[0]] += n - sum(counts.values())
    return counts


async def configure(bootstrap: str, group: str, assignor: str) -> None:
    c = await Conn.open(bootstrap)
    r = await c.request(44, 1, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
        {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"},
        {"name": "share.assignor", "config_operation": 0, "value": assignor}]}], "validate_only": False})
    assert r.responses[0].error_code == 0, r
    await c.close()


class Member:
    """One simulated share consumer (see the module doc)."""

    def __init__(self, bootstrap: str, group: str, topic: str, tid: uuid.UUID, cost_s: float, run: dict) -> None:
        self.bootstrap, self.group, self.topic, self.tid, self.cost_s = bootstrap, group, topic, tid, cost_s
        self.run = run
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.assigned: set[int] = set()
        self.busy_s = 0.0
        self.records = 0
        self.changes: list[tuple[float, int]] = []  # (time, member epoch) of assignment changes

    async def heartbeat(self, c: Conn) -> float:
        body = {"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch, "rack_id": None,
                "subscribed_topic_names": [self.topic] if self.epoch == 0 else None}
        r = await c.request(76, 1, body)
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            new = {p for t in r.assignment.topic_partitions for p in t.partitions}
            if new != self.assigned:
                self.changes.append((time.monotonic(), self.epoch))
                self.assigned = new
        hb = r.heartbeat_interval
        return hb.total_seconds() if hasattr(hb, "total_seconds") else hb / 1000

    async def main(self) -> None:
        c = await Conn.open(self.bootstrap)
        try:
            await self._loop(c)
        finally:
            await c.close()

    async def _loop(self, c: Conn) -> None:
        interval = await self.heartbeat(c)
        next_hb = time.monotonic() + interval
        session: set[int] = set()
        pending: dict[int, list[tuple[int, int]]] = {}
        epoch = 0
        stop: asyncio.Event = self.run["stop"]
        while not stop.is_set():
            if time.monotonic() >= next_hb or not self.assigned:
                interval = await self.heartbeat(c)
                next_hb = time.monotonic() + interval
                if not self.assigned:
                    await asyncio.sleep(0.2)
                    continue
            wanted = self.assigned
            # add new partitions, acknowledge the pending ones, forget what is no longer
            # assigned once nothing of it is pending
            parts = {p for p in wanted if p not in session or epoch == 0} | {p for p in pending if pending[p]}
            forget = {p for p in session - wanted if not pending.get(p)}
            topics = [{"topic_id": self.tid, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": [1]} for f, last in pending.get(p, ())]}
                for p in sorted(parts)]}] if parts else []
            r = await c.request(78, 1, {
                "group_id": self.group, "member_id": self.member_id, "share_session_epoch": epoch,
                "max_wait": 200, "min_bytes": 1, "max_bytes": 8 << 20, "max_records": MAX_RECORDS,
                "batch_size": MAX_RECORDS, "topics": topics,
                "forgotten_topics_data": [{"topic_id": self.tid, "partitions": sorted(forget)}] if forget else []})
            if r.error_code != 0:
                raise RuntimeError(f"ShareFetch: {r.error_code} {r.error_message}")
            epoch += 1
            session = (session | parts) - forget
            pending = {}
            got = 0
            for t in r.responses:
                for p in t.partitions:
                    for a in p.acquired_records:
                        pending.setdefault(p.partition_index, []).append((a.first_offset, a.last_offset))
                        got += a.last_offset - a.first_offset + 1
            if got:
                t0 = time.monotonic()
                await asyncio.sleep(got * self.cost_s)
                self.busy_s += time.monotonic() - t0
                self.records += got
        # leave, with the last acknowledgements
        if any(pending.values()):
            await c.request(79, 1, {"group_id": self.group, "member_id": self.member_id, "share_session_epoch": epoch,
                                    "topics": [{"topic_id": self.tid, "partitions": [
                                        {"partition_index": p, "acknowledgement_batches": [
                                            {"first_offset": f, "last_offset": last, "acknowledge_types": [1]}
                                            for f, last in ps]} for p, ps in sorted(pending.items()) if ps]}]})
        await c.request(76, 1, {"group_id": self.group, "member_id": self.member_id, "member_epoch": -1,
                                "rack_id": None, "subscribed_topic_names": None})


async def _lags(admin: AdminClient, group: str) -> dict[int, int | None]:
    offs = await admin.list_share_group_offsets(group)
    return {tp.partition: o.lag for tp, o in offs.items()}


def one_run(broker: Broker, scenario: str, assignor: str, members: int, records: int, cost_s: float,
            timeout_s: float) -> dict:
    tag = f"{scenario}-{assignor}-{members}-{uuid.uuid4().hex[:6]}"
    topic, group = f"t-{tag}", f"g-{tag}"
    create_topics(broker.bootstrap, [topic], partitions=PARTITIONS)
    w = shares(scenario)
    first = records if scenario != "moving" else records // 2
    produce(broker.bootstrap, topic, _split(first, w))
    asyncio.run(configure(broker.bootstrap, group, assignor))

    async def main() -> dict:
        async with AdminClient(broker.bootstrap) as admin:
            md = await admin.metadata([topic])
            tid = md.topics[topic].topic_id
            run = {"stop": asyncio.Event()}
            ms = [Member(broker.bootstrap, group, topic, tid, cost_s, run) for _ in range(members)]
            t0 = time.monotonic()
            tasks = [asyncio.create_task(m.main()) for m in ms]
            series: list[tuple[float, int, int]] = []
            second: threading.Thread | None = None
            produced = first
            deadline = t0 + timeout_s
            done_at = None
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                lags = await _lags(admin, group)
                known = [v for v in lags.values() if v is not None]
                now = time.monotonic() - t0
                if len(known) == PARTITIONS:
                    series.append((round(now, 1), sum(known), max(known)))
                if scenario == "moving" and second is None and len(known) == PARTITIONS \
                        and sum(known) <= first // 2:
                    second = threading.Thread(target=produce, args=(
                        broker.bootstrap, topic, _split(records - first, w, [6, 7])), daemon=True)
                    second.start()
                    produced = records
                    log(f"  {tag}: second burst into partitions 6, 7 at {now:.1f}s")
                if len(known) == PARTITIONS and sum(known) == 0 and (second is None or not second.is_alive()) \
                        and (scenario != "moving" or second is not None):
                    done_at = now
                    break
            run["stop"].set()
            await asyncio.wait(tasks, timeout=30)
            if done_at is None:
                raise TimeoutError(f"{tag}: not drained in {timeout_s}s (lag series tail {series[-3:]})")
            # the target epoch once every member had joined; later epochs are retargets
            joined = max(m.changes[0][1] for m in ms if m.changes)
            epochs = sorted({e for m in ms for _, e in m.changes if e > joined})
            util = [round(min(1.0, m.busy_s / done_at), 3) for m in ms]
            return {"scenario": scenario, "assignor": assignor, "members": members, "records": produced,
                    "cost_us_per_record": round(cost_s * 1e6, 1), "drain_s": round(done_at, 2),
                    "ideal_drain_s": round(produced * cost_s / members, 2),
                    "utilisation": util, "utilisation_mean": round(statistics.mean(util), 3),
                    "utilisation_min": min(util),
                    "records_per_member": [m.records for m in ms],
                    "target_changes": len(epochs), "per_minute": round(len(epochs) * 60 / done_at, 2),
                    "member_assignment_changes_after_join": sum(1 for m in ms for _, e in m.changes if e > joined),
                    "lag_series": series,
                    "lag_area_record_s": round(sum(total for _, total, _ in series) * 0.5)}

    out = asyncio.run(main())
    log(f"  {tag}: drained in {out['drain_s']}s (ideal {out['ideal_drain_s']}s), utilisation mean "
        f"{out['utilisation_mean']}, {out['target_changes']} target changes")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skewed, M=8 only, 60k records")
    ap.add_argument("--records", type=int, default=240_000)
    ap.add_argument("--cost-us", type=float, default=500.0)
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    records = 60_000 if args.quick else args.records
    cost = args.cost_us / 1e6
    plan = [("skewed", args.members)] if args.quick else [
        ("skewed", args.members), ("skewed", 4), ("uniform", args.members), ("moving", args.members)]
    with tempfile.TemporaryDirectory(prefix="ht-bench-share-assignor-") as d:
        limits = _limits.measure(d, 0.5)
        broker = Broker(Path(d) / "b", sets=[
            "group.share.assignors=simple,backlog",
            f"group.share.heartbeat.interval.ms={HEARTBEAT_MS}",
            f"group.share.min.heartbeat.interval.ms={HEARTBEAT_MS}",
            "group.share.session.timeout.ms=30000", "group.share.min.session.timeout.ms=30000"])
        (Path(d) / "b").mkdir()
        broker.start()
        runs = []
        try:
            for scenario, members in plan:
                for assignor in ("simple", "backlog"):
                    log(f"{scenario} M={members} {assignor}")
                    runs.append(one_run(broker, scenario, assignor, members, records, cost, args.timeout))
        finally:
            stopped = broker.stop()
    summary = []
    for scenario, members in plan:
        pair = {r["assignor"]: r for r in runs if r["scenario"] == scenario and r["members"] == members}
        summary.append({"scenario": scenario, "members": members,
                        "simple_drain_s": pair["simple"]["drain_s"], "backlog_drain_s": pair["backlog"]["drain_s"],
                        "speedup": round(pair["simple"]["drain_s"] / pair["backlog"]["drain_s"], 2),
                        "simple_utilisation_mean": pair["simple"]["utilisation_mean"],
                        "backlog_utilisation_mean": pair["backlog"]["utilisation_mean"],
                        "backlog_target_changes_per_minute": pair["backlog"]["per_minute"],
                        "simple_target_changes_per_minute": pair["simple"]["per_minute"]})
    print(json.dumps({"benchmark": "share_assignor", "commit": _limits.git_revision(), "machine": _limits.machine(),
                      "physical_limits": limits, "records": records, "cost_us_per_record": args.cost_us,
                      "partitions": PARTITIONS, "max_records_per_fetch": MAX_RECORDS, "heartbeat_ms": HEARTBEAT_MS,
                      "summary": summary, "runs": runs, "broker": stopped}, indent=2))


if __name__ == "__main__":
    main()
