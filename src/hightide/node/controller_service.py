"""The controller's broker lifecycle on the metadata runtime (cluster mode): the IO shell
around :class:`~hightide.cluster.lifecycle.BrokerLifecycle`.

Theory of operation
-------------------
Every lifecycle call (BrokerRegistration, BrokerHeartbeat, UnregisterBroker, the timer)
runs as a metadata write (``write(op)``: the broker's ``write_metadata``), so it is
ordered with every other metadata write and decides from an image that has every
earlier write applied; the records it returns are appended as one batch, and the answer
leaves once they are committed and applied (a call with no records appends nothing and
answers once everything appended before it is committed). Writes are pipelined (see
:class:`~.metadata_runtime.RaftMetadataRuntime`): the image an op sees may hold records
not committed yet. Inside the op the log end offset is the offset its first record will
get (the broker epoch of a registration); below ``committed_end`` is what a broker can
have applied (a heartbeat's acknowledged offset is capped there).

A timer task (:meth:`ControllerService.run`) wakes at the core's ``next_deadline_ms``
(at least every ``TIMER_MAX_SLEEP_S``) and writes the records of ``fence_expired`` (session
expiry, with the leadership moves) or, when the log has been idle for
``metadata.max.idle.interval.ms``, a NoOp.

Through Raft (``raft``: the :class:`~.raft_shell.RaftShell`; a lone controller is a
one-voter quorum that elects itself at start; ``raft`` None only where a test drives the
service over a plain write function) only the active controller (the Raft leader, once its epoch's first entry is
applied) writes: the timer does nothing elsewhere, writes answer NOT_CONTROLLER there,
and :meth:`activate` — run by the shell when this node becomes active — starts the
lifecycle state afresh from the image (Kafka's BrokerHeartbeatManager on activation):
every registered unfenced broker gets a fresh session (a broker is not fenced because
the controller changed), the acknowledged offsets start unknown (the lowest
acknowledged offset is -1 until every unfenced broker has fetched or heartbeated).

**Heartbeats answered at once, and parked for the LAO** (hightide, seed 004; issue 33):
a heartbeat that changes nothing (no records) while no pending write touches the brokers
(the speculative image's brokers are the committed image's) rests on committed state
only, so it is answered without waiting for the writes appended before it to commit
(:class:`~.metadata_runtime.Settled`; Kafka's controller waits for them, as every
read-only op: its brokers do not wait on the answer). One from an unfenced broker whose
acknowledged offset the lowest acknowledged offset (LAO) has not reached yet is then
parked until the LAO rises (another broker's Fetch or heartbeat acknowledged more), at
most ``LAO_WAIT_MS``, and answered with the LAO as of then: the broker's held writes and
reads learn of it the moment the last broker has applied, instead of at its next
heartbeat (which would wait a commit round again under write load).

Observers: every metadata Fetch from a broker (ReplicaId >= 0) is recorded
(:meth:`observe_fetch`): its fetch offset is the replica's log end offset for
DescribeQuorum, with the fetch time and the last time it was caught up, and the core
counts it as an acknowledgement of ``fetch_offset - 1`` (hightide's brokers apply a
batch before they fetch again; see docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..cluster.broker_records import FENCE, IN_CONTROLLED_SHUTDOWN, UNFENCE, BrokerRegistrationChangeRecord, NoOpRecord
from ..cluster.image import MetadataImage
from ..cluster.lifecycle import (
    BrokerLifecycle,
    Heartbeat,
    HeartbeatReply,
    LifecycleConfig,
    Registration,
    RegistrationReply,
)
from ..cluster.records import MetadataRecord
from ..cluster.raft import AddVoter, RemoveVoter, VoterChangeError
from ..cluster.raft.describe import describe_quorum
from ..log.partition_log import PartitionLog
from ..aio.clock import SYSTEM_CLOCK, Clock, wait_event_on
from ..services import CoordinatorUnavailable
from .metadata_runtime import Settled
from .raft_shell import RaftShell, WriteOutcomeUnknown

log = logging.getLogger("hightide.controller")

TIMER_MAX_SLEEP_S = 0.5
#: How long a heartbeat that changes nothing waits at most for the lowest acknowledged
#: offset to rise towards what its broker applied (see the module doc).
LAO_WAIT_MS = 200
#: Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS: an observer not heard from for this
#: long is dropped from DescribeQuorum.
OBSERVER_SESSION_TIMEOUT_MS = 300_000
#: The quorum's leader epoch. One voter, no elections yet: the metadata log's batches
#: carry partition leader epoch 0, and Fetch/DescribeQuorum report the same.
LEADER_EPOCH = 0

WriteMetadata = Callable[[Callable[[MetadataImage], tuple[Any, Sequence[MetadataRecord]]]], Awaitable[Any]]


@dataclass
class ReplicaProgress:
    """What DescribeQuorum reports of one replica (Kafka's ReplicaState)."""
    replica_id: int
    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    directory_id: str = ""  # KIP-853's replica directory id ("" unknown)


class ControllerService:
    """The controller side of cluster mode in one process. ``write`` is the broker's
    ``write_metadata``; ``metadata_log`` and ``committed_end`` give the metadata log and
    the offset below which it is committed (the high watermark a Fetch is served to);
    ``endpoints`` the controller listeners (DescribeQuorum's nodes, DescribeCluster);
    ``clock`` the sessions' and the timers' time; ``latest_image`` the image writes
    decide from (the runtime's speculative image; default: ``image``)."""

    def __init__(self, *, node_id: int, cluster_id: str, config: LifecycleConfig, write: WriteMetadata,
                 image: Callable[[], MetadataImage], metadata_log: Callable[[], PartitionLog],
                 committed_end: Callable[[], int],
                 endpoints: Callable[[], list[tuple[str, str, int]]] = list, raft: RaftShell | None = None,
                 voter_endpoints: dict[int, tuple[str, int]] | None = None, clock: Clock = SYSTEM_CLOCK,
                 latest_image: Callable[[], MetadataImage] | None = None) -> None:
        self.node_id = node_id
        self.clock = clock
        self._endpoints = endpoints
        self.cluster_id = cluster_id
        self.lifecycle = BrokerLifecycle(cluster_id, config)
        #: The controller quorum's Raft shell (None: the single voter, always active).
        self.raft = raft
        self._static_endpoints = dict(voter_endpoints or {})
        self._write = write
        self._image = image
        self._latest_image = latest_image or image
        self._acked = asyncio.Event()  # set (and replaced) when a broker acknowledged more
        self._metadata_log = metadata_log
        self._committed_end = committed_end
        self.last_append_ms = self._now()
        self.observers: dict[int, ReplicaProgress] = {}
        self.noops = 0  # NoOp records written (for tests and metrics)

    @property
    def image(self) -> MetadataImage:
        return self._image()

    @property
    def metadata_log(self) -> PartitionLog:
        return self._metadata_log()

    def committed_end(self) -> int:
        """The offset below which the metadata log is committed (fsynced and applied)."""
        return self._committed_end()

    def controller_endpoints(self) -> list[tuple[str, str, int]]:
        """(listener name, host, port) of this controller's listeners, as advertised."""
        return self._endpoints()

    # -- the quorum ----------------------------------------------------------------------
    @property
    def voter_endpoints(self) -> dict[int, tuple[str, int]]:
        """Every voter's controller address, for leader hints: ``controller.quorum.voters``
        (static), or a dynamic quorum's voter set as this node's log has it (each voter's
        endpoint of this node's controller listener name, else its first)."""
        if self.raft is None or not self.raft.core.kraft_version:
            return self._static_endpoints
        names = [name for name, _, _ in self.controller_endpoints()]
        out: dict[int, tuple[str, int]] = {}
        for node in self.raft.core.voter_set.nodes:
            named = [e for e in node.endpoints if e[0] in names] or list(node.endpoints)
            if named:
                out[node.node_id] = (named[0][1], named[0][2])
        return out

    def voter_listeners(self) -> list[tuple[int, list[tuple[str, str, int]]]]:
        """DescribeQuorum's nodes: each voter's endpoints (a dynamic quorum: as its voter
        set records them; static: this node's listeners as bound, the others' from
        ``controller.quorum.voters`` under this node's controller listener name)."""
        own = self.controller_endpoints()
        if self.raft is not None and self.raft.core.kraft_version:
            nodes = {n.node_id: list(n.endpoints) for n in self.raft.core.voter_set.nodes}
            if self.node_id in nodes and not nodes[self.node_id]:
                nodes[self.node_id] = own
            return sorted(nodes.items())
        name = own[0][0] if own else "CONTROLLER"
        out = [(self.node_id, own)]
        out += [(v, [(name, host, port)]) for v, (host, port) in sorted(self._static_endpoints.items())
                if v != self.node_id]
        return sorted(out)

    async def change_voters(self, change: AddVoter | RemoveVoter, timeout_s: float,
                            wait_commit: bool = True) -> tuple[ErrorCode, str | None]:
        """AddRaftVoter / RemoveRaftVoter (KIP-853) through the Raft shell: (error code,
        message). NOT_LEADER_OR_FOLLOWER on a non-leader, UNSUPPORTED_VERSION without a
        quorum shell, the core's refusals (:class:`~hightide.cluster.raft.VoterChangeError`),
        REQUEST_TIMED_OUT when the change was appended but is not known to be committed
        (leadership lost, or ``timeout_s`` passed: it may still commit)."""
        if self.raft is None:
            return ErrorCode.unsupported_version, "This controller's voter set is static (kraft.version 0)."
        try:
            await self.raft.change_voters(change, timeout_s, wait_commit=wait_commit)
        except VoterChangeError as exc:
            return ErrorCode(exc.error_code), exc.message
        except (WriteOutcomeUnknown, TimeoutError) as exc:
            return ErrorCode.request_timed_out, f"The voter change may or may not have been committed: {exc or 'timed out'}"
        what = (f"added voter {change.node.node_id}" if isinstance(change, AddVoter)
                else f"removed voter {change.node_id}")
        log.info("%s: voters are now %s", what, list(self.raft.core.voter_set.ids))
        return ErrorCode.none, None
    @property
    def is_active(self) -> bool:
        """True if this controller takes metadata writes (the single voter always)."""
        return self.raft is None or self.raft.is_active

    @property
    def leader_id(self) -> int:
        """The active controller as far as this node knows (-1: none known)."""
        return self.node_id if self.raft is None else self.raft.leader_id

    @property
    def leader_epoch(self) -> int:
        """The quorum's leader epoch (the single voter: 0, no elections)."""
        return LEADER_EPOCH if self.raft is None else self.raft.epoch

    def activate(self, epoch: int) -> None:
        """This node became the active controller (see the module doc): fresh lifecycle
        state, a fresh session for every unfenced broker, no observers known yet."""
        self.lifecycle = dataclasses.replace(self.lifecycle)  # same settings, no sessions or acknowledgements
        self.observers = {}
        started = self.last_append_ms = self._now()
        for reg in self.image.brokers.values():
            if not reg.fenced:
                self.lifecycle.heartbeats.session(reg, started)
        log.info("active controller in epoch %d: %d registered brokers get a fresh session", epoch,
                 len(self.image.brokers))

    def appended(self, at_ms: int) -> None:
        """The broker committed a metadata write with records (any writer; ``at_ms``, its
        wall-clock time, is not used: the idle timer runs on :meth:`_now`)."""
        self.last_append_ms = self._now()

    def _now(self) -> int:
        """Milliseconds on the monotonic clock: the lifecycle's time (sessions, timers),
        as Kafka's BrokerHeartbeatManager uses ``time.nanoseconds()``: a step of the wall
        clock neither fences a live broker nor keeps a silent one alive."""
        return int(self.clock.monotonic() * 1000)

    # -- lifecycle RPCs ------------------------------------------------------------------
    async def register(self, req: Registration) -> RegistrationReply:
        """BrokerRegistration as a metadata write; a failed append answers its error code
        (KAFKA_STORAGE_ERROR) and registers nothing."""
        def op(image: MetadataImage) -> tuple[RegistrationReply, list[MetadataRecord]]:
            return self.lifecycle.register(image, req, self._now(), self.metadata_log.log_end_offset)
        try:
            reply: RegistrationReply = await self._write(op)
        except CoordinatorUnavailable as exc:
            return RegistrationReply(exc.error_code, -1, str(exc))
        if reply.error_code == ErrorCode.none:
            log.info("broker %d registered: epoch %d, incarnation %s", req.broker_id, reply.broker_epoch,
                     req.incarnation_id)
        else:
            log.warning("broker %d registration refused: %s (%s)", req.broker_id, reply.error_code.name,
                        reply.message)
        return reply

    async def heartbeat(self, req: Heartbeat) -> HeartbeatReply:
        """BrokerHeartbeat as a metadata write (state changes are written with the
        leadership moves; a heartbeat that changes nothing appends nothing and, while no
        pending write touches the brokers, is answered at once and may be parked for the
        LAO: see the module doc)."""
        def op(image: MetadataImage) -> tuple[Any, list[MetadataRecord]]:
            reply, records = self.lifecycle.heartbeat(image, req, self._now(), self.metadata_log.log_end_offset,
                                                      self.committed_end() - 1)
            if not records and image.brokers == self.image.brokers:
                return Settled((reply, records)), records
            return (reply, records), records
        try:
            out = await self._write(op)
        except CoordinatorUnavailable as exc:
            return HeartbeatReply(exc.error_code, message=str(exc))
        settled = isinstance(out, Settled)
        reply, records = out.response if settled else out
        self._acknowledged()
        _log_changes(records)  # once they are committed
        if settled and self._parks(req, reply):
            return await self._lao_rises(reply)
        return reply

    def _parks(self, req: Heartbeat, reply: HeartbeatReply) -> bool:
        """True for the heartbeat of an unfenced broker, not shutting down, whose own
        acknowledged offset the LAO it was given has not reached."""
        if reply.error_code != ErrorCode.none or reply.is_fenced or reply.should_shut_down or req.want_shut_down:
            return False
        session = self.lifecycle.heartbeats.sessions.get(req.broker_id)
        return session is not None and 0 <= reply.lowest_acknowledged_offset < session.acked_offset

    async def _lao_rises(self, reply: HeartbeatReply) -> HeartbeatReply:
        """Wait (at most ``LAO_WAIT_MS``) until the LAO is above the one in ``reply`` and
        return ``reply`` with the LAO as of then (the one it had if none rose, or when this
        controller is no longer active)."""
        deadline = self.clock.monotonic() + LAO_WAIT_MS / 1000
        lowest = reply.lowest_acknowledged_offset
        while self.is_active:
            left = deadline - self.clock.monotonic()
            if left <= 0 or not await wait_event_on(self.clock, self._acked, left) or not self.is_active:
                break
            now = self.lifecycle.lowest_acknowledged_offset(self._latest_image(), self._now())
            if now > lowest:
                return dataclasses.replace(reply, lowest_acknowledged_offset=now)
        return reply

    def _acknowledged(self) -> None:
        """A broker may have acknowledged more: wake the parked heartbeats."""
        acked, self._acked = self._acked, asyncio.Event()
        acked.set()

    async def unregister(self, broker_id: int) -> tuple[ErrorCode, str | None]:
        """UnregisterBroker as a metadata write."""
        def op(image: MetadataImage) -> tuple[tuple[ErrorCode, str | None], list[MetadataRecord]]:
            code, msg, records = self.lifecycle.unregister(image, broker_id)
            return (code, msg), records
        try:
            code, msg = await self._write(op)
        except CoordinatorUnavailable as exc:
            return exc.error_code, str(exc)
        if code == ErrorCode.none:
            log.info("broker %d unregistered", broker_id)
        self.observers.pop(broker_id, None)
        return code, msg

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, str | None]:
        """Kafka's ``ClusterControlManager.checkBrokerEpoch`` (AllocateProducerIds):
        STALE_BROKER_EPOCH unless the broker is registered with that epoch (-1 skips the
        epoch check)."""
        reg = self.image.brokers.get(broker_id)
        if reg is None:
            return ErrorCode.stale_broker_epoch, f"No broker registration found for broker id {broker_id}"
        if broker_epoch != -1 and reg.epoch != broker_epoch:
            return ErrorCode.stale_broker_epoch, f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}"
        return ErrorCode.none, None

    # -- observers -----------------------------------------------------------------------
    def observe_fetch(self, replica_id: int, fetch_offset: int, replica_epoch: int | None, at_ms: int) -> None:
        """A metadata Fetch from ``replica_id`` at ``fetch_offset`` (ReplicaEpoch when the
        Fetch version has it): DescribeQuorum bookkeeping and the acknowledgement of
        ``fetch_offset - 1``."""
        if replica_id < 0 or replica_id == self.node_id or not self.is_active:
            return
        end = self.committed_end()
        p = self.observers.get(replica_id)
        if p is None:
            p = self.observers[replica_id] = ReplicaProgress(replica_id)
        p.log_end_offset = fetch_offset
        p.last_fetch_ms = at_ms
        if fetch_offset >= end:
            p.last_caught_up_ms = at_ms
        self.lifecycle.observe_fetch(self.image, replica_id, fetch_offset, self._now(), end - 1, replica_epoch)
        self._acknowledged()

    def quorum(self, at_ms: int) -> tuple[list[ReplicaProgress], list[ReplicaProgress]] | None:
        """(voters, observers) for DescribeQuorum: the voters (the single voter: this
        node, caught up now; a quorum: each voter's fetch position and times as the
        leader's Raft state has them) and the brokers that fetched within
        ``OBSERVER_SESSION_TIMEOUT_MS``. None on a controller that is not the leader
        (Kafka answers NOT_LEADER_OR_FOLLOWER there)."""
        for rid in [r for r, p in self.observers.items() if at_ms - p.last_fetch_ms > OBSERVER_SESSION_TIMEOUT_MS]:
            del self.observers[rid]
        observers = [self.observers[r] for r in sorted(self.observers)]
        if self.raft is None:
            return [ReplicaProgress(self.node_id, self.committed_end(), at_ms, at_ms)], observers
        info = describe_quorum(self.raft.core, at_ms)
        if info is None:
            return None
        voters = [ReplicaProgress(v.replica_id, v.log_end_offset, v.last_fetch_timestamp, v.last_caught_up_timestamp,
                                  v.directory_id) for v in info.current_voters]
        known = {o.replica_id for o in observers}
        observers += [ReplicaProgress(o.replica_id, o.log_end_offset, o.last_fetch_timestamp, o.last_caught_up_timestamp,
                                      o.directory_id) for o in info.observers
                      if o.replica_id not in known and at_ms - o.last_fetch_timestamp <= OBSERVER_SESSION_TIMEOUT_MS]
        return voters, sorted(observers, key=lambda o: o.replica_id)

    # -- the timer -----------------------------------------------------------------------
    async def run(self) -> None:
        """Fence expired sessions and write idle NoOps, forever (cancel to stop). A new
        controller (a restart) starts a session for every broker the image shows
        unfenced, as Kafka's does when it becomes active: one that never heartbeats again
        is fenced a session timeout later."""
        if self.raft is None:
            self.activate(LEADER_EPOCH)
        while True:
            if not self.is_active:  # a quorum's standby controller: the active one keeps the timers
                await self.clock.sleep(TIMER_MAX_SLEEP_S)
                continue
            deadline = self.lifecycle.next_deadline_ms(self.image, self.last_append_ms)
            wait_ms = TIMER_MAX_SLEEP_S * 1000 if deadline is None else deadline - self._now()
            await self.clock.sleep(max(0.0, min(wait_ms / 1000, TIMER_MAX_SLEEP_S)))
            if deadline is None or self._now() < deadline:
                continue
            try:
                await self.tick()
            except CoordinatorUnavailable as exc:
                if exc.error_code in (ErrorCode.not_controller, ErrorCode.request_timed_out) and not self.is_active:
                    log.info("controller timer: no longer the active controller: %s", exc)
                    continue
                log.error("controller timer: metadata write failed (retrying): %s", exc)
                await self.clock.sleep(TIMER_MAX_SLEEP_S)
            except Exception:
                log.exception("controller timer failed")
                await self.clock.sleep(TIMER_MAX_SLEEP_S)

    async def tick(self) -> list[MetadataRecord]:
        """One timer step as a metadata write: the fencing records of expired sessions,
        else a NoOp if the log has been idle long enough. Returns the records written."""
        def op(image: MetadataImage) -> tuple[list[MetadataRecord], list[MetadataRecord]]:
            at = self._now()
            records = self.lifecycle.fence_expired(image, at)
            if not records:
                records = self.lifecycle.election_records(image, at)  # Kafka's periodic elections
            if not records:
                records = self.lifecycle.idle_records(at, self.last_append_ms)
            return records, records
        written: list[MetadataRecord] = await self._write(op)
        for r in written:
            if isinstance(r, BrokerRegistrationChangeRecord):
                log.warning("broker %d fenced: no heartbeat for broker.session.timeout.ms=%d", r.broker_id,
                            self.lifecycle.config.session_timeout_ms)
            elif isinstance(r, NoOpRecord):
                self.noops += 1
        return written


def _log_changes(records: Sequence[MetadataRecord]) -> None:
    for r in records:
        if not isinstance(r, BrokerRegistrationChangeRecord):
            continue
        if r.fenced == UNFENCE:
            log.info("broker %d unfenced", r.broker_id)
        elif r.fenced == FENCE:
            log.info("broker %d fenced", r.broker_id)
        elif r.in_controlled_shutdown == IN_CONTROLLED_SHUTDOWN:
            log.info("broker %d in controlled shutdown", r.broker_id)


__all__ = ["ControllerService", "service_handler", "ReplicaProgress", "LEADER_EPOCH", "OBSERVER_SESSION_TIMEOUT_MS"]
