"""Produce/consume throughput and produce latency of a real ``hightide serve``.

Run:  .venv/bin/python bench/produce_consume.py [--quick] [--profile-dir DIR]

Starts its own broker (free loopback port, temporary data dir), measures in order:

1. physical limits of this run (loopback TCP, page-cache write/pread, fdatasync'd write);
2. the load generator's ceiling: confluent-kafka producing into librdkafka's in-memory
   mock cluster (``test.mock.num.brokers``), same record sizes and client config;
3. produce throughput (confluent-kafka, linger.ms=10, batch.size=1 MiB, acks=all, no
   compression) with 100 B and 10 KB records into 3-partition topics, from 1..N producer
   processes;
4. consume throughput reading those topics back (confluent-kafka Consumer with assign()
   and no group, from 1 process and from one process per partition, and ``kcat -C -e``);
5. produce latency p50/p99 at a fixed 20 MB/s (10 KB records at 2,000/s, linger.ms=0),
   from ``produce()`` to the delivery callback;

and prints one JSON document on stdout (progress goes to stderr). MB = 10**6 bytes.
``--profile-dir DIR`` also attaches ``py-spy record`` to the broker during the
largest produce and consume runs and writes collapsed stacks plus a hot-spot summary
(py-spy steals CPU from a 2-core machine: numbers from a profiled run are lower).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402

MB = 1_000_000
PARTITIONS = 3
TARGETS = {
    "produce_10kb_mb_per_s": 250.0,
    "produce_100b_records_per_s": 400_000.0,
    "consume_mb_per_s": 400.0,
    "produce_p99_ms_at_20mb_s": 10.0,
}

PRODUCER_CONF = {
    "linger.ms": 10,
    "batch.size": 1 << 20,
    "acks": "all",
    "compression.type": "none",
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 64 * 1024,  # bounded so the final flush drains quickly
    "message.max.bytes": 2 << 20,
    "delivery.report.only.error": True,
    "enable.idempotence": False,
}

CONSUMER_CONF = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 50 << 20,
    "max.partition.fetch.bytes": 16 << 20,
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 256 * 1024,
    "enable.partition.eof": True,
}


log = _limits.log


# --------------------------------------------------------------------------- broker

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, workdir: Path, env: dict | None = None, sets: list[str] | None = None) -> None:
        self.env = env or {}
        self.sets = sets or []
        self.port = free_port()
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        self._log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "hightide", "serve", "--data-dir", str(self.data_dir),
               "--listen", self.bootstrap, "--log-level", "INFO"]
        for item in self.sets:
            cmd += ["--set", item]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hightide serve exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"hightide serve did not start:\n{self.output()[-4000:]}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> dict:
        assert self.proc is not None
        t0 = time.monotonic()
        hung = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                hung = True
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        out = self.output()
        lines = out.splitlines()
        bad = [ln for ln in lines if " ERROR " in ln or " WARNING " in ln or "Traceback" in ln]
        return {
            "exit_code": self.proc.returncode,
            "stop_seconds": round(time.monotonic() - t0, 2),
            "hung_on_sigterm": hung,
            "tracebacks": out.count("Traceback"),
            "error_or_warning_lines": len(bad),
            "first_error_or_warning_lines": bad[:10],
        }


def create_topics(bootstrap: str, names: list[str], partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=10)
    for name, fut in futures.items():
        fut.result(timeout=15)


def data_size(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> int:
    """Number of records in a topic (sum of high watermarks - log start offsets)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-size"})
    try:
        total = 0
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += hi - lo
        return total
    finally:
        c.close()


# --------------------------------------------------------------------------- produce

def _produce_worker(conf: dict, topic: str, size: int, duration: float, barrier, results) -> None:
    from confluent_kafka import KafkaException, Producer
    errors: Counter = Counter()

    def on_error(err, msg) -> None:  # only called for failures (delivery.report.only.error)
        if err is not None:
            errors[str(err)] += 1

    try:
        p = Producer({**PRODUCER_CONF, **conf, "on_delivery": on_error})
        payload = os.urandom(size)
        # Warm up: metadata and connections to the partition leaders.
        for part in range(PARTITIONS if "test.mock.num.brokers" not in conf else 1):
            p.produce(topic, payload, partition=part)
        p.flush(30)
        barrier.wait(60)
        produced = 0
        produce = p.produce
        start = time.time()
        deadline = start + duration
        while True:
            for _ in range(500):
                try:
                    produce(topic, payload)
                    produced += 1
                except BufferError:
                    p.poll(0.002)
            p.poll(0)
            if time.time() >= deadline:
                break
        left = p.flush(60)
        end = time.time()
        failed = sum(errors.values()) + left
        results.put({"produced": produced, "failed": failed, "undelivered": left, "start": start, "end": end,
                     "errors": dict(errors.most_common(3))})
    except (KafkaException, Exception) as exc:  # report, never hang the parent
        results.put({"exception": repr(exc)})


def run_producers(bootstrap: str | None, topic: str, size: int, procs: int, duration: float,
                  mock: bool = False, on_start=None) -> dict:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    results = ctx.Queue()
    conf = {"test.mock.num.brokers": 1} if mock else {"bootstrap.servers": bootstrap}
    workers = [ctx.Process(target=_produce_worker, args=(conf, topic, size, duration, barrier, results), daemon=True)
               for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        barrier.wait(90)
    except Exception:
        for w in workers:
            w.kill()
        return {"error": "producers did not get ready (warm-up produce failed or hung)"}
    if on_start:
        on_start()
    outs = []
    for _ in workers:
        try:
            outs.append(results.get(timeout=duration + 90))
        except Exception:
            outs.append({"exception": "timed out waiting for producer result"})
    for w in workers:
        w.join(5)
        if w.is_alive():
            w.kill()
    exc = [o["exception"] for o in outs if "exception" in o]
    ok = [o for o in outs if "exception" not in o]
    res: dict = {"record_bytes": size, "processes": procs, "client": "confluent-kafka"}
    if exc:
        res["exceptions"] = exc
    if not ok:
        return res
    start = min(o["start"] for o in ok)
    end = max(o["end"] for o in ok)
    delivered = sum(o["produced"] - o["failed"] for o in ok)
    seconds = end - start
    res.update({
        "records": delivered,
        "failed": sum(o["failed"] for o in ok),
        "seconds": round(seconds, 2),
        "mb_per_s": round(delivered * size / seconds / MB, 1),
        "records_per_s": round(delivered / seconds),
    })
    errs: Counter = Counter()
    for o in ok:
        errs.update(o["errors"])
    if errs:
        res["errors"] = dict(errs.most_common(5))
    return res


# --------------------------------------------------------------------------- consume

def _consume_worker(bootstrap: str, topic: str, partitions: list[int], expected: int, timeout: float,
                    barrier, results) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    try:
        c = Consumer({**CONSUMER_CONF, "bootstrap.servers": bootstrap, "group.id": "bench-unused"})
        if barrier is not None:
            barrier.wait(60)
        start = time.time()
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        n = 0
        nbytes = 0
        eofs: set[int] = set()
        errors: Counter = Counter()
        deadline = start + timeout
        last = start
        while n < expected and len(eofs) < len(partitions) and time.time() < deadline:
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eofs.add(m.partition())
                    else:
                        errors[str(err)] += 1
                    continue
                n += 1
                nbytes += len(m.value())
                last = time.time()
        c.close()
        results.put({"records": n, "bytes": nbytes, "start": start, "end": last,
                     "timed_out": n < expected and len(eofs) < len(partitions), "errors": dict(errors.most_common(3))})
    except Exception as exc:
        results.put({"exception": repr(exc)})


def run_consumers(bootstrap: str, topic: str, expected: int, procs: int, timeout: float, on_start=None,
                  capped: bool = False) -> dict:
    ctx = mp.get_context("spawn")
    groups = [list(range(PARTITIONS))] if procs == 1 else [[p] for p in range(PARTITIONS)]
    barrier = ctx.Barrier(len(groups) + 1)
    results = ctx.Queue()
    # A per-partition consumer stops at its partition's EOF; when only a prefix of the
    # topic is read (``capped``) it also stops after its share of ``expected``.
    share = -(-expected // len(groups)) if capped else expected
    workers = [ctx.Process(target=_consume_worker, args=(bootstrap, topic, parts, share, timeout, barrier, results),
                           daemon=True) for parts in groups]
    for w in workers:
        w.start()
    barrier.wait(90)
    if on_start:
        on_start()
    outs = [results.get(timeout=timeout + 60) for _ in workers]
    for w in workers:
        w.join(5)
        if w.is_alive():
            w.kill()
    res: dict = {"client": "confluent-kafka", "processes": len(workers)}
    exc = [o["exception"] for o in outs if "exception" in o]
    if exc:
        res["exceptions"] = exc
    ok = [o for o in outs if "exception" not in o]
    if not ok:
        return res
    start = min(o["start"] for o in ok)
    end = max(o["end"] for o in ok)
    n = sum(o["records"] for o in ok)
    b = sum(o["bytes"] for o in ok)
    sec = max(end - start, 1e-9)
    res.update({"records": n, "expected": expected, "seconds": round(sec, 2), "mb_per_s": round(b / sec / MB, 1),
                "records_per_s": round(n / sec), "timed_out": any(o["timed_out"] for o in ok)})
    errs: Counter = Counter()
    for o in ok:
        errs.update(o["errors"])
    if errs:
        res["errors"] = dict(errs.most_common(5))
    return res


def run_kcat_consumer(bootstrap: str, topic: str, expected: int, size: int, timeout: float) -> dict:
    if not shutil.which("kcat"):
        return {"client": "kcat", "skipped": "kcat not installed"}
    cmd = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-c", str(expected), "-q", "-f", "x\n",
           "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=16777216",
           "-X", "queued.max.messages.kbytes=262144", "-X", "fetch.wait.max.ms=100"]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    n = 0
    deadline = t0 + timeout
    timed_out = False
    while True:
        chunk = proc.stdout.read1(1 << 20)
        if not chunk:
            break
        n += chunk.count(b"\n")
        if time.time() > deadline:
            timed_out = True
            proc.kill()
            break
    proc.wait()
    sec = time.time() - t0
    err = proc.stderr.read().decode(errors="replace")[-500:]
    res = {"client": "kcat -C -e", "processes": 1, "records": n, "expected": expected, "seconds": round(sec, 2),
           "mb_per_s": round(n * size / sec / MB, 1), "records_per_s": round(n / sec), "timed_out": timed_out,
           "exit_code": proc.returncode}
    if err.strip():
        res["stderr"] = err.strip()
    return res


# --------------------------------------------------------------------------- latency

def run_latency(bootstrap: str, topic: str, size: int, rate: float, duration: float, warmup: float = 0.5) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "compression.type": "none",
                  "enable.idempotence": False, "batch.size": 1 << 20})
    payload = os.urandom(size)
    for part in range(PARTITIONS):
        p.produce(topic, payload, partition=part)
    p.flush(30)
    lat: list[float] = []
    errors: Counter = Counter()
    clock = time.perf_counter

    def make_cb(t_sent: float, keep: bool):
        def cb(err, msg):
            if err is not None:
                errors[str(err)] += 1
            elif keep:
                lat.append(clock() - t_sent)
        return cb

    t0 = clock()
    interval = 1.0 / rate
    sent = 0
    end = t0 + duration
    while True:
        now = clock()
        if now >= end:
            break
        due = int((now - t0) / interval) + 1
        while sent < due:
            t = clock()
            try:
                p.produce(topic, payload, on_delivery=make_cb(t, t - t0 >= warmup))
            except BufferError:
                errors["BufferError"] += 1
            sent += 1
        nxt = t0 + sent * interval
        p.poll(max(0.0, nxt - clock()))
    p.flush(30)
    achieved = sent / (clock() - t0)
    lat.sort()

    def q(f: float) -> float:
        return round(lat[min(len(lat) - 1, int(f * len(lat)))] * 1000, 3) if lat else None

    return {"record_bytes": size, "target_rate_records_per_s": rate, "offered_mb_per_s": round(rate * size / MB, 1),
            "sent": sent, "achieved_rate_records_per_s": round(achieved), "measured": len(lat),
            "warmup_s_excluded": warmup, "linger_ms": 0, "acks": "all",
            "p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99), "p999_ms": q(0.999),
            "max_ms": round(lat[-1] * 1000, 3) if lat else None,
            "mean_ms": round(statistics.fmean(lat) * 1000, 3) if lat else None,
            "errors": dict(errors)}


# --------------------------------------------------------------------------- profiling

class CpuMeter:
    """Broker CPU use (user+system, % of one core) between ``start()`` and ``stop()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.t0 = self.c0 = None

    def _cpu(self) -> float | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / self.tick
        except (OSError, IndexError, ValueError):
            return None

    def start(self) -> None:
        self.t0, self.c0 = time.monotonic(), self._cpu()

    def stop(self) -> float | None:
        c1 = self._cpu()
        if self.c0 is None or c1 is None:
            return None
        return round(100 * (c1 - self.c0) / max(time.monotonic() - self.t0, 1e-9), 1)


class Profiler:
    """``py-spy record`` attached to the broker for one phase (optional)."""

    def __init__(self, directory: Path | None, pid: int) -> None:
        self.dir = directory
        self.pid = pid
        self.proc: subprocess.Popen | None = None
        self.path: Path | None = None
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

    def start(self, name: str) -> None:
        if self.dir is None:
            return
        self.path = self.dir / f"{name}.collapsed.txt"
        self.proc = subprocess.Popen(
            [self.exe, "record", "--pid", str(self.pid), "--rate", "200", "--format", "raw", "--nolineno",
             "--idle", "-o", str(self.path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if not self.path or not self.path.exists():
            return {"error": "py-spy produced no output"}
        summary = summarize_collapsed(self.path)
        summary["file"] = str(self.path)
        return summary


def summarize_collapsed(path: Path, top: int = 15) -> dict:
    """Hot spots from py-spy's collapsed stacks: self and inclusive % of all samples
    (idle included, so the percentages are of wall time on the broker's one thread)."""
    self_c: Counter = Counter()
    incl: Counter = Counter()
    hightide_self: Counter = Counter()
    total = 0
    idle = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        # Skip the thread name frame py-spy may add ("process 123:..." / "thread (0x..)").
        frames = [f for f in frames if not f.startswith(("process ", "thread ("))]
        if not frames:
            continue
        leaf = frames[-1]
        if leaf.startswith("Runner.run ") or leaf.startswith("run (uvloop"):
            idle += n  # parked in the uvloop C loop (epoll or C-level work)
        self_c[leaf] += n
        for f in set(frames):
            incl[f] += n
        # Attribute the sample to the innermost hightide frame (cost of hightide code
        # including the library calls it makes).
        for f in reversed(frames):
            if "hightide/" in f:
                hightide_self[f] += n
                break

    def pct(c: Counter) -> list:
        return [{"frame": f, "pct": round(100 * n / total, 1)} for f, n in c.most_common(top)]

    incl_ht = Counter({f: n for f, n in incl.items() if "hightide/" in f})
    # "in_event_loop_c": samples whose innermost Python frame is the loop itself: idle in
    # epoll, or uvloop's C code (socket recv into our buffer, callbacks' C parts).
    return {"samples": total, "in_event_loop_c_pct": round(100 * idle / max(total, 1), 1),
            "top_self": pct(self_c), "top_hightide_innermost": pct(hightide_self),
            "top_hightide_inclusive": pct(incl_ht)}


# --------------------------------------------------------------------------- main

git_revision = _limits.git_revision


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (~40 s)")
    ap.add_argument("--profile-dir", type=Path, default=None,
                    help="attach py-spy to the broker during the heaviest produce/consume runs")
    ap.add_argument("--broker-env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for the broker process, e.g. MALLOC_MMAP_THRESHOLD_=33554432 (A/B runs)")
    ap.add_argument("--broker-set", action="append", default=[], metavar="NAME=VALUE",
                    help="broker config override passed as `hightide serve --set NAME=VALUE` (A/B runs)")
    ap.add_argument("--no-fsync-ab", action="store_true",
                    help="skip the A/B produce run against a broker without the periodic fsync (full mode)")
    args = ap.parse_args()
    broker_env = dict(item.split("=", 1) for item in args.broker_env)
    quick = args.quick
    limit_s = 0.5 if quick else 1.0
    mock_s = 1.0 if quick else 2.0
    prod_s = 3.0 if quick else 5.0
    procs_list = [2] if quick else [1, 2, 3]
    lat_s = 4.0 if quick else 10.0
    if args.profile_dir:
        args.profile_dir.mkdir(parents=True, exist_ok=True)

    t_begin = time.time()
    workdir = Path(tempfile.mkdtemp(prefix="hightide-bench-"))
    out: dict = {"benchmark": "produce_consume", "mode": "quick" if quick else "full",
                 "units": "MB = 10**6 bytes; latency in ms", "machine": _limits.machine(),
                 "git": git_revision()}
    broker = Broker(workdir, broker_env, args.broker_set)
    try:
        log("measuring physical limits")
        out["physical_limits"] = _limits.measure(str(workdir), limit_s)
        pl = out["physical_limits"]

        log("measuring load-generator ceiling (librdkafka mock cluster)")
        ceiling = {}
        for size in (100, 10_000):
            r = run_producers(None, "mock-bench", size, 1, mock_s, mock=True)
            r.pop("client", None)
            ceiling[f"{size}B"] = r
        out["load_generator_ceiling"] = {"client": "confluent-kafka, 1 process, test.mock.num.brokers=1",
                                         "results": ceiling}

        log("starting broker")
        broker.start()
        out["broker"] = {"bootstrap": broker.bootstrap, "pid": broker.proc.pid, "extra_env": broker_env, "extra_set": args.broker_set,
                         "command": "python -m hightide serve (defaults: log.flush.interval.ms=1000)"}
        prof = Profiler(args.profile_dir, broker.proc.pid)
        cpu = CpuMeter(broker.proc.pid)
        profiles: dict = {}

        log("producing")
        produce = []
        topics = {}
        for size in (100, 10_000):
            for procs in procs_list:
                topic = f"bench-p-{size}-{procs}"
                create_topics(broker.bootstrap, [topic])
                profile_this = procs == procs_list[0]

                def on_start(s=size, prof_it=profile_this):
                    cpu.start()
                    if prof_it:
                        prof.start(f"produce_{s}B_{procs}proc")
                r = run_producers(broker.bootstrap, topic, size, procs, prod_s, on_start=on_start)
                r["broker_cpu_pct"] = cpu.stop()
                if profile_this:
                    p = prof.finish()
                    if p:
                        profiles[f"produce_{size}B_{procs}proc"] = p
                r["topic"] = topic
                r["partitions"] = PARTITIONS
                r["config"] = "linger.ms=10 batch.size=1MiB acks=all compression=none"
                if "mb_per_s" in r:
                    r["ratio_to_loopback"] = round(r["mb_per_s"] / pl["loopback_tcp_mb_per_s"], 3)
                    r["ratio_to_page_cache_write"] = round(r["mb_per_s"] / pl["page_cache_write_mb_per_s"], 3)
                produce.append(r)
                topics.setdefault(size, []).append(topic)
                log(f"  produce {size} B x{procs}: {r.get('mb_per_s')} MB/s, {r.get('records_per_s')} rec/s")
                if not broker.alive():
                    raise RuntimeError("broker died during produce")
        out["produce"] = produce

        log("consuming")
        consume = []
        cons_timeout = 20.0 if quick else 40.0
        for size in (10_000, 100):
            # Read back the biggest topic of this size.
            topic = max(topics[size], key=lambda t: data_size(broker.bootstrap, t))
            expected = data_size(broker.bootstrap, topic)
            if size == 100:
                # 100 B consume is client-bound (~0.4 M records/s per client); read a prefix.
                expected = min(expected, 1_000_000 if quick else 2_000_000)
            configs = [1, "kcat"] if quick and size == 100 else [1, PARTITIONS, "kcat"]
            if quick and size == 10_000:
                configs = [1, "kcat"]
            for cfg in configs:
                profile_this = size == 10_000 and cfg in (1, "kcat")
                name = f"consume_{size}B_{'kcat' if cfg == 'kcat' else f'{cfg}proc'}"

                def on_start(prof_it=profile_this, name=name):
                    cpu.start()
                    if prof_it:
                        prof.start(name)
                if cfg == "kcat":
                    on_start()
                    r = run_kcat_consumer(broker.bootstrap, topic, expected, size, cons_timeout)
                else:
                    r = run_consumers(broker.bootstrap, topic, expected, cfg, cons_timeout, on_start=on_start,
                                      capped=size == 100)
                r["broker_cpu_pct"] = cpu.stop()
                if profile_this:
                    p = prof.finish()
                    if p:
                        profiles[name] = p
                r["record_bytes"] = size
                r["topic"] = topic
                if r.get("mb_per_s") is not None:
                    r["ratio_to_loopback"] = round(r["mb_per_s"] / pl["loopback_tcp_mb_per_s"], 3)
                consume.append(r)
                log(f"  consume {size} B {cfg}: {r.get('mb_per_s')} MB/s, {r.get('records_per_s')} rec/s")
        out["consume"] = consume

        log("measuring produce latency at 20 MB/s")
        create_topics(broker.bootstrap, ["bench-latency"])
        cpu.start()
        prof.start("latency_20MBps")
        out["produce_latency"] = run_latency(broker.bootstrap, "bench-latency", 10_000, 2000, lat_s)
        out["produce_latency"]["broker_cpu_pct"] = cpu.stop()
        p = prof.finish()
        if p:
            profiles["latency_20MBps"] = p
        log(f"  p50 {out['produce_latency']['p50_ms']} ms, p99 {out['produce_latency']['p99_ms']} ms")
        if profiles:
            out["profiles"] = profiles
            out["profiles_note"] = "py-spy was attached: throughput numbers of this run are depressed"
    except Exception as exc:
        out["error"] = repr(exc)
        log(f"ERROR: {exc!r}")
    finally:
        if broker.proc is not None:
            out.setdefault("broker", {}).update(broker.stop())

    if not quick and not args.no_fsync_ab and "error" not in out:
        # A/B: the same produce load against a broker that never fsyncs on a timer
        # (Kafka's default: flush.ms unset). Shows what the 1 s periodic fsync costs.
        log("A/B: broker with log.flush.interval.ms=3600000 (no periodic fsync)")
        ab_dir = workdir / "ab"
        ab_dir.mkdir()
        b2 = Broker(ab_dir, broker_env, [*args.broker_set, "log.flush.interval.ms=3600000"])
        ab: dict = {"broker_set": "log.flush.interval.ms=3600000"}
        try:
            b2.start()
            cpu2 = CpuMeter(b2.proc.pid)
            rows = []
            for procs in (1, 2):
                create_topics(b2.bootstrap, [f"ab-p-10000-{procs}"])
                r = run_producers(b2.bootstrap, f"ab-p-10000-{procs}", 10_000, procs, prod_s, on_start=cpu2.start)
                r["broker_cpu_pct"] = cpu2.stop()
                rows.append(r)
                log(f"  produce 10000 B x{procs}: {r.get('mb_per_s')} MB/s")
            ab["produce"] = rows
            create_topics(b2.bootstrap, ["ab-latency"])
            cpu2.start()
            ab["produce_latency"] = run_latency(b2.bootstrap, "ab-latency", 10_000, 2000, lat_s / 2)
            ab["produce_latency"]["broker_cpu_pct"] = cpu2.stop()
            log(f"  p50 {ab['produce_latency']['p50_ms']} ms, p99 {ab['produce_latency']['p99_ms']} ms")
        except Exception as exc:
            ab["error"] = repr(exc)
            log(f"ERROR (A/B): {exc!r}")
        finally:
            if b2.proc is not None:
                ab["broker"] = b2.stop()
        out["ab_no_periodic_fsync"] = ab
    shutil.rmtree(workdir, ignore_errors=True)

    # Targets
    best = lambda rows, size, key: max((r.get(key) or 0 for r in rows if r.get("record_bytes") == size), default=0)  # noqa: E731
    prod = out.get("produce", [])
    cons = out.get("consume", [])
    lat = out.get("produce_latency", {})
    measured = {
        "produce_10kb_mb_per_s": best(prod, 10_000, "mb_per_s"),
        "produce_100b_records_per_s": best(prod, 100, "records_per_s"),
        "consume_mb_per_s": best(cons, 10_000, "mb_per_s"),
        "produce_p99_ms_at_20mb_s": lat.get("p99_ms"),
    }
    targets = {}
    for k, target in TARGETS.items():
        v = measured[k]
        if v is None:
            ok = False
        elif k.startswith("produce_p99"):
            ok = v <= target
        else:
            ok = v >= target
        targets[k] = {"target": target, "measured": v, "pass": ok,
                      "rule": "<=" if k.startswith("produce_p99") else ">=",
                      "basis": "best configuration" if not k.startswith("produce_p99") else "single producer"}
    out["targets"] = targets
    out["all_targets_pass"] = all(t["pass"] for t in targets.values())
    out["wall_seconds"] = round(time.time() - t_begin, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
