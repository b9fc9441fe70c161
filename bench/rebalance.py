"""How long one consumer group rebalance takes on a real ``hightide serve``.

Run:  .venv/bin/python bench/rebalance.py [--quick] [--protocols eager,cooperative,consumer]

Three confluent-kafka consumers (one thread each, each polling its own consumer) in one
group on a 6-partition topic ``a`` (and a 6-partition topic ``b`` for the subscription
change), with the clients' default timings (classic: ``heartbeat.interval.ms`` 3000,
``session.timeout.ms`` 45000; KIP-848: the broker's heartbeat interval):

* ``eager``       classic protocol, ``partition.assignment.strategy=range``
* ``cooperative`` classic protocol, ``cooperative-sticky``
* ``consumer``    KIP-848 ``group.protocol=consumer`` (server-side ``uniform`` assignor)

Cases, each timed from the triggering event (the new member's ``subscribe``, or the
member's new ``subscribe``) until every member holds its final assignment, as seen by the
members' own assignment callbacks (``on_assign``/``on_revoke``; incremental for the
cooperative protocols): the time of the last assignment change, once every partition of
the subscribed topics is owned by exactly one member and nothing changed for
``--quiet`` seconds (longer than any heartbeat interval, so a late second round of a
cooperative rebalance is not missed).

* ``join_1``: the first member joins the empty group (classic: Kafka's
  ``group.initial.rebalance.delay.ms`` = 3000 applies here);
* ``join_2``, ``join_3``: the second and third member join the Stable group;
* ``subscription_change``: one member subscribes to ``a`` and ``b``;
* ``leave``: a member subscribed to ``a`` only closes (LeaveGroup); the other two take
  over its partitions.

Each trigger waits a random 0-3 s first, so the phase of the members' heartbeat timers
varies between runs; ``--runs`` repeats the whole sequence (median and max reported).

Prints one JSON document (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
from produce_consume import Broker  # noqa: E402

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

log = _limits.log
PARTITIONS = 6
PROTOCOLS = {
    "eager": {"partition.assignment.strategy": "range"},
    "cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}


class Assignments:
    """Every member's assignment as its callbacks report it, and when it last changed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: dict[str, set[tuple[str, int]]] = {}
        self.last_change = 0.0

    def update(self, member: str, added: list[TopicPartition], removed: list[TopicPartition],
               replace: bool) -> None:
        with self.lock:
            mine = self.owned.setdefault(member, set())
            if replace:
                mine.clear()
            mine |= {(p.topic, p.partition) for p in added}
            mine -= {(p.topic, p.partition) for p in removed}
            self.last_change = time.monotonic()

    def complete(self, topics: set[str], members: int) -> bool:
        """Every partition of ``topics`` owned by exactly one of ``members`` members."""
        with self.lock:
            if len(self.owned) < members:
                return False
            held = [tp for s in self.owned.values() for tp in s]
        wanted = {(t, p) for t in topics for p in range(PARTITIONS)}
        return len(held) == len(set(held)) == len(wanted) and set(held) == wanted


class Member(threading.Thread):
    """One consumer, polled by its own thread; ``commands`` runs callables in it."""

    def __init__(self, name: str, conf: dict, topics: list[str], state: Assignments) -> None:
        super().__init__(name=name, daemon=True)
        self.conf, self.topics, self.state = conf, topics, state
        self.commands: queue.Queue = queue.Queue()
        self.stop_flag = threading.Event()
        self.subscribed_at = 0.0
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            c = Consumer(self.conf)
            incremental = self.conf.get("partition.assignment.strategy") == "cooperative-sticky" or \
                self.conf.get("group.protocol") == "consumer"

            def on_assign(consumer, parts):
                self.state.update(self.name, parts, [], replace=not incremental)

            def on_revoke(consumer, parts):
                self.state.update(self.name, [], parts, replace=False)

            def on_lost(consumer, parts):
                self.state.update(self.name, [], parts, replace=False)

            def subscribe(topics: list[str]) -> None:
                self.subscribed_at = time.monotonic()
                c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

            subscribe(self.topics)
            self.ready.set()
            while not self.stop_flag.is_set():
                try:
                    fn = self.commands.get_nowait()
                    fn(subscribe)
                except queue.Empty:
                    pass
                c.poll(0.02)
            c.close()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.ready.set()


def _wait_final(state: Assignments, topics: set[str], members: int, quiet: float, timeout: float,
                since: float) -> float | None:
    """Seconds from ``since`` to the last assignment change, once complete and quiet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.02)
        if state.complete(topics, members) and time.monotonic() - state.last_change >= quiet:
            return state.last_change - since
    return None


def _check(members: list[Member]) -> None:
    for m in members:
        if m.error is not None:
            raise RuntimeError(f"member {m.name} failed: {m.error!r}") from m.error


def run_protocol(bootstrap: str, protocol: str, quiet: float, timeout: float, rng: random.Random) -> dict:
    group = f"bench-{protocol}-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, **PROTOCOLS[protocol]}
    state = Assignments()
    members: list[Member] = []
    out: dict = {}
    try:
        for i in range(3):
            m = Member(f"m{i + 1}", conf, ["a"], state)
            time.sleep(rng.uniform(0, 3))
            t0 = time.monotonic()
            m.start()
            m.ready.wait(30)
            members.append(m)
            took = _wait_final(state, {"a"}, len(members), quiet, timeout, t0)
            _check(members)
            out[f"join_{i + 1}"] = None if took is None else round(took, 3)
            log(f"{protocol}: join_{i + 1} {out[f'join_{i + 1}']} s")
        time.sleep(rng.uniform(0, 3))
        t0 = time.monotonic()
        members[0].commands.put(lambda subscribe: subscribe(["a", "b"]))
        took = _wait_final(state, {"a", "b"}, len(members), quiet, timeout, t0)
        _check(members)
        out["subscription_change"] = None if took is None else round(took, 3)
        log(f"{protocol}: subscription_change {out['subscription_change']} s")
        time.sleep(rng.uniform(0, 3))
        gone = members.pop(1)
        t0 = time.monotonic()
        gone.stop_flag.set()  # its thread closes the consumer: LeaveGroup
        gone.join(30)
        with state.lock:
            state.owned.pop(gone.name, None)
        took = _wait_final(state, {"a", "b"}, len(members), quiet, timeout, t0)
        _check(members)
        out["leave"] = None if took is None else round(took, 3)
        log(f"{protocol}: leave {out['leave']} s")
    finally:
        for m in members:
            m.stop_flag.set()
        for m in members:
            m.join(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocols", default="eager,cooperative,consumer")
    ap.add_argument("--quiet", type=float, default=7.0, help="seconds without change that mean final")
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--set", action="append", default=[], help="broker config NAME=VALUE")
    ap.add_argument("--bootstrap", default=None, help="measure an already running broker (e.g. Kafka)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker = Broker(Path(tmp), sets=args.set)
            broker.start()
            bootstrap = broker.bootstrap
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("a", "b")]).values():
                try:
                    f.result(30)
                except Exception as exc:  # already there on a reused broker
                    log(f"create topic: {exc}")
            rng = random.Random(args.seed)
            runs = {p: [run_protocol(bootstrap, p, args.quiet, args.timeout, rng) for _ in range(args.runs)]
                    for p in args.protocols.split(",")}
        finally:
            if broker is not None:
                broker.stop()
    print(json.dumps({"benchmark": "rebalance", "members": 3, "partitions_per_topic": PARTITIONS,
                      "quiet_s": args.quiet, "broker_sets": args.set, "git": _limits.git_revision(),
                      "runs": args.runs, "seconds_to_final_assignment": _summary(runs), "all_runs": runs}, indent=2))


def _summary(runs: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for protocol, results in runs.items():
        out[protocol] = {}
        for case in results[0]:
            values = [r[case] for r in results]
            done = [v for v in values if v is not None]
            out[protocol][case] = {"median": round(statistics.median(done), 3) if done else None,
                                   "max": max(done) if done else None, "timed_out": len(values) - len(done)}
    return out


if __name__ == "__main__":
    main()
