"""Offset commit throughput and OffsetFetch latency of a real ``hightide serve``.

Run:  .venv/bin/python bench/offset_commits.py [--quick] [--seconds S] [--modes default,fsync] [--no-fetch]
                                               [--groups-per-conn G] [--profile PATH]

(``--modes`` picks the commit loads to run; ``--no-fetch`` skips part 3; ``PYTHONPATH=<src>``
runs another tree's broker, e.g. for before/after comparisons; ``--profile`` records the
broker with py-spy during the default-policy load, collapsed stacks in py-spy's raw format.)

1. **Sustained commits**: C asyncio connections, each owning G groups, pipeline
   OffsetCommit v9 requests of P partitions (simple commits, metadata of 32 bytes) for
   S seconds. Reported as partition commits per second; every commit is in
   ``__consumer_offsets`` before its answer. Run twice: with the default flush policy and
   with ``log.flush.interval.messages=1`` (an fsync before every answer, shared by the
   requests that arrive together). Each load also reports the broker's CPU (user +
   system, all threads) per partition commit, which a loaded machine disturbs less than
   commits/s, and the load generator's own CPU.
2. **Persistence check**: the broker is killed with SIGKILL and restarted; the last
   committed offset of every (group, partition) must read back.
3. **OffsetFetch latency** for a group committed on 1,000 partitions: one call with
   hightide's extension (committed + high watermark together) vs the two-call path
   (OffsetFetch + ListOffsets), p50/p99 over repeated runs.

Prints one JSON document (progress on stderr), with the same-run physical limits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
from produce_consume import Broker  # noqa: E402

from hightide.protocol.build import materialize  # noqa: E402
from hightide.protocol.codec import encode_request, request_schema, response_schema  # noqa: E402
from hightide.protocol.offset_commit_request import CommitPartition, encode_offset_commit_request  # noqa: E402
from hightide.protocol.tolerant import read_tolerant  # noqa: E402
from kio.serial import entity_reader  # noqa: E402

TARGET_COMMITS_PER_S = 100_000  # issue 21 (the first target, 20,000, was met in session 1)


log = _limits.log


class Conn:
    """A pipelining raw Kafka connection (asyncio streams)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def open(cls, bootstrap: str) -> "Conn":
        host, port = bootstrap.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    def send(self, frame: bytes) -> None:
        self.w.write(frame)

    async def recv(self) -> bytes:
        size = struct.unpack(">i", await self.r.readexactly(4))[0]
        return await self.r.readexactly(size)

    async def request(self, api_key: int, version: int, body: dict):
        self.corr += 1
        self.send(encode_request(api_key, version, self.corr, "bench", materialize(request_schema(api_key, version), body)))
        frame = await self.recv()
        cls = response_schema(api_key, version)
        # tolerant: hightide's OffsetFetch responses carry extension tags kio refuses
        return read_tolerant(cls, frame, 4 + (1 if cls.__flexible__ else 0))[0]

    async def close(self) -> None:
        self.w.close()


async def create_topic(c: Conn, name: str, partitions: int) -> None:
    r = await c.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                            "assignments": [], "configs": []}], "timeout": 30000, "validate_only": False})
    assert r.topics[0].error_code in (0, 36), r


async def commit_load(bootstrap: str, topic: str, partitions: int, conns: int, groups_per_conn: int,
                      per_request: int, seconds: float, depth: int) -> dict:
    cs = [await Conn.open(bootstrap) for _ in range(conns)]
    last: dict[tuple[str, int], int] = {}
    counts = [0] * conns
    errors = [0] * conns
    stop_at = time.monotonic() + seconds

    async def worker(i: int) -> None:
        c = cs[i]
        seq = 0
        inflight = 0

        def send_one() -> None:
            nonlocal seq
            seq += 1
            group = f"bench-g{i}-{seq % groups_per_conn}"
            start = (seq * per_request) % partitions
            parts = [CommitPartition((start + k) % partitions, seq, -1, "m" * 32) for k in range(per_request)]
            c.corr += 1
            c.send(encode_offset_commit_request(9, c.corr, "bench", group, -1, "", None, [(topic, parts)]))
            for p in parts:
                last[(group, p.partition)] = seq

        while time.monotonic() < stop_at or inflight:
            while inflight < depth and time.monotonic() < stop_at:
                send_one()
                inflight += 1
            frame = await c.recv()
            inflight -= 1
            cls = response_schema(8, 9)
            resp = entity_reader(cls)(frame, 5)[0]
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        errors[i] += 1
                    else:
                        counts[i] += 1

    t0, cpu0 = time.monotonic(), time.process_time()
    await asyncio.gather(*(worker(i) for i in range(conns)))
    elapsed, client_cpu = time.monotonic() - t0, time.process_time() - cpu0
    for c in cs:
        await c.close()
    total = sum(counts)
    return {"connections": conns, "groups": conns * groups_per_conn, "partitions_per_request": per_request,
            "pipeline_depth": depth, "seconds": round(elapsed, 2), "partition_commits": total,
            "errors": sum(errors), "partition_commits_per_s": round(total / elapsed),
            "requests_per_s": round(total / per_request / elapsed), "client_cpu_seconds": round(client_cpu, 3),
            "_last": last}


async def verify(bootstrap: str, topic: str, last: dict) -> dict:
    c = await Conn.open(bootstrap)
    by_group: dict[str, dict[int, int]] = {}
    for (g, p), v in last.items():
        by_group.setdefault(g, {})[p] = v
    wrong = 0
    for g, parts in by_group.items():
        for _ in range(600):  # the restarted broker answers COORDINATOR_LOAD_IN_PROGRESS (14) while it loads
            r = await c.request(9, 8, {"groups": [{"group_id": g, "topics": None}], "require_stable": False})
            if r.groups[0].error_code != 14:
                break
            await asyncio.sleep(0.05)
        got = {p.partition_index: p.committed_offset for t in r.groups[0].topics for p in t.partitions}
        wrong += sum(1 for p, v in parts.items() if got.get(p) != v)
    await c.close()
    return {"groups_checked": len(by_group), "partitions_checked": len(last), "mismatches": wrong}


async def fetch_latency(bootstrap: str, topic: str, partitions: int, rounds: int) -> dict:
    c = await Conn.open(bootstrap)
    parts = [CommitPartition(p, p * 10, -1, "") for p in range(partitions)]
    c.corr += 1
    c.send(encode_offset_commit_request(9, c.corr, "bench", "bench-big", -1, "", None, [(topic, parts)]))
    await c.recv()
    one, two = [], []
    fetch_body = {"groups": [{"group_id": "bench-big", "member_id": None, "member_epoch": -1,
                              "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]}],
                  "require_stable": False}
    lo_body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1} for p in range(partitions)]}]}
    fetch_frame_cls = response_schema(9, 9)
    for _ in range(rounds):
        t0 = time.perf_counter()
        c.corr += 1
        c.send(encode_request(9, 9, c.corr, "bench", materialize(request_schema(9, 9), fetch_body)))
        frame = await c.recv()
        unknown: dict = {}
        resp, _ = read_tolerant(fetch_frame_cls, frame, 5, unknown)
        lag1 = sum(struct.unpack(">q", unknown[id(p)][10000])[0] - p.committed_offset
                   for p in resp.groups[0].topics[0].partitions)
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await c.request(2, 7, lo_body)
        resp2 = await c.request(9, 8, {"groups": [{"group_id": "bench-big", "topics": [
            {"name": topic, "partition_indexes": list(range(partitions))}]}], "require_stable": False})
        two.append(time.perf_counter() - t0)
        assert lag1 is not None and resp2 is not None
    await c.close()

    def pct(xs, q):
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2)

    return {"partitions": partitions, "rounds": rounds,
            "one_call_with_extension_ms": {"p50": pct(one, 0.5), "p99": pct(one, 0.99), "round_trips": 1},
            "two_calls_offsetfetch_listoffsets_ms": {"p50": pct(two, 0.5), "p99": pct(two, 0.99), "round_trips": 2},
            "speedup_p50": round(statistics.median(two) / statistics.median(one), 2)}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _py_spy(pid: int, out: str, seconds: float) -> subprocess.Popen:
    """py-spy recording the broker for the length of the load (raw/collapsed stacks)."""
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--format", "raw", "--output", out,
                             "--duration", str(max(1, int(seconds))), "--rate", "200", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_mode(workdir: Path, sets: list[str], seconds: float, groups_per_conn: int = 50,
             profile: str | None = None) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, sets=sets)
    broker.start()
    try:
        async def main():
            c = await Conn.open(broker.bootstrap)
            await create_topic(c, "bench-offsets", 100)
            await c.close()
            spy = _py_spy(broker.proc.pid, profile, seconds) if profile else None
            cpu0 = _cpu_seconds(broker.proc.pid)
            out = await commit_load(broker.bootstrap, "bench-offsets", 100, conns=4, groups_per_conn=groups_per_conn,
                                    per_request=50, seconds=seconds, depth=8)
            cpu = _cpu_seconds(broker.proc.pid) - cpu0
            out["broker_cpu_seconds"] = round(cpu, 3)
            out["broker_cpu_us_per_commit"] = round(cpu * 1e6 / max(out["partition_commits"], 1), 2)
            if spy is not None:
                spy.wait()
            return out
        res = asyncio.run(main())
        last = res.pop("_last")
        broker.proc.kill()
        broker.proc.wait()
        t0 = time.monotonic()
        broker.start()
        res["restart_seconds"] = round(time.monotonic() - t0, 2)
        res["after_kill9"] = asyncio.run(verify(broker.bootstrap, "bench-offsets", last))
        return res
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, help="length of each commit load (default 8, --quick 3)")
    ap.add_argument("--modes", default="default,fsync", help="commit loads to run: default, fsync (comma separated)")
    ap.add_argument("--no-fetch", action="store_true", help="skip the OffsetFetch latency part")
    ap.add_argument("--groups-per-conn", type=int, default=50,
                    help="groups per connection (4 connections; 1: at most 4 __consumer_offsets partitions, so "
                         "many commits of one partition are in flight together)")
    ap.add_argument("--profile", metavar="PATH", help="record the broker with py-spy during the default-policy "
                                                        "load (collapsed stacks, py-spy's raw format) into PATH")
    args = ap.parse_args()
    seconds = args.seconds or (3 if args.quick else 8)
    modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    with tempfile.TemporaryDirectory(prefix="ht-bench-offsets-") as tmp:
        tmp_path = Path(tmp)
        out: dict = {"benchmark": "offset_commits", "machine": _limits.machine(),
                     "physical_limits": _limits.measure(tmp, seconds=0.5)}
        if "default" in modes:
            log("commit load, default flush policy")
            out["commits_default_flush"] = run_mode(tmp_path / "a", [], seconds, args.groups_per_conn,
                                                   args.profile)
            log(f"  {out['commits_default_flush']['partition_commits_per_s']} partition commits/s, "
                f"{out['commits_default_flush']['broker_cpu_us_per_commit']} us broker CPU each")
        if "fsync" in modes:
            log("commit load, fsync before every answer")
            out["commits_fsync_each"] = run_mode(tmp_path / "b", ["log.flush.interval.messages=1"], seconds,
                                                args.groups_per_conn)
            log(f"  {out['commits_fsync_each']['partition_commits_per_s']} partition commits/s, "
                f"{out['commits_fsync_each']['broker_cpu_us_per_commit']} us broker CPU each")
        if not args.no_fetch:
            (tmp_path / "c").mkdir()
            broker = Broker(tmp_path / "c")
            broker.start()
            try:
                async def fl():
                    c = await Conn.open(broker.bootstrap)
                    await create_topic(c, "bench-wide", 1000)
                    await c.close()
                    return await fetch_latency(broker.bootstrap, "bench-wide", 1000, 20 if args.quick else 100)
                out["offset_fetch_1000_partitions"] = asyncio.run(fl())
            finally:
                broker.stop()
        measured = {k: out[k]["partition_commits_per_s"] for k in ("commits_default_flush", "commits_fsync_each")
                    if k in out}
        if measured:
            out["targets"] = {"partition_commits_per_s": {
                "target": TARGET_COMMITS_PER_S, **{f"measured_{k.split('_', 1)[1]}": v for k, v in measured.items()},
                "pass": max(measured.values()) >= TARGET_COMMITS_PER_S}}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
