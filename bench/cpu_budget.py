"""Where the CPU of a 10 KB produce goes, in CPU-seconds per GB: the arithmetic behind
the produce throughput ceiling of a machine.

Run:  .venv/bin/python bench/cpu_budget.py [--seconds 5] [--record-bytes 10000]

Measures, one after the other on an otherwise idle machine:

1. ``page_cache_write``: one thread ``os.pwrite``-ing 1 MiB buffers into a fresh file
   (no fsync) -- the kernel's copy into the page cache, the least a broker that stores
   the bytes must spend (the thread's own CPU time, ``RUSAGE_THREAD``);
2. ``loopback``: a 1 MiB ``sendall`` loop and a ``recv_into`` loop on one TCP loopback
   connection -- what moving the bytes from client to broker costs both sides;
3. ``produce``: a confluent-kafka producer (the same configuration as
   ``bench/produce_consume.py``) into a real ``hightide serve``: the client's CPU
   (``RUSAGE_SELF`` of this process, which does nothing else meanwhile) and the broker's
   (``/proc/<pid>/stat``), each per GB produced.

``ceiling_mb_per_s`` is ``cpus / (client + broker)``: the produce rate at which the
client and the broker together would use every core. On a 2-core machine a broker
costing no more than a bare page-cache write (item 1) would still be limited by the
client's cost plus its own. One JSON document on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
import produce_consume as pc  # noqa: E402

GB = 1e9
MiB = 1 << 20


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def page_cache_write(directory: str, seconds: float) -> dict:
    """CPU-seconds per GB of one thread's 1 MiB pwrites into a fresh file."""
    path = os.path.join(directory, "pagecache.bin")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    chunk, pos = os.urandom(MiB), 0
    try:
        c0, t0 = _cpu(resource.getrusage(resource.RUSAGE_THREAD)), time.perf_counter()
        while time.perf_counter() - t0 < seconds and pos < (3 << 30):
            pos += os.pwrite(fd, chunk, pos)
        cpu, wall = _cpu(resource.getrusage(resource.RUSAGE_THREAD)) - c0, time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"gb": round(pos / GB, 3), "mb_per_s": round(pos / wall / 1e6, 1), "cpu_s_per_gb": round(cpu / (pos / GB), 3)}


def loopback(seconds: float) -> dict:
    """CPU-seconds per GB of sender plus receiver on one TCP loopback connection."""
    srv = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def reader() -> None:
        conn, _ = srv.accept()
        view = memoryview(bytearray(MiB))
        with conn:
            while n := conn.recv_into(view):
                received[0] += n

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    data = os.urandom(MiB)
    c0, t0 = _cpu(resource.getrusage(resource.RUSAGE_SELF)), time.perf_counter()
    with socket.create_connection(srv.getsockname()) as c:
        while time.perf_counter() - t0 < seconds:
            c.sendall(data)
    th.join()
    cpu, wall = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - c0, time.perf_counter() - t0
    srv.close()
    return {"mb_per_s": round(received[0] / wall / 1e6, 1), "cpu_s_per_gb": round(cpu / (received[0] / GB), 3)}


def _broker_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(workdir: Path, seconds: float, size: int) -> dict:
    """A confluent-kafka producer into a real broker: client and broker CPU per GB."""
    from confluent_kafka import Producer
    broker = pc.Broker(workdir)
    broker.start()
    try:
        pc.create_topics(broker.bootstrap, ["budget"])
        p = Producer({**pc.PRODUCER_CONF, "bootstrap.servers": broker.bootstrap})
        payload, n = os.urandom(size), 0
        for part in range(pc.PARTITIONS):  # warm up: metadata and connections
            p.produce("budget", payload, partition=part)
        p.flush(30)
        b0, c0 = _broker_cpu(broker.proc.pid), _cpu(resource.getrusage(resource.RUSAGE_SELF))  # type: ignore[union-attr]
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(500):
                try:
                    p.produce("budget", payload)
                    n += 1
                except BufferError:
                    p.poll(0.002)
            p.poll(0)
        left = p.flush(60)
        wall = time.perf_counter() - t0
        client = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - c0
        served = _broker_cpu(broker.proc.pid) - b0  # type: ignore[union-attr]
    finally:
        stopped = broker.stop()
    gb = (n - left) * size / GB
    return {"record_bytes": size, "gb": round(gb, 3), "mb_per_s": round(gb * 1000 / wall, 1),
            "client_cpu_s_per_gb": round(client / gb, 3), "broker_cpu_s_per_gb": round(served / gb, 3),
            "broker": stopped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--record-bytes", type=int, default=10_000)
    args = ap.parse_args()
    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="hightide-cpu-budget-") as tmp:
        _limits.log("page-cache write")
        pcw = page_cache_write(tmp, min(args.seconds, 3.0))
        _limits.log("loopback")
        lo = loopback(min(args.seconds, 2.0))
        _limits.log(f"produce {args.record_bytes} B records into hightide")
        prod = produce(Path(tmp), args.seconds, args.record_bytes)
    total = prod["client_cpu_s_per_gb"] + prod["broker_cpu_s_per_gb"]
    floor = prod["client_cpu_s_per_gb"] + pcw["cpu_s_per_gb"]
    print(json.dumps({
        "machine": _limits.machine(), "revision": _limits.git_revision(), "cpus": cpus, "page_cache_write": pcw, "loopback": lo, "produce": prod,
        "ceiling_mb_per_s": round(cpus / total * 1000, 1),
        "ceiling_if_broker_cost_only_the_page_cache_write_mb_per_s": round(cpus / floor * 1000, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
