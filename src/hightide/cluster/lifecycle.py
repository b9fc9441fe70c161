"""The controller's broker lifecycle: BrokerRegistration (62), BrokerHeartbeat (63),
UnregisterBroker (64), session expiry and idle NoOp records, as a sans-IO core in the
shape of Kafka's ``ClusterControlManager`` + ``BrokerHeartbeatManager`` +
``ReplicationControlManager.processBrokerHeartbeat`` (behaviour, not code).

Theory of operation
-------------------
Each call takes the metadata image, the time and the log position, and returns
``(reply, records)``; it never mutates the image. The shell appends the records as one
batch, and the image changes only when they are applied (``MetadataImage.apply``).
Soft state (sessions, acknowledged offsets: :mod:`hightide.cluster.heartbeats`) is
updated during the call, as Kafka's heartbeat manager is.

Contract with the shell: calls are serialized, and the records returned by one call are
applied to the image before the next call (the metadata runtime's write lock gives
this; Kafka's controller has the same single-writer rule). ``next_offset`` is the offset
the first returned record will get (the log end offset under the lock);
``committed_offset`` is the offset of the last committed record (with one voter:
``next_offset - 1`` once earlier writes are durable).

A broker's state (Kafka's ``BrokerControlState``) and its transitions on a heartbeat::

    FENCED       --WantShutDown-->                        SHUTDOWN_NOW
    FENCED       --not WantFence, offset >= catch-up, never
                   in controlled shutdown or told to-->   UNFENCED
    UNFENCED     --WantFence (+WantShutDown)-->           FENCED (SHUTDOWN_NOW)
    UNFENCED     --WantShutDown, leads partitions-->      CONTROLLED_SHUTDOWN
    UNFENCED     --WantShutDown, leads nothing-->         SHUTDOWN_NOW
    CONTROLLED_SHUTDOWN --leads nothing and every active
                          broker applied its shutdown record--> SHUTDOWN_NOW
    any unfenced state --session expired (tick)-->        FENCED

The catch-up offset is Kafka's (the offset of the broker's RegisterBrokerRecord) raised
to the largest lowest-acknowledged offset already handed out, so a broker joining the
active set never pulls the seed's value backwards. ``IsCaughtUp`` answers the same test.

Leadership (Kafka's ``ReplicationControlManager``, :mod:`.replication_control`): every
batch that fences a broker (heartbeat with WantFence, session expiry, a new incarnation
replacing an unfenced registration), puts it in controlled shutdown or unregisters it
also takes it out of every ISR (but the last member) and moves the leadership of every
partition it leads to the next ISR member in replica order, or to nobody (leader -1;
leader epoch + 1 either way); the batch that unfences a broker elects leaders for the
leaderless partitions, so those whose ISR holds it get it back. So a broker in
controlled shutdown leads nothing once its record is applied, and is told to shut down
once every active broker has applied that record (Kafka's test).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.broker_heartbeat_response import BrokerHeartbeatResponse
from .broker_image import BrokerRegistration
from .broker_records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    UNFENCE,
    BrokerRegistrationChangeRecord,
    Endpoint,
    Feature,
    NoOpRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from .heartbeats import BrokerHeartbeats
from .image import MetadataImage, TopicImage
from .placement import usable_brokers
from .records import MetadataRecord
from .replication_control import (
    MAX_ELECTIONS_PER_RUN,
    PartitionChanges,
    add_broker_records,
    balance_leaders,
    elect_unclean_leaders,
    imbalanced,
    leaderless_unclean,
    remove_broker_records,
    unclean_election_enabled,
)


@dataclass(frozen=True)
class LifecycleConfig:
    """Kafka's names: ``broker.session.timeout.ms`` (9000),
    ``metadata.max.idle.interval.ms`` (500; 0 disables NoOp records)."""
    session_timeout_ms: int = 9000
    max_idle_interval_ms: int = 500

    @classmethod
    def from_configs(cls, values: Mapping[str, Any]) -> LifecycleConfig:
        """From :func:`hightide.cluster.settings.validate_cluster_configs`' result."""
        return cls(values["broker.session.timeout.ms"], values["metadata.max.idle.interval.ms"])


@dataclass(frozen=True)
class ElectionConfig:
    """The controller's election settings, Kafka's names: ``unclean.leader.election.enable``
    (false; topics may override it), ``auto.leader.rebalance.enable`` (true),
    ``leader.imbalance.check.interval.seconds`` (300), ``unclean.leader.election.interval.ms``
    (300000)."""
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    unclean_leader_election_interval_ms: int = 300_000

    @classmethod
    def from_config(cls, config: Any) -> ElectionConfig:
        """From a broker config (anything answering ``config[name]``)."""
        return cls(bool(config["unclean.leader.election.enable"]), bool(config["auto.leader.rebalance.enable"]),
                   int(config["leader.imbalance.check.interval.seconds"]) * 1000,
                   int(config["unclean.leader.election.interval.ms"]))


class BrokerState(Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW)


@dataclass(frozen=True)
class Registration:
    """A decoded BrokerRegistrationRequest (the fields the controller uses)."""
    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...] = ()
    features: tuple[Feature, ...] = ()
    rack: str | None = None
    log_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class RegistrationReply:
    """BrokerRegistrationResponse fields. ``message`` is for the controller's log: neither
    lifecycle response has an error-message field."""
    error_code: ErrorCode = ErrorCode.none
    broker_epoch: int = -1
    message: str | None = None


@dataclass(frozen=True)
class Heartbeat:
    """A decoded BrokerHeartbeatRequest: ``current_metadata_offset`` is the offset of the
    last metadata record the broker has applied."""
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True)
class HeartbeatReply:
    """BrokerHeartbeatResponse fields; ``lowest_acknowledged_offset`` is hightide's tagged
    extension (seed 004), -1 when unknown and on errors."""
    error_code: ErrorCode = ErrorCode.none
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    lowest_acknowledged_offset: int = -1
    message: str | None = None


@dataclass
class BrokerLifecycle:
    """The controller's broker-lifecycle core. One instance per active controller."""

    cluster_id: str
    config: LifecycleConfig = field(default_factory=LifecycleConfig)
    finalized_features: Mapping[str, int] = field(default_factory=dict)
    #: The controller's election settings as of now (read at every use: dynamic broker
    #: configs may change them).
    elections: Callable[[], ElectionConfig] = ElectionConfig

    def __post_init__(self) -> None:
        self.heartbeats = BrokerHeartbeats(self.config.session_timeout_ms)
        #: When the next unclean election / preferred-leader balancing runs (None: not due).
        self._unclean_due: int | None = None
        self._balance_due: int | None = None

    def _removed(self, image: MetadataImage, broker_id: int,
                 changes: PartitionChanges | None = None) -> list[MetadataRecord]:
        """The partition changes of ``broker_id`` leaving (fenced, shutting down, gone)."""
        changes = changes if changes is not None else PartitionChanges(image, usable_brokers(image))
        return list(remove_broker_records(changes, broker_id, self._unclean(image)))

    def _unclean(self, image: MetadataImage) -> Callable[[TopicImage], bool]:
        default = self.elections().unclean_leader_election_enable
        return lambda topic: unclean_election_enabled(image, topic, default)

    def features(self, image: MetadataImage) -> dict[str, int]:
        """The finalized feature levels: the image's (FeatureLevelRecord) over the
        constructor's ``finalized_features``."""
        return {**self.finalized_features, **image.features}

    # -- BrokerRegistration (62) --------------------------------------------------------
    def register(self, image: MetadataImage, req: Registration, now_ms: int,
                 next_offset: int) -> tuple[RegistrationReply, list[MetadataRecord]]:
        """Register a broker. A new incarnation gets epoch = the offset its
        RegisterBrokerRecord will have (``next_offset``, or after the leaderless records
        when it replaces an unfenced registration whose session expired: the partitions
        that one led go leaderless first, in the same batch) and starts fenced; the same
        incarnation again amends the registration and keeps epoch and state. Errors:
        INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION (another incarnation holds
        a live session: unfenced and not expired), INVALID_REGISTRATION (duplicate
        listener names), UNSUPPORTED_VERSION (a finalized feature level outside the
        broker's supported range)."""
        error = self._registration_error(image, req, now_ms)
        if error is not None:
            return error, []
        existing = image.brokers.get(req.broker_id)
        same = existing is not None and existing.incarnation_id == req.incarnation_id
        replaced = [] if existing is None or same or existing.fenced else self._removed(image, req.broker_id)
        epoch = existing.epoch if same and existing is not None else next_offset + len(replaced)
        record = RegisterBrokerRecord(
            req.broker_id, str(req.incarnation_id), epoch, req.listeners, req.features, req.rack,
            fenced=existing.fenced if same and existing is not None else True,
            in_controlled_shutdown=existing.in_controlled_shutdown if same and existing is not None else False,
            log_dirs=req.log_dirs)
        if same and existing is not None:
            self.heartbeats.session(existing, now_ms).last_contact_ms = now_ms
        # A new incarnation's session starts when its record is applied (the old one's
        # session is kept until then, so a failed append leaves the old registration as
        # it was); it is fenced, so it cannot expire before its first heartbeat.
        return RegistrationReply(ErrorCode.none, epoch), [*replaced, record]

    def _registration_error(self, image: MetadataImage, req: Registration, now_ms: int) -> RegistrationReply | None:
        if req.cluster_id != self.cluster_id:
            return RegistrationReply(ErrorCode.inconsistent_cluster_id, -1,
                                     f"Expected cluster ID {self.cluster_id}, but got cluster ID {req.cluster_id}")
        if req.broker_id < 0:
            return RegistrationReply(ErrorCode.invalid_registration, -1, f"Invalid broker id {req.broker_id}")
        existing = image.brokers.get(req.broker_id)
        if existing is not None and existing.incarnation_id != req.incarnation_id \
                and self.heartbeats.has_valid_session(existing, now_ms):
            return RegistrationReply(ErrorCode.duplicate_broker_registration, -1,
                                     "Another broker is registered with that broker id.")
        names = [e[0] for e in req.listeners]
        if len(set(names)) != len(names):
            return RegistrationReply(ErrorCode.invalid_registration, -1, "Duplicate listener name in request")
        supported = {f[0]: (f[1], f[2]) for f in req.features}
        for name, level in sorted(self.features(image).items()):
            lo, hi = supported.get(name, (0, 0))
            if not lo <= level <= hi:
                return RegistrationReply(ErrorCode.unsupported_version, -1,
                                         f"Unable to register because the broker does not support finalized version "
                                         f"{level} of {name}. The broker wants a version between {lo} and {hi}, "
                                         f"inclusive.")
        return None

    # -- UnregisterBroker (64) ----------------------------------------------------------
    def unregister(self, image: MetadataImage, broker_id: int) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
        """Remove a broker's registration: BROKER_ID_NOT_REGISTERED if there is none."""
        reg = image.brokers.get(broker_id)
        if reg is None:
            return ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered", []
        self.heartbeats.remove(broker_id)
        return ErrorCode.none, None, [*self._removed(image, broker_id), UnregisterBrokerRecord(broker_id, reg.epoch)]

    # -- BrokerHeartbeat (63) -----------------------------------------------------------
    def heartbeat(self, image: MetadataImage, req: Heartbeat, now_ms: int, next_offset: int,
                  committed_offset: int) -> tuple[HeartbeatReply, list[MetadataRecord]]:
        """Process one heartbeat: refresh the session, record the broker's applied offset,
        decide its next state and return the records that move it there. STALE_BROKER_EPOCH
        when the broker is not registered or ``broker_epoch`` is not its current epoch
        (Kafka answers both with it; nothing changes)."""
        reg = image.brokers.get(req.broker_id)
        if reg is None or reg.epoch != req.broker_epoch:
            msg = (f"No broker registration found for broker id {req.broker_id}" if reg is None else
                   f"Expected broker epoch {reg.epoch}, but got broker epoch {req.broker_epoch}")
            return HeartbeatReply(ErrorCode.stale_broker_epoch, message=msg), []
        session = self.heartbeats.session(reg, now_ms)
        session.last_contact_ms = now_ms
        session.acknowledge(req.current_metadata_offset, committed_offset)
        catch_up = self.catch_up_offset(reg)
        current, nxt = self._next_state(image, reg, req, catch_up, now_ms)
        records = self._transition_records(reg, current, nxt) + self._leadership_records(image, reg, current, nxt)
        if nxt.fenced:
            session.shutdown_offset = -1
            session.shut_down = session.shut_down or nxt is BrokerState.SHUTDOWN_NOW
        elif nxt is BrokerState.CONTROLLED_SHUTDOWN and current is not nxt:
            session.shutdown_offset = next_offset + len(records) - 1  # the batch's end offset, as Kafka
        active = nxt is BrokerState.UNFENCED and not reg.in_controlled_shutdown  # as the image will say
        lowest = self.heartbeats.publish(self.heartbeats.lowest_acknowledged(
            image.brokers.values(), now_ms, (reg.broker_id, active)))
        return HeartbeatReply(ErrorCode.none, session.acked_offset >= catch_up, nxt.fenced,
                              nxt is BrokerState.SHUTDOWN_NOW, lowest), records

    def catch_up_offset(self, reg: BrokerRegistration) -> int:
        """The offset a broker must have applied to be unfenced (and IsCaughtUp): its
        registration record's offset, raised to the largest lowest-acknowledged offset
        already handed out."""
        return max(reg.registration_offset, self.heartbeats.floor)

    def _current_state(self, reg: BrokerRegistration) -> BrokerState:
        """Controlled shutdown needs both the logged state and this controller's shutdown
        offset; without the offset (a new controller, or a failed append) the broker is
        treated as unfenced and re-enters controlled shutdown on its next WantShutDown."""
        if reg.fenced:
            return BrokerState.FENCED
        s = self.heartbeats.sessions.get(reg.broker_id)
        if reg.in_controlled_shutdown and s is not None and s.epoch == reg.epoch and s.shutdown_offset >= 0:
            return BrokerState.CONTROLLED_SHUTDOWN
        return BrokerState.UNFENCED

    def _next_state(self, image: MetadataImage, reg: BrokerRegistration, req: Heartbeat, catch_up: int,
                    now_ms: int) -> tuple[BrokerState, BrokerState]:
        current = self._current_state(reg)
        acked = self.heartbeats.session(reg, now_ms).acked_offset
        if current is BrokerState.FENCED:
            if req.want_shut_down:
                return current, BrokerState.SHUTDOWN_NOW
            session = self.heartbeats.session(reg, now_ms)
            if not req.want_fence and acked >= catch_up and not reg.in_controlled_shutdown and not session.shut_down:
                return current, BrokerState.UNFENCED
            return current, BrokerState.FENCED
        if current is BrokerState.UNFENCED:
            if req.want_fence:
                return current, BrokerState.SHUTDOWN_NOW if req.want_shut_down else BrokerState.FENCED
            if req.want_shut_down:
                return current, (BrokerState.CONTROLLED_SHUTDOWN if leads_partitions(image, reg.broker_id)
                                 else BrokerState.SHUTDOWN_NOW)
            return current, BrokerState.UNFENCED
        # CONTROLLED_SHUTDOWN: done once it leads nothing and every active broker has
        # applied the record that started it (Kafka's lowestActiveOffset test).
        if leads_partitions(image, reg.broker_id):
            return current, current
        lowest_active = self.heartbeats.lowest_acknowledged(image.brokers.values(), now_ms)
        shutdown_offset = self.heartbeats.sessions[reg.broker_id].shutdown_offset
        if not _any_other_active(self.heartbeats, image, reg.broker_id) or shutdown_offset <= lowest_active:
            return current, BrokerState.SHUTDOWN_NOW
        return current, current

    def _leadership_records(self, image: MetadataImage, reg: BrokerRegistration, current: BrokerState,
                            nxt: BrokerState) -> list[MetadataRecord]:
        """Partition leadership and ISRs moving with a state change (see the module doc)."""
        if nxt is BrokerState.UNFENCED and current is BrokerState.FENCED:
            changes = PartitionChanges(image, usable_brokers(image))
            return list(add_broker_records(changes, reg.broker_id, self._unclean(image)))
        if nxt is BrokerState.CONTROLLED_SHUTDOWN or (nxt.fenced and not reg.fenced):
            return self._removed(image, reg.broker_id)
        return []

    @staticmethod
    def _transition_records(reg: BrokerRegistration, current: BrokerState,
                            nxt: BrokerState) -> list[MetadataRecord]:
        if nxt is current:
            return []
        if nxt.fenced:
            return [] if reg.fenced else [BrokerRegistrationChangeRecord(reg.broker_id, reg.epoch, fenced=FENCE)]
        if nxt is BrokerState.UNFENCED:
            return [BrokerRegistrationChangeRecord(reg.broker_id, reg.epoch, fenced=UNFENCE)]
        if reg.in_controlled_shutdown:  # already logged (e.g. before a controller change)
            return []
        return [BrokerRegistrationChangeRecord(reg.broker_id, reg.epoch, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN)]

    # -- metadata Fetch as acknowledgement (optional) -------------------------------------
    def observe_fetch(self, image: MetadataImage, broker_id: int, fetch_offset: int, now_ms: int,
                      committed_offset: int, broker_epoch: int | None = None) -> None:
        """Count a broker's metadata Fetch at ``fetch_offset`` as acknowledging every record
        below it (``fetch_offset - 1``), capped at ``committed_offset``. Sound only if the
        broker applies a fetched batch to its image before it sends its next Fetch (see
        docs/cluster.md); it does not refresh the session (only heartbeats do, as in
        Kafka). ``broker_epoch`` (Fetch v15+ ReplicaEpoch) guards against a Fetch from an
        older incarnation; None skips that check. Unknown brokers are ignored."""
        reg = image.brokers.get(broker_id)
        if reg is None or (broker_epoch is not None and broker_epoch != reg.epoch):
            return
        self.heartbeats.session(reg, now_ms).acknowledge(fetch_offset - 1, committed_offset)

    def lowest_acknowledged_offset(self, image: MetadataImage, now_ms: int) -> int:
        """The seed's value as of now (what the next heartbeat response would carry)."""
        return self.heartbeats.publish(self.heartbeats.lowest_acknowledged(image.brokers.values(), now_ms))

    # -- timers -------------------------------------------------------------------------
    def fence_expired(self, image: MetadataImage, now_ms: int) -> list[MetadataRecord]:
        """Records fencing every unfenced broker whose session has expired, each followed
        by the records making its partitions leaderless. (Kafka fences
        one stale broker per event and reschedules at once; this fences them in one
        batch.)"""
        records: list[MetadataRecord] = []
        changes = PartitionChanges(image, usable_brokers(image))  # one view: several may expire together
        for reg in sorted(image.brokers.values(), key=lambda r: r.broker_id):
            if reg.fenced:
                continue
            session = self.heartbeats.session(reg, now_ms)
            if self.heartbeats.expired(session, now_ms):
                session.shutdown_offset = -1
                records.append(BrokerRegistrationChangeRecord(reg.broker_id, reg.epoch, fenced=FENCE))
                records += self._removed(image, reg.broker_id, changes)
        return records

    def election_records(self, image: MetadataImage, now_ms: int) -> list[MetadataRecord]:
        """Kafka's periodic elections: ``unclean.leader.election.interval.ms`` after
        leaderless partitions of topics allowing unclean election are first seen, elect
        them a leader outside the ISR; ``leader.imbalance.check.interval.seconds`` after
        partitions not led by their preferred replica are first seen (with
        ``auto.leader.rebalance.enable``), give them back to it where it is in the ISR.
        Either runs again at once when it hit :data:`MAX_ELECTIONS_PER_RUN`."""
        cfg = self.elections()
        unclean = self._unclean(image)
        changes = PartitionChanges(image, usable_brokers(image))
        records: list[MetadataRecord] = []
        if not leaderless_unclean(image, unclean):
            self._unclean_due = None
        elif self._unclean_due is None:
            self._unclean_due = now_ms + cfg.unclean_leader_election_interval_ms
        elif now_ms >= self._unclean_due:
            done = elect_unclean_leaders(changes, unclean)
            self._unclean_due = now_ms if len(done) >= MAX_ELECTIONS_PER_RUN else None
            records += done
        if not cfg.auto_leader_rebalance_enable or not imbalanced(image):
            self._balance_due = None
        elif self._balance_due is None:
            self._balance_due = now_ms + cfg.leader_imbalance_check_interval_ms
        elif now_ms >= self._balance_due:
            done = balance_leaders(changes)
            self._balance_due = now_ms if len(done) >= MAX_ELECTIONS_PER_RUN else None
            records += done
        return records

    def _election_deadlines(self, image: MetadataImage, last_append_ms: int) -> list[int]:
        """When :meth:`election_records` has work: its due times, or at once when an
        election may be needed and is not scheduled yet (the timer's next run schedules it)."""
        cfg = self.elections()
        out = [t for t in (self._unclean_due, self._balance_due) if t is not None]
        if self._unclean_due is None and leaderless_unclean(image, self._unclean(image)):
            out.append(last_append_ms)
        if self._balance_due is None and cfg.auto_leader_rebalance_enable and imbalanced(image):
            out.append(last_append_ms)
        return out

    def idle_records(self, now_ms: int, last_append_ms: int) -> list[MetadataRecord]:
        """A NoOpRecord when nothing has been appended for ``metadata.max.idle.interval.ms``
        (0 disables), so offsets keep moving and brokers keep proving they follow."""
        interval = self.config.max_idle_interval_ms
        return [NoOpRecord()] if interval > 0 and now_ms - last_append_ms >= interval else []

    def next_deadline_ms(self, image: MetadataImage, last_append_ms: int) -> int | None:
        """When :meth:`fence_expired`, :meth:`election_records` or :meth:`idle_records`
        next has work: the earliest session expiry, election or idle deadline; None when
        none can come due."""
        times = [t for t in (self.heartbeats.next_expiry_ms(image.brokers.values()),) if t is not None]
        times += self._election_deadlines(image, last_append_ms)
        if self.config.max_idle_interval_ms > 0:
            times.append(last_append_ms + self.config.max_idle_interval_ms)
        return min(times, default=None)


def heartbeat_response(reply: HeartbeatReply) -> BrokerHeartbeatResponse:
    """The wire form of ``reply`` for :func:`~hightide.protocol.broker_heartbeat_response.
    encode_broker_heartbeat_response`: the LowestAcknowledgedOffset tag is always sent
    (-1 when unknown), so a hightide broker can tell "unknown" from "old controller"."""
    return BrokerHeartbeatResponse(int(reply.error_code), reply.is_caught_up, reply.is_fenced,
                                   reply.should_shut_down, 0, reply.lowest_acknowledged_offset)


def leads_partitions(image: MetadataImage, broker_id: int) -> bool:
    """True if the image names ``broker_id`` leader of any partition."""
    return any(p.leader == broker_id for t in image.topics.values() for p in t.partitions.values())


def _any_other_active(heartbeats: BrokerHeartbeats, image: MetadataImage, broker_id: int) -> bool:
    return any(heartbeats.is_active(r) for r in image.brokers.values() if r.broker_id != broker_id)


__all__: Sequence[str] = ("BrokerLifecycle", "LifecycleConfig", "ElectionConfig", "BrokerState", "Registration",
                          "RegistrationReply", "Heartbeat", "HeartbeatReply", "heartbeat_response",
                          "leads_partitions")
