"""Topic ``compression.type``: what recompressing produced batches costs.

Two measurements, in one run:

* ``codec``: :func:`hightide.protocol.records.recompress_batch` alone, MB/s of
  uncompressed record bytes, for batches sent uncompressed (and lz4) recompressed to each
  codec at Kafka's default levels — the broker's CPU cost per byte;
* ``produce``: end to end, one confluent-kafka producer (uncompressed batches, 1 KiB
  JSON-like values, acks=1) into a ``hightide serve`` topic with ``compression.type``
  ``producer`` (the opaque default path: batches stored as sent) and with each codec;
  records/s and MB/s of values, plus the bytes stored per value byte.

Prints JSON with the machine's physical limits for scale. Not a test: nothing is asserted.

    python bench/recompression.py [--mb 40]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _limits import MB, git_revision, log, machine, measure  # noqa: E402

from hightide.protocol.records import build_batch, recompress_batch  # noqa: E402

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
WORDS = ["order", "customer", "amount", "status", "shipped", "pending", "eur", "usd", "item", "warehouse"]


def _value(rng: random.Random, size: int = 1024) -> bytes:
    """A JSON-like value of about ``size`` bytes (compresses like real event payloads)."""
    parts = []
    while sum(len(p) for p in parts) < size:
        parts.append(f'"{rng.choice(WORDS)}":"{rng.choice(WORDS)}-{rng.randrange(10**6)}"')
    return ("{" + ",".join(parts) + "}").encode()[:size]


def codec_throughput(seconds: float = 1.0) -> dict:
    rng = random.Random(7)
    recs = [(f"k{i}".encode(), _value(rng), [], 1_700_000_000_000 + i) for i in range(256)]  # ~256 KiB batch
    raw = sum(len(r[1]) for r in recs)
    out = {}
    for source in ("uncompressed", "lz4"):
        batch = build_batch(recs, compression=CODECS[source])
        for target, codec in CODECS.items():
            if target == source:
                continue
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                recompress_batch(batch, codec)
                n += 1
            out[f"{source}->{target}"] = round(n * raw / (time.perf_counter() - t0) / MB, 1)
    return {"batch_value_bytes": raw, "mb_per_s_of_values": out}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def produce_throughput(total_mb: int) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    port = _free_port()
    d = tempfile.mkdtemp(prefix="recompress-")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "serve", "--data-dir", os.path.join(d, "data"),
                             "--listen", f"127.0.0.1:{port}", "--log-level", "warning"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        rng = random.Random(1)
        values = [_value(rng) for _ in range(512)]
        count = total_mb * MB // 1024
        out = {}
        # A warm-up topic first (not reported); producer first and last: the spread
        # between the two is the run's noise.
        for kind in ("producer-warmup", "producer", "lz4", "zstd", "snappy", "gzip", "producer-again"):
            topic = f"bench-{kind}"
            kind = kind.removesuffix("-again").removesuffix("-warmup")
            admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": kind})])[topic].result(30)
            p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1,
                          "compression.type": "none", "queue.buffering.max.kbytes": 1 << 20})
            log(f"produce {count} x 1 KiB into compression.type={kind}")
            t0 = time.perf_counter()
            for i in range(count):
                while True:
                    try:
                        p.produce(topic, values[i % len(values)], partition=0)
                        break
                    except BufferError:
                        p.poll(0.01)
            p.flush(120)
            dt = time.perf_counter() - t0
            stored = sum(f.stat().st_size for f in Path(d, "data", f"{topic}-0").glob("*.log"))
            if topic.endswith("-warmup"):
                continue
            out[topic.removeprefix("bench-")] = {"records_per_s": round(count / dt), "mb_per_s": round(count * 1024 / dt / MB, 1),
                         "stored_bytes_per_value_byte": round(stored / (count * 1024), 3)}
        return {"records": count, "value_bytes": 1024, "topics": out}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=40, help="MB of values produced into each topic")
    args = ap.parse_args()
    log("codec throughput")
    codec = codec_throughput()
    produce = produce_throughput(args.mb)
    tmp = tempfile.mkdtemp(prefix="limits-")
    try:
        limits = measure(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"benchmark": "recompression", "codec": codec, "produce": produce, "physical_limits": limits,
                      "machine": machine(), "loadavg": os.getloadavg(), "commit": git_revision()}, indent=2))


if __name__ == "__main__":
    main()
