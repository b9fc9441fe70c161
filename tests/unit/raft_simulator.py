"""A seeded simulation of the Raft core (hightide.cluster.raft), in the shape of Kafka's
RaftEventSimulationTest: one event queue on a simulated clock (ms), 1-5 voters and 0-5
observers running the real :class:`RaftCore`, an in-memory network that drops, delays
and reorders messages within a link and partitions the nodes, in-memory storage with
power-cut semantics (the quorum-state file and snapshots are written atomically and
durably; log entries are durable only once a Flush completed, and a killed node loses
the rest), kills, restarts and pauses (SIGSTOP: the node neither runs nor receives until
resumed, then sees everything late), clients appending to whoever is leader and, with
``reconfig_interval_ms`` (KIP-853, ``kraft_version`` 1), an operator adding a live
non-voter as a voter or removing a random voter — the leader too — through the leader.

After every step the invariants are checked; a violation raises
:class:`InvariantViolation` naming the seed and the command that replays it exactly:

* at most one leader per epoch;
* a node's epoch never goes backwards (across restarts: it is persisted), and its high
  watermark never goes backwards while it runs (Kafka does not persist the HW);
* every committed entry is durable on a majority of the committing leader's voter set
  when it commits;
* a leader is a voter of its own voter set when elected, and each committed voter set
  differs from the one committed before it by at most one voter;
* every node's committed prefix is identical (log matching), and snapshots hold it;
* a committed entry is never truncated.

Storage is modelled on entries rather than on :mod:`hightide.log.storage_memory`'s
files: the core's log is a sequence of entries, and what matters is the same rule that
file model implements (unflushed writes are lost on a kill).

Used by tests/unit/test_raft_sim.py and bench/raft_sim.py. Replay one seed:
``python -m tests.unit.raft_simulator --seed N [--set voters=5 --set kill_prob=0.4 ...]
[--unsafe RULE]`` (a violation prints exactly this command).
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from hightide.cluster.raft.messages import VoteRequest, VoteResponse
from hightide.cluster.raft import (
    AddVoter, Append, ClientAppend, Committed, ElectionState, Entry, Flush, FlushDone, InstallSnapshot,
    NotLeaderError, OffsetAndEpoch, PersistElection, RaftConfig, RaftCore, RaftLog, Received,
    RemoveVoter, RoleChanged, Send, SendFailed, SnapshotCreated, Tick, TrimLog, Truncate, VoterChangeError,
    VoterNode, VoterSet,
)
from hightide.cluster.raft.voters import read_voters


class InvariantViolation(AssertionError):
    pass


@dataclass
class SimConfig:
    voters: int = 3
    observers: int = 0
    duration_ms: int = 20_000
    drop_rate: float = 0.01
    min_delay_ms: int = 1
    max_delay_ms: int = 15
    long_delay_rate: float = 0.01     # a message stuck in a retransmit queue
    long_delay_max_ms: int = 3000
    fsync_min_ms: int = 1
    fsync_max_ms: int = 6
    append_interval_ms: int = 40
    fault_interval_ms: int = 700
    kill_prob: float = 0.25
    pause_prob: float = 0.1
    partition_prob: float = 0.2
    snapshot_every: int = 40          # entries past the last snapshot; 0 = never
    kill_leader_every_ms: int = 0     # also kill the leader this often (failover timing)
    pre_vote: bool = True             # False: Kafka 3's elections (no KIP-996)
    crash_after_vote_prob: float = 0.0  # a crash point: die right after granting a vote
    fetch_max_entries: int = 64       # entries per Fetch response
    kraft_version: int = 0            # 1: dynamic voters (KIP-853), written to the log
    reconfig_interval_ms: int = 0     # add or remove a voter this often (kraft_version 1)
    unsafe: frozenset[str] = frozenset()
    raft: RaftConfig = field(default_factory=RaftConfig)


@dataclass
class Storage:
    """What a node keeps on disk; ``durable`` entries survive a kill, the rest do not."""

    election: ElectionState = field(default_factory=lambda: ElectionState(0))
    entries: list[tuple[int, Entry]] = field(default_factory=list)
    durable: int = 0                  # how many of ``entries`` are flushed
    snapshot: tuple[OffsetAndEpoch, bytes] | None = None

    def end(self) -> int:
        if self.entries:
            base, e = self.entries[-1]
            return base + e.count
        return self.snapshot[0].offset if self.snapshot else 0

    def crash(self) -> None:
        del self.entries[self.durable:]


@dataclass
class Node:
    id: int
    storage: Storage
    core: RaftCore | None = None
    incarnation: int = 0
    paused: bool = False
    deferred: list[tuple[str, Any]] = field(default_factory=list)
    max_epoch: int = 0
    hw: int = 0
    next_tick: int | None = None


@dataclass
class Stats:
    elections: list[int] = field(default_factory=list)          # ms without a leader
    commit_latency: list[int] = field(default_factory=list)     # append -> committed
    appends: int = 0
    committed: int = 0
    leaders: int = 0
    kills: int = 0
    steps: int = 0
    snapshots_installed: int = 0
    truncations: int = 0
    voter_changes: int = 0                                      # committed voter-set changes
    voter_refusals: dict[int, int] = field(default_factory=dict)  # error code -> count
    leader_removals: int = 0                                    # a leader removed itself (asked)


def _key(e: Entry) -> tuple[int, bytes]:
    return (e.epoch, e.payload)


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig) -> None:
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.raft = RaftConfig(**{**{f: getattr(cfg.raft, f) for f in (
            "election_timeout_ms", "fetch_timeout_ms", "election_backoff_max_ms",
            "request_timeout_ms", "retry_backoff_ms", "fetch_max_wait_ms",
            "snapshot_chunk_bytes")}, "unsafe": cfg.unsafe,
            "fetch_max_entries": cfg.fetch_max_entries,
            "pre_vote": cfg.pre_vote})
        self.voters = list(range(1, cfg.voters + 1))
        ids = self.voters + list(range(101, 101 + cfg.observers))
        self.nodes = {i: Node(i, Storage()) for i in ids}
        self.now = 0
        self._seq = 0
        self._queue: list[tuple[int, int, str, int, Any]] = []
        self.partition: dict[int, int] | None = None    # node -> side
        self.leader_by_epoch: dict[int, int] = {}
        self.committed: list[tuple[int, bytes]] = []      # the global committed log
        self.pending: dict[bytes, int] = {}               # payload -> append time
        self.stats = Stats()
        self.committed_voters = VoterSet.of(self.voters)  # the latest committed voter set
        self._leaderless_since: int | None = 0
        self._appended = 0
        self._conn: dict[tuple[int, int, int], int] = {}   # (server, client, cid) -> client incarnation
        for i in ids:
            self._start(i)
        self._push(0, "client", 0, None)
        self._push(cfg.fault_interval_ms, "fault", 0, None)
        if cfg.kill_leader_every_ms:
            self._push(cfg.kill_leader_every_ms, "kill_leader", 0, None)
        if cfg.reconfig_interval_ms:
            self._push(cfg.reconfig_interval_ms, "reconfig", 0, None)

    # --- plumbing ---------------------------------------------------------------------

    def fail(self, what: str) -> None:
        raise InvariantViolation(
            f"seed {self.seed} at {self.now} ms: {what}\n  replay: python -m "
            f"tests.unit.raft_simulator --seed {self.seed}{replay_args(self.cfg)}")

    def _push(self, at: int, kind: str, node: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, kind, node, payload))

    def _start(self, i: int) -> None:
        n = self.nodes[i]
        st = n.storage
        n.incarnation += 1
        snap = st.snapshot
        log = RaftLog.restore(snap[0] if snap else None, st.entries)
        rng = random.Random(self.seed * 7919 + i * 104729 + n.incarnation)
        n.core = RaftCore(i, self.voters, self.raft, rng, self.now, election=st.election,
                          log=log, snapshot_data=snap[1] if snap else b"",
                          kraft_version=self.cfg.kraft_version)
        n.hw = n.core.high_watermark
        self._check_epoch(n)
        self._step(n, Tick())

    def _kill(self, i: int) -> None:
        n = self.nodes[i]
        if n.core is not None and n.core.role == "leader":
            self._leaderless_since = self.now if self._leaderless_since is None else self._leaderless_since
        n.core = None
        n.paused = False
        n.deferred.clear()
        n.next_tick = None
        n.storage.crash()
        self.stats.kills += 1

    # --- running ----------------------------------------------------------------------

    def run(self, until: int | None = None) -> Stats:
        """Run to ``until`` (default: the configured duration); may be called again."""
        end = self.cfg.duration_ms if until is None else until
        while self._queue and self._queue[0][0] <= end:
            at, _, kind, node, payload = heapq.heappop(self._queue)
            self.now = at
            self._handle(kind, node, payload)
        self.now = max(self.now, end)
        return self.stats

    def leader(self) -> Node | None:
        """The live, unpaused leader of the highest epoch, if any."""
        leaders = [n for n in self.nodes.values()
                   if n.core is not None and not n.paused and n.core.role == "leader"]
        return max(leaders, key=lambda n: n.core.epoch if n.core else 0, default=None)

    def isolate(self, node: int, until: int) -> None:
        """Cut ``node`` off from every other node until ``until`` (a partition)."""
        self.partition = {i: int(i == node) for i in self.nodes}
        self._push(until, "heal", 0, None)

    def pause(self, node: int, until: int) -> None:
        """SIGSTOP ``node`` until ``until``."""
        self.nodes[node].paused = True
        self._push(until, "resume", node, None)

    def _handle(self, kind: str, i: int, payload: Any) -> None:
        if kind == "client":
            self._client()
            return
        if kind == "fault":
            self._fault()
            return
        if kind == "restart":
            if self.nodes[i].core is None:
                self._start(i)
            return
        if kind == "heal":
            self.partition = None
            return
        if kind == "reconfig":
            self._reconfig()
            self._push(self.now + self.cfg.reconfig_interval_ms, "reconfig", 0, None)
            return
        if kind == "kill_leader":
            for n in self.nodes.values():
                if n.core is not None and n.core.role == "leader":
                    self._kill(n.id)
                    self._push(self.now + self.rng.randint(100, 3000), "restart", n.id, None)
            self._push(self.now + self.cfg.kill_leader_every_ms, "kill_leader", 0, None)
            return
        n = self.nodes[i]
        if kind == "resume":
            n.paused = False
            deferred, n.deferred = n.deferred, []
            for k, p in deferred:
                self._handle(k, i, p)
            return
        incarnation, event = payload
        if kind == "deliver" and not self._connected(n, incarnation, event):
            return
        if n.core is None or (kind in ("flush", "failed") and incarnation != n.incarnation):
            return
        if n.paused:
            n.deferred.append((kind, payload))
            return
        if kind == "tick":
            if n.next_tick == self.now:
                n.next_tick = None
            self._step(n, Tick())
        elif kind in ("deliver", "failed"):
            self._step(n, event)
        elif kind == "flush":
            self._flushed(n, event)

    def _step(self, n: Node, event: Any) -> None:
        core = n.core
        assert core is not None
        self.stats.steps += 1
        actions = core.step(self.now, event)
        self._run_actions(n, actions)
        self._check_epoch(n)
        if self.cfg.crash_after_vote_prob and self._granted_vote(event, actions) \
                and self.rng.random() < self.cfg.crash_after_vote_prob:
            self._kill(n.id)
            self._push(self.now + self.rng.randint(100, 1000), "restart", n.id, None)
            return
        d = core.next_deadline
        if d is not None and (n.next_tick is None or d < n.next_tick or n.next_tick < self.now):
            n.next_tick = max(d, self.now)
            self._push(n.next_tick, "tick", n.id, (n.incarnation, None))

    def _run_actions(self, n: Node, actions: list[Any]) -> None:
        st = n.storage
        for a in actions:
            if isinstance(a, Send):
                self._send(n.id, a.dest, a.message, a.correlation_id)
            elif isinstance(a, PersistElection):
                st.election = a.state
            elif isinstance(a, Append):
                if a.base_offset != st.end():
                    self.fail(f"node {n.id} appends at {a.base_offset}, log ends at {st.end()}")
                base = a.base_offset
                for e in a.entries:
                    st.entries.append((base, e))
                    base += e.count
            elif isinstance(a, Truncate):
                self.stats.truncations += 1
                self._truncated(n, a.offset)
            elif isinstance(a, Flush):
                delay = self.rng.randint(self.cfg.fsync_min_ms, self.cfg.fsync_max_ms)
                self._push(self.now + delay, "flush", n.id, (n.incarnation, a.end_offset))
            elif isinstance(a, Committed):
                self._committed(n, a.high_watermark)
            elif isinstance(a, InstallSnapshot):
                self._check_snapshot(n, a.snapshot_id, a.data)
                self.stats.snapshots_installed += 1
                st.snapshot = (a.snapshot_id, a.data)
                st.entries.clear()
                st.durable = 0
            elif isinstance(a, TrimLog):
                assert n.core is not None
                st.snapshot = (a.snapshot_id, n.core.snapshot_data)
                keep = [(b, e) for b, e in st.entries if b >= a.snapshot_id.offset]
                st.durable = max(0, st.durable - (len(st.entries) - len(keep)))
                st.entries = keep
            elif isinstance(a, RoleChanged):
                self._role_changed(n, a)

    def _connected(self, n: Node, tags: tuple[int, int], event: Received) -> bool:
        """Model TCP: a message reaches only the process its connection was opened to,
        a request to a dead node is refused (the sender gets SendFailed), and a
        response travels back on the request's connection."""
        dest_inc, src_inc = tags
        request = type(event.message).__name__.endswith("Request")
        if n.core is None:
            if request:
                failed = SendFailed(n.id, event.correlation_id)
                self._push(self.now + self.rng.randint(1, 3), "failed", event.source,
                           (src_inc, failed))
            return False
        if dest_inc != n.incarnation:
            return False                  # the connection died with the old process
        if request:
            self._conn[(n.id, event.source, event.correlation_id)] = src_inc
        return True

    @staticmethod
    def _granted_vote(event: Any, actions: list[Any]) -> bool:
        if not (isinstance(event, Received) and isinstance(event.message, VoteRequest)
                and not event.message.pre_vote):
            return False
        return any(isinstance(a, Send) and isinstance(a.message, VoteResponse)
                   and a.message.vote_granted for a in actions)

    def _send(self, src: int, dest: int, msg: Any, cid: int) -> None:
        if type(msg).__name__.endswith("Response"):
            dest_inc = self._conn.pop((src, dest, cid), -1)
        else:
            dest_inc = self.nodes[dest].incarnation
        src_inc = self.nodes[src].incarnation
        if self.rng.random() < self.cfg.drop_rate or self._cut(src, dest):
            return
        c = self.cfg
        if self.rng.random() < c.long_delay_rate:
            delay = self.rng.randint(c.max_delay_ms, c.long_delay_max_ms)
        else:
            delay = self.rng.randint(c.min_delay_ms, c.max_delay_ms)
        self._push(self.now + delay, "deliver", dest, ((dest_inc, src_inc), Received(src, msg, cid)))

    def _cut(self, a: int, b: int) -> bool:
        p = self.partition
        return p is not None and p.get(a) != p.get(b)

    def _flushed(self, n: Node, end_offset: int) -> None:
        st = n.storage
        # fsync writes what the page cache holds now, up to the asked offset
        durable = 0
        for base, e in st.entries:
            if base + e.count > end_offset:
                break
            durable += 1
        st.durable = max(st.durable, durable)
        self._step(n, FlushDone(end_offset))

    # --- invariants -------------------------------------------------------------------

    def _check_epoch(self, n: Node) -> None:
        assert n.core is not None
        if n.core.epoch < n.max_epoch:
            self.fail(f"node {n.id} epoch went back from {n.max_epoch} to {n.core.epoch}")
        n.max_epoch = n.core.epoch

    def _role_changed(self, n: Node, a: RoleChanged) -> None:
        if a.role != "leader":
            return
        other = self.leader_by_epoch.setdefault(a.epoch, n.id)
        if other != n.id:
            self.fail(f"two leaders in epoch {a.epoch}: {other} and {n.id}")
        assert n.core is not None
        if n.id not in n.core.voters:
            self.fail(f"node {n.id} leads epoch {a.epoch} but is not in its voter set {n.core.voters}")
        self.stats.leaders += 1
        if self._leaderless_since is not None:
            self.stats.elections.append(self.now - self._leaderless_since)
            self._leaderless_since = None

    def _committed(self, n: Node, hw: int) -> None:
        core = n.core
        assert core is not None
        if hw < n.hw:
            self.fail(f"node {n.id} high watermark went back from {n.hw} to {hw}")
        for off in range(max(n.hw, core.log.start_offset), hw):
            e = core.log.entry_at(off)
            if e is None:
                self.fail(f"node {n.id} commits offset {off} it does not hold")
                return
            key = _key(e)
            if off < len(self.committed):
                if self.committed[off] != key:
                    self.fail(f"node {n.id} committed {key} at {off}, others {self.committed[off]}")
            elif off == len(self.committed):
                self.committed.append(key)
                self._check_majority(off, key, core.voters)
                self._check_voter_change(off, e)
                self._acknowledge(e)
            else:
                self.fail(f"node {n.id} commits {off} past the committed end {len(self.committed)}")
        n.hw = hw
        self._maybe_snapshot(n)

    def _check_voter_change(self, off: int, e: Entry) -> None:
        new = read_voters(e.payload) if e.control else None
        if new is None:
            return
        if not new.one_change_from(self.committed_voters):
            self.fail(f"voter set {new.ids} committed at {off} after {self.committed_voters.ids}: more than one change")
        if new.ids != self.committed_voters.ids:
            self.stats.voter_changes += 1
        self.committed_voters = new

    def _check_majority(self, off: int, key: tuple[int, bytes], voters: tuple[int, ...]) -> None:
        holders = 0
        for v in voters:
            st = self.nodes[v].storage
            if st.snapshot is not None and st.snapshot[0].offset > off:
                holders += 1
                continue
            for base, e in st.entries[:st.durable]:
                if base == off:
                    holders += _key(e) == key
                    break
        if holders < len(voters) // 2 + 1:
            self.fail(f"offset {off} {key} committed but durable on {holders} of "
                      f"{len(voters)} voters {list(voters)}")

    def _acknowledge(self, e: Entry) -> None:
        self.stats.committed += 1
        t = self.pending.pop(e.payload, None)
        if t is not None:
            self.stats.commit_latency.append(self.now - t)

    def _truncated(self, n: Node, offset: int) -> None:
        st = n.storage
        if offset < n.hw:
            self.fail(f"node {n.id} truncates to {offset} below its high watermark {n.hw}")
        for base, e in st.entries:
            if base >= offset and base < len(self.committed) and self.committed[base] == _key(e):
                self.fail(f"node {n.id} truncates committed entry {_key(e)} at {base}")
        keep = [(b, e) for b, e in st.entries if b < offset]
        st.durable = min(st.durable, len(keep))
        st.entries = keep

    def _snapshot_bytes(self, upto: int) -> bytes:
        return b"|".join(p for _, p in self.committed[:upto])

    def _maybe_snapshot(self, n: Node) -> None:
        core = n.core
        assert core is not None
        every = self.cfg.snapshot_every
        if not every or core.high_watermark - core.log.start_offset < every:
            return
        hw = core.high_watermark
        epoch = core.log.epoch_at(hw - 1)
        assert epoch is not None
        self._run_actions(n, core.step(self.now, SnapshotCreated(
            OffsetAndEpoch(hw, epoch), self._snapshot_bytes(hw))))

    def _check_snapshot(self, n: Node, sid: OffsetAndEpoch, data: bytes) -> None:
        if sid.offset > len(self.committed) or data != self._snapshot_bytes(sid.offset):
            self.fail(f"node {n.id} installs snapshot {sid} that is not the committed prefix")

    # --- clients and faults -----------------------------------------------------------

    def _client(self) -> None:
        leaders = [n for n in self.nodes.values()
                   if n.core is not None and not n.paused and n.core.role == "leader"]
        if leaders:
            n = max(leaders, key=lambda x: x.core.epoch if x.core else 0)
            self._appended += 1
            payload = b"v%d" % self._appended
            try:
                self._step(n, ClientAppend((payload,)))
            except NotLeaderError:
                pass
            else:
                self.pending[payload] = self.now
                self.stats.appends += 1
        self._push(self.now + self.cfg.append_interval_ms, "client", 0, None)

    def _reconfig(self) -> None:
        """The operator: add a live non-voter (AddRaftVoter) or remove a random voter,
        possibly the leader (RemoveRaftVoter), through the current leader."""
        n = self.leader()
        if n is None or n.core is None:
            return
        voters = n.core.voter_set
        others = [i for i, x in self.nodes.items() if i not in voters.ids and x.core is not None]
        r = self.rng
        event: AddVoter | RemoveVoter
        if others and (len(voters.ids) == 1 or r.random() < 0.5):
            event = AddVoter(VoterNode(r.choice(others)))
        elif len(voters.ids) > 1:
            event = RemoveVoter(r.choice(voters.ids))
            self.stats.leader_removals += event.node_id == n.id
        else:
            return
        try:
            self._step(n, event)
        except VoterChangeError as exc:
            self.stats.voter_refusals[exc.error_code] = self.stats.voter_refusals.get(exc.error_code, 0) + 1

    def _fault(self) -> None:
        c, r = self.cfg, self.rng
        ids = list(self.nodes)
        x = r.random()
        if x < c.kill_prob:
            i = r.choice(ids)
            if self.nodes[i].core is not None:
                self._kill(i)
                self._push(self.now + r.randint(100, 3000), "restart", i, None)
        elif x < c.kill_prob + c.pause_prob:
            i = r.choice(ids)
            n = self.nodes[i]
            if n.core is not None and not n.paused:
                n.paused = True
                self._push(self.now + r.randint(500, 5000), "resume", i, None)
        elif x < c.kill_prob + c.pause_prob + c.partition_prob and self.partition is None:
            self.partition = {i: r.randint(0, 1) for i in ids}
            self._push(self.now + r.randint(500, 4000), "heal", 0, None)
        self._push(self.now + c.fault_interval_ms, "fault", 0, None)


def replay_args(cfg: SimConfig) -> str:
    """The command-line arguments that rebuild ``cfg`` (fields that differ from the
    defaults, as ``--set name=value``, and each unsafe rule)."""
    default = SimConfig()
    args = [f" --set {name}={getattr(cfg, name)}" for name in SimConfig.__dataclass_fields__
            if name not in ("unsafe", "raft") and getattr(cfg, name) != getattr(default, name)]
    args += [f" --unsafe {u}" for u in sorted(cfg.unsafe)]
    return "".join(args)


def simulate(seed: int, cfg: SimConfig | None = None) -> Simulation:
    """Run one seed to the end; raises InvariantViolation (with a replay command)."""
    sim = Simulation(seed, cfg or SimConfig())
    sim.run()
    return sim


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a SimConfig field (voters, observers, duration_ms, kill_prob, ...)")
    p.add_argument("--unsafe", action="append", default=[])
    a = p.parse_args(argv)
    fields: dict[str, Any] = {}
    for item in a.set:
        name, _, value = item.partition("=")
        kind = type(getattr(SimConfig(), name))
        fields[name] = value == "True" if kind is bool else kind(value)
    cfg = SimConfig(**fields, unsafe=frozenset(a.unsafe))
    try:
        sim = simulate(a.seed, cfg)
    except InvariantViolation as e:
        print(e)
        return 1
    s = sim.stats
    print(f"seed {a.seed}: ok; {s.steps} steps, {s.leaders} leaders, {s.appends} appends, "
          f"{s.committed} committed, {s.kills} kills, epochs {len(sim.leader_by_epoch)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
