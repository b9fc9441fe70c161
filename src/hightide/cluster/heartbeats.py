"""Broker sessions and acknowledged metadata offsets: the soft (not logged) half of the
controller's broker lifecycle, in the shape of Kafka's ``BrokerHeartbeatManager``.

Theory of operation
-------------------
Registration, fencing and controlled shutdown are *logged* state: they live in the
metadata image (:mod:`hightide.cluster.broker_image`). What is not logged is kept here,
per broker and per broker epoch (a :class:`Session`):

* ``last_contact_ms`` — the time of the broker's last heartbeat; a broker whose session
  has expired (``now > last_contact_ms + broker.session.timeout.ms``) is fenced by the
  controller.
* ``acked_offset`` — the highest metadata offset the broker said it has applied in this
  session (by heartbeat, or by metadata Fetch when the shell chooses to count those),
  capped at the controller's committed offset. It never decreases within a session; a
  new registration (new epoch) starts a new session with -1 (unknown).
* ``shutdown_offset`` — Kafka's controlled-shutdown offset: the end offset of the batch
  that put the broker into controlled shutdown, -1 when not shutting down (or when this
  controller has not seen the broker ask for it yet).

A session is looked up against the image's registration: a session for another epoch
than the registered one is stale and replaced by a fresh one (``last_contact_ms`` = now,
so a broker first seen by a new controller gets a full session, as in Kafka's failover).

The *active* brokers are the registered brokers that the image shows unfenced and not in
controlled shutdown.
:meth:`BrokerHeartbeats.lowest_acknowledged` is the smallest ``acked_offset`` among them
(seed 004), -1 when there is no active broker or one of them has not reported yet.

Monotonicity. Every value :meth:`BrokerHeartbeats.publish` hands out raises ``floor``
(the largest value published so far). A broker is only admitted to the active set (by
the lifecycle core's unfencing rule) once its acked offset has reached ``floor``, and an
acked offset never decreases, so the minimum over the active set never falls below
``floor``: the published values, ignoring -1, never go backwards during the life of one
controller (one instance of this class). A new controller starts again from -1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .broker_image import BrokerRegistration


@dataclass
class Session:
    broker_id: int
    epoch: int
    last_contact_ms: int
    acked_offset: int = -1
    shutdown_offset: int = -1
    #: Told ShouldShutDown: this incarnation is never unfenced again (a delayed older
    #: heartbeat without WantShutDown must not bring it back).
    shut_down: bool = False

    def acknowledge(self, offset: int, committed_offset: int) -> None:
        """Raise ``acked_offset`` to ``offset`` capped at ``committed_offset`` (a broker
        cannot have applied a record the controller has not committed)."""
        self.acked_offset = max(self.acked_offset, min(offset, committed_offset))


class BrokerHeartbeats:
    """Sessions by broker id. Time is an argument; nothing here does IO."""

    def __init__(self, session_timeout_ms: int) -> None:
        if session_timeout_ms <= 0:
            raise ValueError("broker.session.timeout.ms must be > 0")
        self.session_timeout_ms = session_timeout_ms
        self.sessions: dict[int, Session] = {}
        #: The largest lowest-acknowledged offset published so far (-1: none yet).
        self.floor = -1

    # -- sessions ---------------------------------------------------------------------
    def session(self, reg: BrokerRegistration, now_ms: int) -> Session:
        """The session of ``reg``'s current epoch, created (contact = now) if missing or
        left over from another epoch."""
        s = self.sessions.get(reg.broker_id)
        if s is None or s.epoch != reg.epoch:
            s = self.sessions[reg.broker_id] = Session(reg.broker_id, reg.epoch, now_ms)
        return s

    def remove(self, broker_id: int) -> None:
        self.sessions.pop(broker_id, None)

    def expired(self, s: Session, now_ms: int) -> bool:
        """Kafka's rule: the session is valid while ``last_contact + timeout >= now``."""
        return now_ms > s.last_contact_ms + self.session_timeout_ms

    def has_valid_session(self, reg: BrokerRegistration, now_ms: int) -> bool:
        """True while ``reg`` is unfenced and its session has not expired (Kafka's
        ``hasValidSession``: a fenced broker has no valid session)."""
        if reg.fenced:
            return False
        s = self.sessions.get(reg.broker_id)
        if s is None or s.epoch != reg.epoch:
            return True  # first seen by this controller: it gets a full session from now
        return not self.expired(s, now_ms)

    @staticmethod
    def is_active(reg: BrokerRegistration) -> bool:
        """Unfenced and not in controlled shutdown (logged state): counted in the lowest
        acknowledged offset."""
        return not reg.fenced and not reg.in_controlled_shutdown

    # -- the lowest acknowledged offset (seed 004) ---------------------------------------
    def lowest_acknowledged(self, brokers: Iterable[BrokerRegistration], now_ms: int,
                            override: tuple[int, bool] | None = None) -> int:
        """The lowest ``acked_offset`` among the active brokers of ``brokers``; -1 when
        there is none or one has not reported an offset yet. ``override`` =
        ``(broker_id, active)`` counts that broker by the state a call is about to
        write instead of the image's. Does not publish (see :meth:`publish`)."""
        lowest: int | None = None
        for reg in brokers:
            active = override[1] if override is not None and override[0] == reg.broker_id else self.is_active(reg)
            if not active:
                continue
            acked = self.session(reg, now_ms).acked_offset
            if acked < 0:
                return -1
            lowest = acked if lowest is None else min(lowest, acked)
        return -1 if lowest is None else lowest

    def publish(self, lowest: int) -> int:
        """Record ``lowest`` as handed out (raises ``floor``); returns it."""
        self.floor = max(self.floor, lowest)
        return lowest

    def next_expiry_ms(self, brokers: Iterable[BrokerRegistration]) -> int | None:
        """The first time at which an unfenced broker's session will have expired, or
        None when no unfenced broker has a session."""
        times = [s.last_contact_ms + self.session_timeout_ms + 1 for reg in brokers if not reg.fenced
                 for s in (self.sessions.get(reg.broker_id),) if s is not None and s.epoch == reg.epoch]
        return min(times, default=None)
