"""Load: 1,000 concurrent connections against a real ``hightide serve`` on loopback.

Run:  .venv/bin/python bench/load.py [--seconds 30] [--workers 4] [--out FILE]

Connections (default): 100 producers (Produce v9, acks=all, one batch of 10 x 100 B
records per request, one request in flight each, one partition each), 100 consumers
(Fetch v12 long-polls following their partition), 790 mostly idle connections
(ApiVersions at connect, then Metadata every ~5 s) of which 50 also pipeline
[Fetch long-poll on a quiet topic, Metadata, ApiVersions] so quick answers queue
behind slow ones, and 10 "stalled" connections that pipeline 200 fetches of ~1 MiB and
never read (back-pressure must hold them without memory growth). The client side is
asyncio raw connections with pre-encoded request templates (only the correlation id
and fetch offset are patched) in ``--workers`` processes, so it stays cheap next to
the broker on a 2-core machine.

Checked on every connection: each response's correlation id is the next one sent
(never out of order); consumers see contiguous offsets. Reported as JSON: broker RSS
over time (sampled every second) and its peak relative to after-connect, broker CPU,
produce/consume throughput, produce and metadata latency p50/p99/max, errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import struct
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import _limits  # noqa: E402

from hightide.protocol.build import materialize  # noqa: E402
from hightide.protocol.codec import encode_request, request_schema, response_schema  # noqa: E402
from hightide.protocol.records import build_batch, iter_headers  # noqa: E402
from hightide.protocol.tolerant import read_tolerant  # noqa: E402
from kio.serial import entity_reader  # noqa: E402
from tests.conftest import ServerProcess  # noqa: E402

TOPIC, QUIET = "load", "load-quiet"
OFFSET_SENTINEL = 0x7A7A7A7A7A7A7A7A


log = _limits.log


def frame(api_key: int, version: int, body: dict) -> bytearray:
    return bytearray(encode_request(api_key, version, 0, "load", materialize(request_schema(api_key, version), body)))


def fetch_body(topic: str, partition: int, max_wait: int, pmax: int = 1 << 20) -> dict:
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": OFFSET_SENTINEL, "partition_max_bytes": pmax,
                 "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}


class Template:
    """A pre-encoded request; ``make(corr, offset)`` patches the correlation id (and the
    fetch offset where the sentinel was)."""

    def __init__(self, data: bytearray) -> None:
        self.data = data
        self.off_at = data.find(struct.pack(">q", OFFSET_SENTINEL))

    def make(self, corr: int, offset: int | None = None) -> bytes:
        struct.pack_into(">i", self.data, 8, corr)
        if offset is not None:
            struct.pack_into(">q", self.data, self.off_at, offset)
        return bytes(self.data)


def decode(api_key: int, version: int, body: bytes):
    cls = response_schema(api_key, version)
    try:
        return entity_reader(cls)(body, 5)[0]
    except KeyError:
        return read_tolerant(cls, body, 5)[0]


class Stats:
    def __init__(self) -> None:
        self.lat: dict[str, list[float]] = {"produce": [], "metadata": [], "mixed_round": []}
        self.produce_requests = self.produced_records = self.produced_bytes = 0
        self.consumed_records = self.consumed_bytes = self.fetches = 0
        self.out_of_order = self.errors = self.offset_gaps = 0
        self.error_samples: list[str] = []
        self.connections = 0

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what)


class Conn:
    """A pipelining connection; every response must carry the next expected correlation id."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.corr = 0
        self.expected: deque[tuple[int, asyncio.Future | None]] = deque()

    async def open(self, port: int) -> None:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", port)
        self.stats.connections += 1
        self.reader = asyncio.create_task(self._read())

    def send(self, template: Template, offset: int | None = None, want: bool = True) -> asyncio.Future | None:
        self.corr += 1
        fut = asyncio.get_running_loop().create_future() if want else None
        self.expected.append((self.corr, fut))
        self.w.write(template.make(self.corr, offset))
        return fut

    async def _read(self) -> None:
        try:
            while True:
                size = struct.unpack(">i", await self.r.readexactly(4))[0]
                body = await self.r.readexactly(size)
                corr = struct.unpack_from(">i", body, 0)[0]
                want, fut = self.expected.popleft()
                if corr != want:
                    self.stats.out_of_order += 1
                if fut is not None and not fut.done():
                    fut.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass

    def close(self) -> None:
        self.reader.cancel()
        self.w.close()


async def producer(c: Conn, t: Template, records: int, nbytes: int, stop: float, s: Stats) -> None:
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        body = await c.send(t)
        s.lat["produce"].append(time.perf_counter() - t0)
        err = decode(0, 9, body).responses[0].partition_responses[0].error_code
        if err:
            s.error(f"produce error {err}")
        s.produce_requests += 1
        s.produced_records += records
        s.produced_bytes += nbytes


async def consumer(c: Conn, t: Template, stop: float, s: Stats) -> None:
    offset = 0
    while time.monotonic() < stop:
        body = await c.send(t, offset)
        s.fetches += 1
        p = decode(1, 12, body).responses[0].partitions[0]
        if p.error_code:
            s.error(f"fetch error {p.error_code}")
            continue
        data = p.records or b""
        for h in iter_headers(data):
            if h.base_offset != offset:
                s.offset_gaps += 1
            offset = h.base_offset + h.last_offset_delta + 1
            s.consumed_records += h.records_count
        s.consumed_bytes += len(data)


async def idle(c: Conn, t_meta: Template, mixed: tuple | None, stop: float, s: Stats, rnd: random.Random) -> None:
    while True:
        await asyncio.sleep(rnd.uniform(2.5, 7.5))
        if time.monotonic() >= stop:
            return
        if mixed is None:
            t0 = time.perf_counter()
            await c.send(t_meta)
            s.lat["metadata"].append(time.perf_counter() - t0)
        else:  # slow long poll first; the quick ones behind it must come after it
            t_fetch, t_api = mixed
            t0 = time.perf_counter()
            c.send(t_fetch, 0, want=False)
            c.send(t_meta, want=False)
            await c.send(t_api)
            s.lat["mixed_round"].append(time.perf_counter() - t0)


async def worker_main(index: int, port: int, plan: dict, start_at: float, seconds: float, out: mp.Queue) -> None:
    s = Stats()
    rnd = random.Random(index)
    meta = Template(frame(3, 12, {"topics": [{"topic_id": None, "name": TOPIC}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False}))
    api = Template(frame(18, 3, {"client_software_name": "load", "client_software_version": "1"}))
    quiet_fetch = Template(frame(1, 12, fetch_body(QUIET, 0, max_wait=200)))
    batch = build_batch([(None, os.urandom(100), [], 1_700_000_000_000)] * plan["records_per_batch"])
    conns: list[Conn] = []

    async def connect() -> Conn:
        c = Conn(s)
        await c.open(port)
        conns.append(c)
        return c

    producers = []
    for p in plan["producers"]:
        t = Template(frame(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": p, "records": batch}]}]}))
        producers.append((await connect(), t))
    consumers = [(await connect(), Template(frame(1, 12, fetch_body(TOPIC, p, max_wait=500))))
                 for p in plan["consumers"]]
    idles = []
    for i in range(plan["idle"]):
        c = await connect()
        await c.send(api)
        idles.append((c, (quiet_fetch, api) if i < plan["mixed"] else None))
    stalled = []
    for _ in range(plan["stalled"]):
        c = await connect()
        c.reader.cancel()  # never reads again
        big = Template(frame(1, 12, fetch_body(TOPIC, 0, max_wait=0)))
        c.w.write(b"".join(big.make(corr, 0) for corr in range(1, 201)))
        stalled.append(c)
    out.put(("connected", index, len(conns)))
    await asyncio.sleep(max(0.0, start_at - time.time()))
    stop = time.monotonic() + seconds
    tasks = [asyncio.create_task(producer(c, t, plan["records_per_batch"], len(batch), stop, s)) for c, t in producers]
    tasks += [asyncio.create_task(consumer(c, t, stop, s)) for c, t in consumers]
    tasks += [asyncio.create_task(idle(c, meta, mixed, stop, s, rnd)) for c, mixed in idles]
    done, pending = await asyncio.wait(tasks, timeout=seconds + 15)
    for t in pending:
        t.cancel()
    for t in done:
        if t.exception() is not None:
            s.error(f"client task failed: {t.exception()!r}")
    unanswered = sum(len(c.expected) for c in conns if c not in stalled)
    for c in conns:
        c.close()
    out.put(("result", index, {k: v for k, v in vars(s).items()}, unanswered, time.process_time()))


def run_worker(index: int, port: int, plan: dict, start_at: float, seconds: float, out: mp.Queue) -> None:
    try:
        import uvloop
        uvloop.run(worker_main(index, port, plan, start_at, seconds, out))
    except ImportError:
        asyncio.run(worker_main(index, port, plan, start_at, seconds, out))


def proc_sample(pid: int) -> tuple[float, float]:
    """(RSS MB, CPU seconds) of a process."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss, cpu


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2) if xs else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--producers", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=100)
    ap.add_argument("--connections", type=int, default=1000, help="total, including producers and consumers")
    ap.add_argument("--mixed", type=int, default=50)
    ap.add_argument("--stalled", type=int, default=10)
    ap.add_argument("--records-per-batch", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    idle_total = args.connections - args.producers - args.consumers - args.stalled
    with tempfile.TemporaryDirectory(prefix="load-") as tmp:
        srv = ServerProcess(Path(tmp) / "data").start()
        pid = srv.proc.pid
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        for name, n in ((TOPIC, args.producers), (QUIET, 1)):
            admin.create_topics([NewTopic(name, n, 1)])[name].result(30)
        time.sleep(0.5)
        rss_idle, _ = proc_sample(pid)
        w = args.workers
        plans = [{"producers": list(range(i, args.producers, w)), "consumers": list(range(i, args.consumers, w)),
                  "idle": len(range(i, idle_total, w)), "mixed": len(range(i, args.mixed, w)),
                  "stalled": len(range(i, args.stalled, w)), "records_per_batch": args.records_per_batch}
                 for i in range(w)]
        q: mp.Queue = mp.Queue()
        start_at = time.time() + 8.0  # time to open every connection first
        procs = [mp.Process(target=run_worker, args=(i, srv.port, plans[i], start_at, args.seconds, q))
                 for i in range(w)]
        t_conn = time.monotonic()
        for p in procs:
            p.start()
        connected = 0
        for _ in range(w):
            kind, _, n = q.get(timeout=60)
            connected += n
        connect_s = time.monotonic() - t_conn
        log(f"{connected} connections open in {connect_s:.1f} s")
        rss_connected, cpu0 = proc_sample(pid)
        while time.time() < start_at:
            time.sleep(0.05)
        timeline = []
        t0 = time.monotonic()
        cpu_prev, t_prev = proc_sample(pid)[1], t0
        results = []
        while len(results) < w:
            try:
                msg = q.get(timeout=1.0)
                results.append(msg)
                continue
            except Exception:
                pass
            if srv.proc.poll() is not None:
                raise RuntimeError(f"broker died:\n{srv.output()[-3000:]}")
            now = time.monotonic()
            rss, cpu = proc_sample(pid)
            timeline.append([round(now - t0, 1), round(rss, 1), round(100 * (cpu - cpu_prev) / (now - t_prev))])
            cpu_prev, t_prev = cpu, now
        rss_end, cpu_end = proc_sample(pid)
        for p in procs:
            p.join(30)
        output = srv.output()
        srv.stop()
    agg = Stats()
    unanswered = 0
    lat: dict[str, list[float]] = {k: [] for k in agg.lat}
    client_cpu = 0.0
    for _, _, st, un, cpu_s in results:
        unanswered += un
        client_cpu += cpu_s
        for k, v in st.items():
            if k == "lat":
                for name, xs in v.items():
                    lat[name].extend(xs)
            elif k == "error_samples":
                agg.error_samples.extend(v)
            else:
                setattr(agg, k, getattr(agg, k) + v)
    secs = args.seconds
    in_load = [row for row in timeline if row[0] <= secs]
    result = {
        "benchmark": "load",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start_at)),
        "commit": _limits.git_revision(),
        "machine": _limits.machine(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": secs,
        "client_workers": w,
        "connections": {"total": agg.connections, "producers": args.producers, "consumers": args.consumers,
                        "idle_metadata": idle_total, "of_which_mixed_pipelines": args.mixed,
                        "stalled_never_reading": args.stalled, "open_all_s": round(connect_s, 2)},
        "broker_rss_mb": {"idle": round(rss_idle, 1), "after_connect": round(rss_connected, 1),
                          "peak_under_load": max((r[1] for r in in_load), default=rss_connected),
                          "growth_during_load": round(max((r[1] for r in in_load), default=0.0)
                                                      - (in_load[0][1] if in_load else 0.0), 1),
                          "end": round(rss_end, 1),
                          "timeline_s_mb_cpu_pct": timeline},
        "broker_cpu_s": round(cpu_end - cpu0, 1),
        "client_cpu_s": round(client_cpu, 1),  # all worker processes, connecting included
        "produce": {"requests_per_s": round(agg.produce_requests / secs), "records_per_s": round(agg.produced_records / secs),
                    "mb_per_s": round(agg.produced_bytes / secs / 1e6, 2),
                    "latency_ms": {"p50": pct(lat["produce"], 0.5), "p99": pct(lat["produce"], 0.99),
                                   "max": pct(lat["produce"], 1.0)}},
        "consume": {"fetches_per_s": round(agg.fetches / secs), "records_per_s": round(agg.consumed_records / secs),
                    "mb_per_s": round(agg.consumed_bytes / secs / 1e6, 2), "offset_gaps": agg.offset_gaps},
        "metadata_latency_ms": {"n": len(lat["metadata"]), "p50": pct(lat["metadata"], 0.5),
                                "p99": pct(lat["metadata"], 0.99), "max": pct(lat["metadata"], 1.0)},
        "mixed_pipeline_round_ms": {"n": len(lat["mixed_round"]), "p50": pct(lat["mixed_round"], 0.5),
                                    "p99": pct(lat["mixed_round"], 0.99)},
        "responses_out_of_order": agg.out_of_order,
        "unanswered_at_end": unanswered,
        "errors": agg.errors,
        "error_samples": agg.error_samples[:5],
        "broker_tracebacks": output.count("Traceback"),
    }
    result["ok"] = (result["responses_out_of_order"] == 0 and agg.errors == 0 and agg.offset_gaps == 0
                    and result["broker_tracebacks"] == 0)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
