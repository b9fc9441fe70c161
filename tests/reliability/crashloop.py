"""The crash loop shared by ``tests/reliability/test_crash_loop.py`` (20 kills) and
``bench/crash_loop.py`` (200 kills by default): one piece of code, two sizes.

Idempotent acks=all producers (confluent-kafka) write to several partitions while the
broker is killed with SIGKILL at random moments and restarted on the same data
directory and port. A consumer-group member commits "everything acknowledged so far"
before each kill. After every restart the group's committed offsets are read back:
never behind the last commit that succeeded, never ahead of what was acknowledged.
At the end every acknowledged record must be present exactly once, at its
acknowledged offset, with its timestamp, in each producer's order.

With ``share=True`` a share-group consumer (confluent-kafka ``ShareConsumer``, implicit
acknowledgement) reads the topic throughout. After every restart the share-partition
start offsets (DescribeShareGroupOffsets v1, durable state) must never go backwards and
never pass the log end; at the end every acknowledged record must have been delivered
to the share group at least once and the start offsets must reach the log end.

:func:`run` returns a JSON-ready dict; ``violations`` lists everything that went
wrong (empty on success), so callers assert on it or print it.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..rawkafka import RawClient

BASE_TS = 1_700_000_000_000
_READY = re.compile(r"ready in (\d+) ms")


class Server(Protocol):
    bootstrap: str
    data_dir: object
    port: int

    def kill9(self) -> None: ...


# (data_dir, port) -> a started server on them; (None, None) for the first one
StartServer = Callable[[object, object], Server]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


class _Producers:
    """``n`` idempotent producers on their own threads; ``acked`` maps each value to
    (partition, offset, timestamp) as the delivery report gave it."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, n: int, timeout_ms: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.acked: dict[bytes, tuple[int, int, int]] = {}
        self.failed: list[str] = []
        self.attempted = 0
        self.ack_times: list[float] = []  # monotonic time of every delivery report
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                     "message.timeout.ms": timeout_ms, "retry.backoff.ms": 20, "reconnect.backoff.ms": 10,
                     "reconnect.backoff.max.ms": 100, "log_level": 0}
        self.threads = [threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(n)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _produce(self, pid: int) -> None:
        p = Producer(self.conf)
        i = 0

        def cb(err, msg):
            if err:
                self.failed.append(str(err))
            else:
                with self.lock:
                    self.acked[msg.value()] = (msg.partition(), msg.offset(), msg.timestamp()[1])
                    self.ack_times.append(time.monotonic())

        while not self.stop.is_set():
            try:
                # value = producer id + sequence: sorts in the producer's order
                p.produce(self.topic, value=b"p%02d-%09d" % (pid, i), partition=(i + pid) % self.partitions,
                          timestamp=BASE_TS + i, on_delivery=cb)
                i += 1
                self.attempted += 1
            except BufferError:
                pass
            p.poll(0.001)
        left = p.flush(120)
        if left:
            self.failed.append(f"producer {pid}: {left} messages never delivered")

    def acked_ends(self) -> dict[int, int]:
        with self.lock:
            ends: dict[int, int] = {}
            for part, off, _ in self.acked.values():
                ends[part] = max(ends.get(part, -1), off + 1)
        return ends

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(180)


class _Committer:
    """A group member committing acknowledged progress; checks what reads back."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str) -> None:
        self.topic, self.partitions = topic, partitions
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100, "log_level": 0})
        self.confirmed: dict[int, int] = {}  # last commit that was answered OK
        self.attempted: dict[int, int] = {}  # highest commit ever sent (may have landed)
        self.commits = 0

    def commit(self, ends: dict[int, int]) -> None:
        if not ends:
            return
        for p, o in ends.items():
            self.attempted[p] = max(self.attempted.get(p, -1), o)
        try:
            self.c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in ends.items()], asynchronous=False)
        except KafkaException:
            return  # the broker may be down right now; the commit may or may not have landed
        self.confirmed.update(ends)
        self.commits += 1

    def check(self, acked_ends: dict[int, int], violations: list[str], when: str) -> None:
        """Committed offsets read back: >= the last confirmed commit (never backwards),
        <= what was attempted and acknowledged (never ahead)."""
        try:
            got = self.c.committed([TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=20)
        except KafkaException as exc:
            violations.append(f"{when}: committed offsets unreadable: {exc}")
            return
        for tp in got:
            off = tp.offset if tp.offset >= 0 else -1
            if off < self.confirmed.get(tp.partition, -1):
                violations.append(f"{when}: partition {tp.partition} committed {off} went backwards "
                                  f"(confirmed {self.confirmed[tp.partition]})")
            if off > self.attempted.get(tp.partition, -1) or off > acked_ends.get(tp.partition, -1):
                violations.append(f"{when}: partition {tp.partition} committed {off} is ahead of what was "
                                  f"acknowledged ({acked_ends.get(tp.partition)})")

    def close(self) -> None:
        self.c.close()


class _ShareReader:
    """A share-group member on its own thread; records which values it was given."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str) -> None:
        self.bootstrap, self.topic, self.partitions, self.group = bootstrap, topic, partitions, group
        self.delivered: set[bytes] = set()
        self.deliveries = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.spso: dict[int, int] = {}  # highest start offset seen per partition
        with RawClient(bootstrap) as c:
            r = c.request(44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
                {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
                "validate_only": False})
            if r.responses[0].error_code:
                raise RuntimeError(f"cannot configure share group {group}: {r.responses[0].error_message}")
        self.thread = threading.Thread(target=self._consume, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _consume(self) -> None:
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 0,
                           "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100})
        c.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                try:
                    for m in c.poll(0.2):
                        if m.error() is None:
                            self.delivered.add(m.value())
                            self.deliveries += 1
                except KafkaException:
                    pass  # the broker is down right now
            try:
                c.commit_sync()
            except KafkaException:
                pass
        finally:
            c.close()

    def start_offsets(self, timeout: float = 20.0) -> dict[int, tuple[int, int]] | str:
        """{partition: (start offset, log end offset)} from durable state, or an error."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                with RawClient(self.bootstrap) as c:
                    r = c.request(90, 1, {"groups": [{"group_id": self.group, "topics": [
                        {"topic_name": self.topic, "partitions": list(range(self.partitions))}]}]})
                    ends = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                        {"name": self.topic, "partitions": [{"partition_index": p, "timestamp": -1,
                                                              "current_leader_epoch": -1}
                                                             for p in range(self.partitions)]}]})
            except (OSError, ConnectionError) as exc:
                last = str(exc)
                time.sleep(0.2)
                continue
            g = r.groups[0]
            parts = g.topics[0].partitions if g.error_code == 0 and g.topics else []
            if not parts or any(p.error_code for p in parts):
                last = f"error {g.error_code} / {[p.error_code for p in parts]}"
                time.sleep(0.2)
                continue
            leo = {p.partition_index: p.offset for p in ends.topics[0].partitions}
            return {p.partition_index: (p.start_offset, leo[p.partition_index]) for p in parts}
        return last

    def check(self, violations: list[str], when: str) -> None:
        got = self.start_offsets()
        if isinstance(got, str):
            violations.append(f"{when}: share-group start offsets unreadable: {got}")
            return
        for part, (spso, leo) in got.items():
            if spso < 0:
                continue  # not initialized yet
            if spso < self.spso.get(part, -1):
                violations.append(f"{when}: share partition {part} start offset {spso} went backwards "
                                  f"(was {self.spso[part]})")
            if spso > leo:
                violations.append(f"{when}: share partition {part} start offset {spso} is past the log end {leo}")
            self.spso[part] = max(self.spso.get(part, -1), spso)

    def drain(self, acked: dict, violations: list[str], timeout: float = 90.0) -> dict:
        """Let the reader catch up, then stop it; at-least-once and final start offsets."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(v not in self.delivered for v in acked):
            time.sleep(0.5)
        self.stop.set()
        self.thread.join(60)
        missing = sum(1 for v in acked if v not in self.delivered)
        if missing:
            violations.append(f"{missing} acknowledged records never delivered to the share group")
        final: dict | str = "no answer"
        while time.monotonic() < deadline + 30:
            final = self.start_offsets()
            if isinstance(final, dict) and all(spso == leo for spso, leo in final.values()):
                break
            time.sleep(0.5)
        self.check(violations, "after draining the share group")
        if not isinstance(final, dict) or any(spso != leo for spso, leo in final.values()):
            violations.append(f"share-group start offsets did not reach the log end: {final}")
        return {"records_delivered": len(self.delivered), "deliveries": self.deliveries,
                "redeliveries": self.deliveries - len(self.delivered)}


def _verify_log(bootstrap: str, topic: str, partitions: int, acked: dict, violations: list[str]) -> int:
    """Read everything back; returns the number of records read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-verify", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "log_level": 0})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[bytes, tuple[int, int, int]] = {}
    dups = 0
    order: dict[tuple[int, bytes], bytes] = {}  # (partition, producer prefix) -> last value
    disorder = 0
    idle_until = time.monotonic() + 10
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (len(seen) < len(acked) or time.monotonic() < idle_until):
        msgs = c.consume(5000, 0.5)
        if msgs:
            idle_until = time.monotonic() + 2
        elif len(seen) >= len(acked):
            break
        for m in msgs:
            if m.error():
                violations.append(f"consume error: {m.error()}")
                continue
            v = m.value()
            if v in seen:
                dups += 1
            seen[v] = (m.partition(), m.offset(), m.timestamp()[1])
            key = (m.partition(), v[:3])
            if key in order and order[key] >= v:
                disorder += 1
            order[key] = v
    c.close()
    missing = [v for v in acked if v not in seen]
    moved = [v for v in acked if v in seen and seen[v] != acked[v]]
    if dups:
        violations.append(f"{dups} records read more than once")
    if missing:
        violations.append(f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}")
    if moved:
        violations.append(f"{len(moved)} records at another offset/timestamp than acknowledged, "
                          f"e.g. {moved[0]!r}: acked {acked[moved[0]]}, read {seen[moved[0]]}")
    if disorder:
        violations.append(f"{disorder} records out of their producer's order")
    return len(seen)


def _first_ack_after(kills_at: list[float], ack_times: list[float]) -> list[float]:
    """For each kill: seconds until the next acknowledgement, if one came before the
    following kill (librdkafka needs ~0.4 s after the broker is back to resume)."""
    ack_times = sorted(ack_times)
    out = []
    j = 0
    for i, k in enumerate(kills_at):
        nxt = kills_at[i + 1] if i + 1 < len(kills_at) else float("inf")
        while j < len(ack_times) and ack_times[j] <= k:
            j += 1
        if j < len(ack_times) and ack_times[j] < nxt:
            out.append(ack_times[j] - k)
    return out


def _wait_for_an_ack(prod: _Producers, timeout: float) -> None:
    n = len(prod.ack_times)
    deadline = time.monotonic() + timeout
    while len(prod.ack_times) == n and time.monotonic() < deadline:
        time.sleep(0.005)


def run(start_server: StartServer, topic: str, *, kills: int, partitions: int = 3, producers: int = 2,
        share: bool = False, seed: int = 7, min_gap_s: float = 0.0, max_gap_s: float = 0.5,
        progress: Callable[[str], None] | None = None) -> dict:
    """Run the crash loop against servers from ``start_server``; see the module doc.
    Each kill comes at a random moment ``min_gap_s``..``max_gap_s`` after the first
    acknowledgement following the previous restart (so every kill hits a broker under
    acknowledged load, however slowly the machine lets clients reconnect)."""
    srv = start_server(None, None)
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    prod = _Producers(srv.bootstrap, topic, partitions, producers, timeout_ms=300_000)
    committer = _Committer(srv.bootstrap, topic, partitions, f"{topic}-group")
    sharer = _ShareReader(srv.bootstrap, topic, partitions, f"{topic}-share") if share else None
    violations: list[str] = []
    recovery: list[float] = []
    ready_ms: list[float] = []  # the broker's own start (log recovery, replays), from its log line
    kills_at: list[float] = []
    rnd = random.Random(seed)
    t_start = time.monotonic()
    prod.start()
    if sharer is not None:
        sharer.start()
    try:
        for k in range(kills):
            _wait_for_an_ack(prod, timeout=15.0)
            time.sleep(rnd.uniform(min_gap_s, max_gap_s))
            committer.commit(prod.acked_ends())
            srv.kill9()
            t0 = time.monotonic()
            kills_at.append(t0)
            srv = start_server(srv.data_dir, srv.port)
            recovery.append(time.monotonic() - t0)
            ready = _READY.findall(srv.output()) if hasattr(srv, "output") else []
            if ready:
                ready_ms.append(float(ready[-1]))
            committer.check(prod.acked_ends(), violations, f"after kill {k + 1}")
            if sharer is not None:
                sharer.check(violations, f"after kill {k + 1}")
            if progress and (k + 1) % 20 == 0:
                progress(f"{k + 1}/{kills} kills, {len(prod.acked)} acknowledged")
        time.sleep(0.5)
    finally:
        prod.join()
    committer.commit(prod.acked_ends())
    committer.check(prod.acked_ends(), violations, "at the end")
    committer.close()
    duration = time.monotonic() - t_start
    violations.extend(prod.failed[:5])
    read = _verify_log(srv.bootstrap, topic, partitions, prod.acked, violations)
    share_result = sharer.drain(prod.acked, violations) if sharer is not None else None
    resumed = _first_ack_after(kills_at, prod.ack_times)
    return {
        "kills": kills,
        "partitions": partitions,
        "producers": producers,
        "duration_s": round(duration, 1),
        "records_acknowledged": len(prod.acked),
        "records_attempted": prod.attempted,
        "records_read_back": read,
        "group_commits_confirmed": committer.commits,
        "recovery_ms": {  # exec of `hightide serve` -> accepting connections, after each kill
            "p50": round(_pct(recovery, 0.5) * 1000, 1),
            "p99": round(_pct(recovery, 0.99) * 1000, 1),
            "max": round(max(recovery, default=0.0) * 1000, 1),
        },
        "broker_ready_ms": {  # of which the broker's own start-up: recovery and replays ("ready in")
            "p50": round(_pct([x / 1000 for x in ready_ms], 0.5) * 1000, 1),
            "p99": round(_pct([x / 1000 for x in ready_ms], 0.99) * 1000, 1),
            "first_20_mean": round(sum(ready_ms[:20]) / max(1, len(ready_ms[:20])), 1),
            "last_20_mean": round(sum(ready_ms[-20:]) / max(1, len(ready_ms[-20:])), 1),
        },
        "kill_to_next_ack_ms": {  # SIGKILL -> first acknowledgement after it (client reconnect included)
            "kills_with_an_ack_before_the_next": len(resumed),
            "p50": round(_pct(resumed, 0.5) * 1000, 1),
            "p99": round(_pct(resumed, 0.99) * 1000, 1),
            "max": round(max(resumed, default=0.0) * 1000, 1),
        },
        "share_group": share_result,
        "violations": violations,
        "server": srv,  # the last one (callers pop it before printing)
    }
