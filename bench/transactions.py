"""Transactions on a real ``hightide serve``: EndTxn latency and transactional vs plain
produce throughput, in one run.

Run:  .venv/bin/python bench/transactions.py [--txns N] [--records R] [--seconds S]

1. **EndTxn latency**: a confluent-kafka transactional producer runs N transactions of R
   records over 2 partitions; each is flushed first, then ``commit_transaction`` is timed
   (one EndTxn round trip: the PrepareCommit record, both markers, CompleteCommit).
   p50/p99/max in milliseconds.
2. **Throughput**: for S seconds each, 100-byte records as plain (idempotent) produce and
   as transactions of 1,000 records (commit each), records per second.

Prints one JSON document (progress on stderr), with the same-run physical limits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
from produce_consume import Broker  # noqa: E402


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def end_txn_latency(bootstrap: str, txns: int, records: int) -> dict:
    from confluent_kafka import Producer
    _create(bootstrap, "bench-endtxn", 2)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-endtxn", "linger.ms": 1})
    p.init_transactions(30)
    value = b"x" * 100
    lat: list[float] = []
    for i in range(txns):
        p.begin_transaction()
        for j in range(records):
            p.produce("bench-endtxn", value=value, partition=j % 2)
        p.flush(30)
        t0 = time.perf_counter()
        p.commit_transaction(30)
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return {"transactions": txns, "records_each": records, "p50_ms": round(statistics.median(lat), 3),
            "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 3), "max_ms": round(lat[-1], 3)}


def throughput(bootstrap: str, seconds: float, transactional: bool) -> dict:
    from confluent_kafka import Producer
    topic = "bench-txn" if transactional else "bench-plain"
    _create(bootstrap, topic, 2)
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    if transactional:
        conf["transactional.id"] = "bench-throughput"
    p = Producer(conf)
    if transactional:
        p.init_transactions(30)
    value = b"x" * 100
    sent = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if transactional:
            p.begin_transaction()
        for _ in range(1000):
            while True:
                try:
                    p.produce(topic, value=value)
                    break
                except BufferError:
                    p.poll(0.01)
        sent += 1000
        if transactional:
            p.commit_transaction(30)
        else:
            p.poll(0)
    p.flush(30)
    elapsed = time.perf_counter() - t0
    return {"records": sent, "seconds": round(elapsed, 2), "records_per_s": round(sent / elapsed)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=300)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        limits = _limits.measure(tmp)
        broker = Broker(Path(tmp))
        broker.start()
        try:
            _limits.log("EndTxn latency")
            latency = end_txn_latency(broker.bootstrap, args.txns, args.records)
            _limits.log("plain produce")
            plain = throughput(broker.bootstrap, args.seconds, False)
            _limits.log("transactional produce")
            txn = throughput(broker.bootstrap, args.seconds, True)
        finally:
            broker.stop()
    print(json.dumps({"end_txn": latency, "plain_produce": plain, "transactional_produce": txn,
                      "transactional_vs_plain": round(txn["records_per_s"] / plain["records_per_s"], 3),
                      "limits": limits, "machine": _limits.machine()}, indent=2))


if __name__ == "__main__":
    main()
