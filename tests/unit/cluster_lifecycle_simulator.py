"""A seeded simulation of the controller's broker-lifecycle core with N brokers, in the
shape of Kafka's RaftEventSimulationTest: one event queue on a simulated clock, brokers
as actors that register, fetch the metadata log and heartbeat at intervals with jitter,
a network that delays and drops messages, and faults — pauses (SIGSTOP-like: the
process neither sends nor receives until resumed), crashes and restarts with a new
incarnation, controlled shutdowns, failed appends, controller failovers. After every
event the invariants are checked; a violation raises :class:`InvariantViolation` naming
the seed, so ``simulate(seed)`` replays it exactly.

The controller side is the real core (:class:`~hightide.cluster.lifecycle.BrokerLifecycle`)
over the real image, driven as the shell must drive it: calls serialized, the records of a
call applied before the next call (or, on a failed append, not at all).

Used by tests/unit/test_cluster_lifecycle_sim.py (a few hundred seeds) and
bench/cluster_lifecycle_sim.py (thousands, JSON out).
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from hightide.cluster import records as R
from hightide.cluster.broker_records import BrokerRegistrationChangeRecord, RegisterBrokerRecord
from hightide.cluster.image import MetadataImage
from hightide.cluster.lifecycle import BrokerLifecycle, Heartbeat, LifecycleConfig, Registration
from hightide.cluster.placement import usable_brokers

CLUSTER = "sim-cluster"


class InvariantViolation(AssertionError):
    pass


@dataclass
class Params:
    brokers: int = 3
    duration_ms: int = 30_000
    heartbeat_ms: int = 250
    session_timeout_ms: int = 2_000
    idle_ms: int = 500
    tick_ms: int = 50
    fetch_ms: int = 100
    latency_ms: tuple[int, int] = (1, 30)
    spike_p: float = 0.02  # a message takes up to 2 x session timeout
    drop_p: float = 0.02
    append_fail_p: float = 0.01
    pause_p: float = 0.002  # per heartbeat: SIGSTOP for up to 2 x session timeout
    crash_p: float = 0.002  # per heartbeat: kill -9, restart later with a new incarnation
    shutdown_p: float = 0.002  # per heartbeat: controlled shutdown, then restart
    write_p: float = 0.3  # per heartbeat: the cluster writes some metadata
    failover_p: float = 0.0005  # per timer tick: a new controller takes over (soft state lost)
    fetch_acks: bool = False  # count metadata Fetch offsets as acknowledgements


@dataclass
class Stats:
    seed: int
    events: int = 0
    heartbeats: int = 0
    registrations: int = 0
    duplicates: int = 0
    fenced_by_timeout: int = 0
    unfenced: int = 0
    controlled_shutdowns: int = 0
    crashes: int = 0
    pauses: int = 0
    failovers: int = 0
    lowest_published: int = -1
    max_committed: int = -1
    max_lag_ms: int = 0  # longest time a committed offset took to be covered by the lowest acknowledged


@dataclass
class BrokerProc:
    """The broker process: what is true on the broker side (the ground truth)."""
    broker_id: int
    incarnation: uuid.UUID
    applied: int = -1  # its metadata log persists across restarts
    epoch: int | None = None
    alive: bool = True
    paused_until: int = -1
    caught_up: bool = False
    shutting_down: bool = False
    in_flight: bool = False  # a heartbeat or registration awaits its answer
    generation: int = 0  # bumped on crash/restart: late answers to an older process are dropped
    sent_at: int = 0


class Simulation:
    def __init__(self, seed: int, params: Params | None = None) -> None:
        self.seed, self.p = seed, params or Params()
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: list[tuple[int, int, Callable[[], None]]] = []
        self.seq = 0
        self.image = MetadataImage()
        self.log: list[Any] = []
        self.last_append_ms = 0
        self.core = BrokerLifecycle(CLUSTER, LifecycleConfig(self.p.session_timeout_ms, self.p.idle_ms))
        self.procs = {i: BrokerProc(i, self._uuid()) for i in range(1, self.p.brokers + 1)}
        self.stats = Stats(seed)
        self.epochs: list[int] = []
        self.published: list[int] = []
        self.pending_cover: dict[int, int] = {}  # committed offset -> time it was committed (for replies)
        self.pending_known: dict[int, int] = {}  # the same, for the controller's own knowledge
        #: Per committed offset: ms until the controller's lowest acknowledged offset covered
        #: it (known) and until a heartbeat answer carried that (delivered).
        self.known_ms: list[int] = []
        self.delivered_ms: list[int] = []
        self.topics: list[str] = []
        self.slack: dict[int, int] = {}  # extra fencing delay from failed appends, by broker
        #: (leader epoch, partition epoch) last seen per partition: they never go back.
        self.partition_epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}

    # -- plumbing -------------------------------------------------------------------------
    def _uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128))

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, fn))

    def send(self, fn: Callable[[], None]) -> None:
        """Deliver ``fn`` after a network delay, or never (dropped)."""
        if self.rng.random() < self.p.drop_p:
            return
        lo, hi = self.p.latency_ms
        delay = self.rng.randint(lo, hi)
        if self.rng.random() < self.p.spike_p:
            delay = self.rng.randint(hi, 2 * self.p.session_timeout_ms)
        self.at(self.now + delay, fn)

    def fail(self, msg: str) -> None:
        raise InvariantViolation(f"seed={self.seed} t={self.now}ms: {msg} (replay: simulate({self.seed}))")

    @property
    def committed(self) -> int:
        return len(self.log) - 1

    def append(self, records: list) -> bool:
        """Append and apply; False (nothing written) on an injected append failure."""
        if not records:
            return True
        if self.rng.random() < self.p.append_fail_p:
            return False
        for r in records:
            stored = R.decode(R.encode(r))
            offset = len(self.log)
            if isinstance(stored, RegisterBrokerRecord):
                self._check_epoch(stored, offset)
            self.image.apply(stored, offset)
            self.log.append(stored)
        self.last_append_ms = self.now
        self.pending_cover[self.committed] = self.pending_known[self.committed] = self.now
        self.stats.max_committed = self.committed
        return True

    # -- the controller -------------------------------------------------------------------
    def controller_register(self, proc: BrokerProc, gen: int) -> None:
        req = Registration(proc.broker_id, CLUSTER, proc.incarnation, (("PLAINTEXT", "h", 9000 + proc.broker_id, 0),))
        existing = self.image.brokers.get(proc.broker_id)
        s = self.core.heartbeats.sessions.get(proc.broker_id)
        live = existing is not None and not existing.fenced and s is not None and s.epoch == existing.epoch \
            and self.now <= s.last_contact_ms + self.p.session_timeout_ms
        reply, records = self.core.register(self.image, req, self.now, len(self.log))
        if reply.error_code == ErrorCode.duplicate_broker_registration:
            self.stats.duplicates += 1
            if not live:
                self.fail(f"DUPLICATE_BROKER_REGISTRATION for broker {proc.broker_id} without a live session")
        elif existing is not None and existing.incarnation_id != proc.incarnation and live:
            self.fail(f"a new incarnation of broker {proc.broker_id} replaced a live session")
        ok = self.append(records)
        code = reply.error_code if ok else ErrorCode.unknown_server_error
        self.send(lambda: self.broker_registered(proc, gen, code, reply.broker_epoch))

    def controller_heartbeat(self, proc: BrokerProc, gen: int, hb: Heartbeat) -> None:
        self.stats.heartbeats += 1
        before = self.image.brokers.get(hb.broker_id)
        was_fenced = before.fenced if before is not None else True
        floor = max(self.published, default=-1)
        reply, records = self.core.heartbeat(self.image, hb, self.now, len(self.log), self.committed)
        if not self.append(records):
            self.send(lambda: self.broker_heartbeat_answer(proc, gen, None))
            return
        if reply.error_code == ErrorCode.none:
            if was_fenced and not reply.is_fenced:
                self.stats.unfenced += 1
                acked = self.core.heartbeats.sessions[hb.broker_id].acked_offset
                if before is None or acked < before.registration_offset or acked < floor:
                    self.fail(f"broker {hb.broker_id} unfenced at acknowledged offset {acked}, before it caught up "
                              f"with its registration record or the published lowest acknowledged offset {floor}")
            self._check_reply(reply)
        self.send(lambda: self.broker_heartbeat_answer(proc, gen, reply))

    def controller_fetch(self, proc: BrokerProc, gen: int, fetch_offset: int, epoch: int | None) -> None:
        if self.p.fetch_acks:
            self.core.observe_fetch(self.image, proc.broker_id, fetch_offset, self.now, self.committed, epoch)
        committed = self.committed
        self.send(lambda: self.broker_fetched(proc, gen, committed))

    def controller_tick(self) -> None:
        if self.rng.random() < self.p.failover_p:
            # A new active controller: same log and image, no sessions or acknowledged
            # offsets; the monotonicity of the lowest acknowledged offset restarts.
            self.stats.failovers += 1
            self.core = BrokerLifecycle(CLUSTER, LifecycleConfig(self.p.session_timeout_ms, self.p.idle_ms))
            self.published = []
            self.slack.clear()
        expired = self.core.fence_expired(self.image, self.now)
        fenced = [r.broker_id for r in expired if isinstance(r, BrokerRegistrationChangeRecord)]
        if self.append(expired):
            self.stats.fenced_by_timeout += len(fenced)
        else:  # the shell retries at the next tick: each failed append adds one tick
            for broker_id in fenced:
                self.slack[broker_id] = self.slack.get(broker_id, 0) + self.p.tick_ms
        self.append(self.core.idle_records(self.now, self.last_append_ms))
        if self.rng.random() < self.p.write_p * self.p.tick_ms / self.p.heartbeat_ms / self.p.brokers:
            self._admin_write()
        self.at(self.now + self.p.tick_ms, self.controller_tick)

    def _admin_write(self) -> None:
        """A topic created (one partition, 1 to 3 replicas on random usable brokers, the
        first leading, all in the ISR) or deleted."""
        if self.topics and self.rng.random() < 0.5:
            name = self.topics.pop(self.rng.randrange(len(self.topics)))
            t = self.image.topics.get(name)
            if t is not None and not self.append([R.RemoveTopicRecord(str(t.topic_id))]):
                self.topics.append(name)
            return
        active = usable_brokers(self.image)  # placement: registered, unfenced, not shutting down
        if not active:
            return
        replicas = tuple(self.rng.sample(active, self.rng.randint(1, min(3, len(active)))))
        name, tid = f"t{self.seq}", str(self._uuid())
        if self.append([R.TopicRecord(name, tid), R.PartitionRecord(tid, 0, replicas[0], 0, replicas)]):
            self.topics.append(name)

    # -- the brokers ------------------------------------------------------------------------
    def running(self, proc: BrokerProc, gen: int) -> bool:
        return proc.alive and proc.generation == gen and self.now >= proc.paused_until

    def broker_start(self, proc: BrokerProc) -> None:
        gen = proc.generation
        proc.in_flight, proc.sent_at = True, self.now
        self.send(lambda: self.controller_register(proc, gen))
        self.at(self.now + self.p.fetch_ms, lambda: self.broker_fetch_loop(proc, gen))
        self.at(self.now + self.p.heartbeat_ms, lambda: self.broker_heartbeat_loop(proc, gen))

    def broker_registered(self, proc: BrokerProc, gen: int, code: ErrorCode, epoch: int) -> None:
        if proc.generation != gen or not proc.alive:
            return
        if self.now < proc.paused_until:  # delivered when the process resumes
            self.at(proc.paused_until, lambda: self.broker_registered(proc, gen, code, epoch))
            return
        proc.in_flight = False
        if code == ErrorCode.none:
            proc.epoch = epoch
            self.stats.registrations += 1

    def broker_fetch_loop(self, proc: BrokerProc, gen: int) -> None:
        if proc.generation != gen or not proc.alive:
            return
        if self.running(proc, gen):
            fetch_offset, epoch = proc.applied + 1, proc.epoch
            self.send(lambda: self.controller_fetch(proc, gen, fetch_offset, epoch))
        self.at(self.now + self.p.fetch_ms + self.rng.randint(0, self.p.fetch_ms // 2),
                lambda: self.broker_fetch_loop(proc, gen))

    def broker_fetched(self, proc: BrokerProc, gen: int, committed: int) -> None:
        if proc.generation != gen or not proc.alive:
            return
        if self.now < proc.paused_until:
            self.at(proc.paused_until, lambda: self.broker_fetched(proc, gen, committed))
            return
        proc.applied = max(proc.applied, committed)  # applied before the next Fetch is sent

    def broker_heartbeat_loop(self, proc: BrokerProc, gen: int) -> None:
        if proc.generation != gen or not proc.alive:
            return
        jitter = self.rng.randint(0, self.p.heartbeat_ms // 5)
        self.at(self.now + self.p.heartbeat_ms + jitter, lambda: self.broker_heartbeat_loop(proc, gen))
        if not self.running(proc, gen):
            return
        if self._maybe_fault(proc):
            return
        timed_out = proc.in_flight and self.now - proc.sent_at > self.p.session_timeout_ms // 2
        if proc.in_flight and not timed_out:
            return
        proc.in_flight, proc.sent_at = True, self.now
        if proc.epoch is None:
            self.send(lambda: self.controller_register(proc, gen))
            return
        hb = Heartbeat(proc.broker_id, proc.epoch, proc.applied, want_fence=not proc.caught_up,
                       want_shut_down=proc.shutting_down)
        self.send(lambda: self.controller_heartbeat(proc, gen, hb))

    def broker_heartbeat_answer(self, proc: BrokerProc, gen: int, reply: Any) -> None:
        if proc.generation != gen or not proc.alive:
            return
        if self.now < proc.paused_until:
            self.at(proc.paused_until, lambda: self.broker_heartbeat_answer(proc, gen, reply))
            return
        proc.in_flight = False
        if reply is None:
            return
        if reply.error_code == ErrorCode.stale_broker_epoch:
            proc.epoch = None  # re-register (Kafka's broker does after a fencing it cannot recover from)
            return
        if reply.is_caught_up:
            proc.caught_up = True
        if reply.should_shut_down:
            reg = self.image.brokers.get(proc.broker_id)
            if reg is not None and reg.epoch == proc.epoch and not reg.fenced:
                self.fail(f"broker {proc.broker_id} told to shut down while unfenced")
            self.stats.controlled_shutdowns += 1
            self._restart_later(proc)

    def _maybe_fault(self, proc: BrokerProc) -> bool:
        r = self.rng.random()
        if r < self.p.crash_p:
            self.stats.crashes += 1
            self._restart_later(proc)
            return True
        r -= self.p.crash_p
        if r < self.p.pause_p:
            self.stats.pauses += 1
            proc.paused_until = self.now + self.rng.randint(1, 2 * self.p.session_timeout_ms)
            return True
        r -= self.p.pause_p
        if r < self.p.shutdown_p and proc.epoch is not None:
            proc.shutting_down = True
        return False

    def _restart_later(self, proc: BrokerProc) -> None:
        proc.alive = False
        proc.generation += 1

        def restart() -> None:
            proc.alive, proc.incarnation, proc.epoch = True, self._uuid(), None
            proc.caught_up = proc.shutting_down = proc.in_flight = False
            proc.paused_until = -1
            self.broker_start(proc)
        self.at(self.now + self.rng.randint(1, 2 * self.p.session_timeout_ms), restart)

    # -- invariants ---------------------------------------------------------------------------
    def _check_epoch(self, rec: RegisterBrokerRecord, offset: int) -> None:
        existing = self.image.brokers.get(rec.broker_id)
        if existing is not None and existing.incarnation_id == uuid.UUID(rec.incarnation_id):
            if rec.broker_epoch != existing.epoch:
                self.fail(f"re-registration of the same incarnation changed the epoch of broker {rec.broker_id}")
            return
        if rec.broker_epoch != offset:
            self.fail(f"epoch {rec.broker_epoch} of broker {rec.broker_id} is not its record's offset {offset}")
        if self.epochs and rec.broker_epoch <= self.epochs[-1]:
            self.fail(f"epoch {rec.broker_epoch} not above the previous {self.epochs[-1]}")
        self.epochs.append(rec.broker_epoch)

    def _active(self) -> list:
        """Unfenced, not in controlled shutdown: read from the image, not from the core."""
        return [r for r in self.image.brokers.values() if not r.fenced and not r.in_controlled_shutdown]

    def _expected_lowest(self) -> int:
        acked = [self.core.heartbeats.session(r, self.now).acked_offset for r in self._active()]
        return -1 if not acked or min(acked) < 0 else min(acked)

    def _check_reply(self, reply: Any) -> None:
        lowest = reply.lowest_acknowledged_offset
        expected = self._expected_lowest()
        if lowest != expected:
            self.fail(f"heartbeat answered lowest acknowledged {lowest}, the active brokers' minimum is {expected}")
        self._check_lowest(lowest, "a heartbeat answer")
        if lowest >= 0:
            if self.published and lowest < self.published[-1]:
                self.fail(f"lowest acknowledged went backwards: {self.published[-1]} -> {lowest}")
            self.published.append(lowest)
            self.stats.lowest_published = lowest
            for off in [o for o in self.pending_cover if o <= lowest]:
                lag = self.now - self.pending_cover.pop(off)
                self.delivered_ms.append(lag)
                self.stats.max_lag_ms = max(self.stats.max_lag_ms, lag)

    def _check_lowest(self, lowest: int, what: str) -> None:
        if lowest < 0:
            return
        for reg in self._active():
            proc = self.procs[reg.broker_id]
            if lowest > proc.applied:
                self.fail(f"{what}: lowest acknowledged {lowest} exceeds active broker {reg.broker_id}'s "
                          f"applied offset {proc.applied}")

    def _check_leaders(self) -> None:
        """Leadership and ISRs follow fencing (in the same batch): a partition's leader is
        an active broker in its ISR, or -1; a leaderless partition has no active ISR
        member (no unclean election here); the ISR is a non-empty subset of the replicas
        whose members are all unfenced unless it is down to its last member; leader and
        partition epochs never go back."""
        active = {r.broker_id for r in self._active()}
        unfenced = {r.broker_id for r in self.image.brokers.values() if not r.fenced}
        for t in self.image.topics.values():
            for p in t.partitions.values():
                where = f"{t.name}-{p.partition} (leader {p.leader}, ISR {list(p.isr)}, replicas {list(p.replicas)})"
                if p.leader != -1 and (p.leader not in active or p.leader not in p.isr):
                    self.fail(f"{where}: the leader is not an active ISR member")
                if p.leader == -1 and active.intersection(p.isr):
                    self.fail(f"{where}: leaderless although ISR member(s) "
                              f"{sorted(active.intersection(p.isr))} are active")
                if not p.isr or not set(p.isr) <= set(p.replicas):
                    self.fail(f"{where}: the ISR is empty or not within the replicas")
                if len(p.isr) > 1 and not set(p.isr) <= unfenced:
                    self.fail(f"{where}: a fenced broker stayed in an ISR of several members")
                key = (t.topic_id, p.partition)
                before = self.partition_epochs.get(key, (-1, -1))
                if p.leader_epoch < before[0] or p.partition_epoch < before[1]:
                    self.fail(f"{where}: epochs went back from {before} to {(p.leader_epoch, p.partition_epoch)}")
                self.partition_epochs[key] = (p.leader_epoch, p.partition_epoch)

    def check(self) -> None:
        hb = self.core.heartbeats
        self._check_leaders()
        lowest = self._expected_lowest()
        self._check_lowest(lowest, "after the event")
        if lowest >= 0 and self.pending_known and min(self.pending_known) <= lowest:
            for off in [o for o in self.pending_known if o <= lowest]:
                self.known_ms.append(self.now - self.pending_known.pop(off))
        for reg in self.image.brokers.values():
            if reg.fenced:
                self.slack.pop(reg.broker_id, None)
                continue
            s = hb.sessions.get(reg.broker_id)
            if s is not None and s.epoch == reg.epoch \
                    and self.now > s.last_contact_ms + self.p.session_timeout_ms + self.p.tick_ms \
                    + self.slack.get(reg.broker_id, 0):
                self.fail(f"broker {reg.broker_id} still unfenced {self.now - s.last_contact_ms} ms after its last "
                          f"heartbeat (timeout {self.p.session_timeout_ms} + tick {self.p.tick_ms})")

    def run(self) -> Stats:
        for proc in self.procs.values():
            self.at(self.rng.randint(0, self.p.heartbeat_ms), lambda proc=proc: self.broker_start(proc))
        self.at(self.p.tick_ms, self.controller_tick)
        while self.queue:
            t, _, fn = heapq.heappop(self.queue)
            if t > self.p.duration_ms:
                break
            self.now = t
            fn()
            self.stats.events += 1
            self.check()
        return self.stats


def simulate(seed: int, params: Params | None = None) -> Stats:
    """Run one seeded simulation; raises InvariantViolation (naming the seed) on a failure."""
    return Simulation(seed, params).run()


__all__ = ["Params", "Stats", "InvariantViolation", "Simulation", "simulate"]
