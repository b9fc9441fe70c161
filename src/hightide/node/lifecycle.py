"""The broker's side of the broker lifecycle (Kafka's ``BrokerLifecycleManager``):
register with the controller, heartbeat, ask to be unfenced once caught up, controlled
shutdown, and keep the seed-004 value (the lowest acknowledged metadata offset).

Theory of operation
-------------------
:class:`LifecycleCore` is sans-IO: no sockets, no asyncio, time is an argument. The
shell (:class:`BrokerLifecycleManager`) asks it :meth:`~LifecycleCore.next_request`
(what to send, or when to ask again), sends that one request (never two at once), and
reports the outcome with ``on_*``. States::

    REGISTERING --registered (epoch)--> RUNNING --ShouldShutDown--> SHUT_DOWN
         ^                                 |
         +---- STALE_BROKER_EPOCH ---------+   (the controller lost or replaced us)

* **Registration** carries a fresh incarnation id per process start; a failed attempt
  (no answer, or an error code) is retried after an exponential backoff
  (100 ms doubling, at most ``max(1 s, heartbeat interval)``).
* **Heartbeats** every ``broker.heartbeat.interval.ms`` after the last answer, with
  ``CurrentMetadataOffset`` = the offset of the last metadata record applied and
  ``WantFence`` until the metadata follower reports its first catch-up (Kafka's
  initial catch-up future). A failed heartbeat is retried after the backoff.
* **Prompt acknowledgements** (hightide, seed 004): after the follower applies a batch
  that contains content records (anything but NoOp), a heartbeat goes out at once (or,
  if one is in flight, right after its answer); and while the known lowest acknowledged
  offset (LAO) is below the applied content offset, heartbeats go after
  ``CATCH_UP_FIRST_MS``, doubling up to ``CATCH_UP_INTERVAL_MS``, instead of the normal
  interval (the other brokers apply the same batch within milliseconds; their acks reach
  the controller with their next Fetch or prompt heartbeat, the LAO reaches this broker
  only in a heartbeat answer), so a write waiting for every broker is acknowledged in
  milliseconds, not seconds.
* **Controlled shutdown**: :meth:`~LifecycleCore.begin_shutdown` makes every later
  heartbeat carry ``WantShutDown`` and go every ``CATCH_UP_INTERVAL_MS``, until an answer
  says ``ShouldShutDown`` (state SHUT_DOWN). The shell bounds the wait.
* ``STALE_BROKER_EPOCH`` (the controller does not know this registration: it restarted
  without it, or fenced and replaced it) → register again, same incarnation.
* **Controller failover**: the channel finds the active controller (NOT_CONTROLLER is
  sent again to the next voter; see :mod:`.controller_channel`), so heartbeats simply
  go on at the new one with the same broker epoch: the session survives (the new active
  controller gives every registered broker a fresh session) and nothing is registered
  again unless it answers STALE_BROKER_EPOCH. A heartbeat or registration whose
  connection was lost is simply sent again (both are idempotent).
* The LAO is kept from every successful answer that carries it (-1: unknown — the known
  value is kept, it stays true of the past; it never goes backwards here).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..client.errors import KafkaError, KafkaTimeoutError
from ..protocol.broker_heartbeat_response import BrokerHeartbeatResponse, decode_broker_heartbeat_response
from ..protocol.errors import ErrorCode
from .controller_channel import ControllerChannel, ControllerUnavailable
from ..aio.clock import SYSTEM_CLOCK, Clock, wait_event_on
from ..aio.tasks import STOP_WAIT_S, cancel_and_wait

if TYPE_CHECKING:
    from ..cluster.settings import ClusterSettings

log = logging.getLogger("hightide.broker_lifecycle")

CATCH_UP_FIRST_MS = 5  # the first catch-up heartbeat after content is applied ...
CATCH_UP_INTERVAL_MS = 50  # ... doubling up to this while the LAO is below it
INITIAL_BACKOFF_MS = 100
REGISTRATION_VERSION_MAX = 4
HEARTBEAT_VERSION_MAX = 2


class LifecycleState(enum.Enum):
    REGISTERING = "registering"
    RUNNING = "running"
    SHUT_DOWN = "shut_down"


@dataclass(frozen=True)
class Register:
    """Send a BrokerRegistration with this incarnation id."""
    incarnation_id: uuid.UUID


@dataclass(frozen=True)
class Heartbeat:
    """Send a BrokerHeartbeat with these fields."""
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool


@dataclass(frozen=True)
class Wait:
    """Nothing to send before ``until_ms``."""
    until_ms: int


Action = Register | Heartbeat | Wait


class LifecycleCore:
    """The broker lifecycle as a pure state machine (see the module doc)."""

    def __init__(self, heartbeat_interval_ms: int, *, incarnation_id: uuid.UUID | None = None,
                 catch_up_interval_ms: int = CATCH_UP_INTERVAL_MS, catch_up_first_ms: int = CATCH_UP_FIRST_MS) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.catch_up_interval_ms = min(catch_up_interval_ms, heartbeat_interval_ms)
        self.catch_up_first_ms = min(catch_up_first_ms, self.catch_up_interval_ms)
        self._catch_up_ms = self.catch_up_first_ms  # the next catch-up delay (doubles)
        self.max_backoff_ms = max(1000, heartbeat_interval_ms)
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.state = LifecycleState.REGISTERING
        self.broker_epoch = -1
        self.is_fenced = True
        self.is_caught_up = False  # the controller's IsCaughtUp
        self.ready_to_unfence = False  # the follower caught up once (WantFence until then)
        self.shutting_down = False
        self.applied_offset = -1  # last metadata record applied here
        self.applied_content_offset = -1  # last applied record that is not a NoOp
        self.lowest_acknowledged = -1  # the LAO as last told (never lowered here)
        self._in_flight = False
        self._due_ms = 0  # next request due at
        self._prompt = False  # a prompt heartbeat is owed once the in-flight one answers
        self._backoff_ms = 0

    # -- what to send --------------------------------------------------------------
    def next_request(self, now_ms: int) -> Action | None:
        """The request to send now (the caller sends it and reports with ``on_*``), a
        :class:`Wait`, or None while a request is in flight or after SHUT_DOWN."""
        if self._in_flight or self.state is LifecycleState.SHUT_DOWN:
            return None
        if now_ms < self._due_ms:
            return Wait(self._due_ms)
        self._in_flight = True
        self._prompt = False
        if self.state is LifecycleState.REGISTERING:
            return Register(self.incarnation_id)
        return Heartbeat(self.broker_epoch, self.applied_offset, not self.ready_to_unfence, self.shutting_down)

    # -- outcomes ------------------------------------------------------------------
    def on_registered(self, error: int, broker_epoch: int, now_ms: int) -> None:
        """The BrokerRegistration answer (error code, epoch)."""
        self._in_flight = False
        if self.state is not LifecycleState.REGISTERING:
            return
        if error != ErrorCode.none:
            self._fail(now_ms)
            return
        self.state = LifecycleState.RUNNING
        self.broker_epoch = broker_epoch
        self.is_fenced = True
        self._backoff_ms = 0
        self._due_ms = now_ms  # the first heartbeat at once

    def on_heartbeat(self, resp: BrokerHeartbeatResponse, now_ms: int) -> None:
        """A decoded BrokerHeartbeat answer."""
        self._in_flight = False
        if self.state is not LifecycleState.RUNNING:
            return
        if resp.error_code == ErrorCode.stale_broker_epoch:
            self.state = LifecycleState.REGISTERING
            self.broker_epoch = -1
            self.is_fenced = True
            self._due_ms = now_ms
            return
        if resp.error_code != ErrorCode.none:
            self._fail(now_ms)
            return
        self._backoff_ms = 0
        self.is_fenced = resp.is_fenced
        self.is_caught_up = resp.is_caught_up
        lao = resp.lowest_acknowledged_offset
        if lao is not None and lao > self.lowest_acknowledged:
            self.lowest_acknowledged = lao
        if self.shutting_down and resp.should_shut_down:
            self.state = LifecycleState.SHUT_DOWN
            return
        self._due_ms = now_ms + self._interval()
        if self._prompt:
            self._due_ms = now_ms

    def on_failure(self, now_ms: int) -> None:
        """The request in flight got no answer (connection lost, timeout)."""
        self._in_flight = False
        self._fail(now_ms)

    def on_applied(self, applied_offset: int, content_offset: int, now_ms: int) -> None:
        """The follower applied records up to ``applied_offset``; the last one that is
        not a NoOp is at ``content_offset``. A new content record asks for a prompt
        heartbeat."""
        new_content = content_offset > self.applied_content_offset
        self.applied_offset = max(self.applied_offset, applied_offset)
        self.applied_content_offset = max(self.applied_content_offset, content_offset)
        if new_content:
            self._catch_up_ms = self.catch_up_first_ms
        if new_content and self.state is LifecycleState.RUNNING:
            if self._in_flight:
                self._prompt = True
            elif self._backoff_ms == 0:
                self._due_ms = min(self._due_ms, now_ms)

    def on_caught_up(self, now_ms: int) -> None:
        """The follower caught up with the controller's log for the first time: stop
        asking to stay fenced (and say so at once)."""
        if not self.ready_to_unfence:
            self.ready_to_unfence = True
            if self.state is LifecycleState.RUNNING and self._backoff_ms == 0:
                self._due_ms = min(self._due_ms, now_ms)

    def on_reset(self) -> None:
        """The local metadata copy was truncated (it diverged from the controller's): the
        applied offsets start again from what the resync applies."""
        self.applied_offset = -1
        self.applied_content_offset = -1

    def begin_shutdown(self, now_ms: int) -> None:
        """Ask for a controlled shutdown (every later heartbeat has WantShutDown)."""
        self.shutting_down = True
        if self.state is LifecycleState.REGISTERING:  # never registered: nothing to shut down
            self.state = LifecycleState.SHUT_DOWN
        elif not self._in_flight:
            self._due_ms = now_ms
        else:
            self._prompt = True

    # -- internals -------------------------------------------------------------------
    def _interval(self) -> int:
        if self.shutting_down:
            return self.catch_up_interval_ms
        if self.lowest_acknowledged < self.applied_content_offset:  # the others are applying it now
            step, self._catch_up_ms = self._catch_up_ms, min(self.catch_up_interval_ms, self._catch_up_ms * 2)
            return step
        return self.heartbeat_interval_ms

    def _fail(self, now_ms: int) -> None:
        self._backoff_ms = min(self.max_backoff_ms, max(INITIAL_BACKOFF_MS, self._backoff_ms * 2))
        self._due_ms = now_ms + self._backoff_ms

    @property
    def lao_covers_content(self) -> bool:
        return self.lowest_acknowledged >= self.applied_content_offset


class BrokerLifecycleManager:
    """The asyncio shell around :class:`LifecycleCore`: one task sends what the core asks
    for over ``channel``. ``on_lao`` is called (on the loop) whenever the known lowest
    acknowledged offset rises; ``registration`` returns the BrokerRegistration body fields
    besides ids (listeners, features, rack). Every time the core is given, and the wait
    for the next request it schedules, is on ``clock``."""

    def __init__(self, settings: ClusterSettings, channel: ControllerChannel, cluster_id: Callable[[], str],
                 registration: Callable[[], dict[str, Any]], on_lao: Callable[[int], None],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.settings = settings
        self.clock = clock
        self.channel = channel
        self.core = LifecycleCore(settings.heartbeat_interval_ms)
        self._cluster_id = cluster_id
        self._registration = registration
        self._on_lao = on_lao
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._was_fenced: bool | None = None
        self._controller: tuple[str, int] | None = None  # where the last answer came from
        #: A heartbeat unanswered this long means the controller is stuck or gone: half
        #: the session timeout, so the broker reconnects well before it would be fenced.
        self._timeout_s = max(1.0, settings.session_timeout_ms / 2000)
        self.registered = asyncio.Event()
        self.unfenced = asyncio.Event()
        #: Until when (monotonic s) the controller surely still counts this broker in the
        #: lowest acknowledged offset (see :meth:`counted`).
        self._counted_until = -math.inf
        #: Called with the controller's address when the active controller refuses the
        #: registration with INCONSISTENT_CLUSTER_ID (it belongs to another cluster).
        self.on_foreign_cluster: Callable[[str], None] = lambda where: None

    def _now(self) -> int:
        """Milliseconds on the monotonic clock: the core's time (heartbeat interval,
        backoffs), as Kafka's BrokerLifecycleManager schedules on ``time.nanoseconds()``:
        a step of the wall clock never holds a heartbeat back."""
        return int(self.clock.monotonic() * 1000)

    @property
    def broker_epoch(self) -> int:
        return self.core.broker_epoch

    @property
    def lowest_acknowledged(self) -> int:
        return self.core.lowest_acknowledged

    def counted(self) -> bool:
        """True while the active controller surely counts this broker among those whose
        applied offset makes the lowest acknowledged offset (seed 004): its last answered
        heartbeat said unfenced (or in controlled shutdown, whose heartbeats come every
        catch-up interval), and that heartbeat was sent less than
        ``broker.session.timeout.ms`` ago. The controller times the session from when it
        received the heartbeat, on its monotonic clock, so it cannot have fenced this
        broker before then (a lease). A broker cut off from the controllers stops being
        counted here at most when the controller stops counting it: its reads then wait
        for the lease to come back instead of answering from an image the others may
        have passed."""
        return self.clock.monotonic() < self._counted_until

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-lifecycle")

    def poke(self) -> None:
        """Re-evaluate now (call after feeding the core)."""
        self._wake.set()

    def applied(self, applied_offset: int, content_offset: int) -> None:
        self.core.on_applied(applied_offset, content_offset, self._now())
        self.poke()

    def caught_up(self) -> None:
        self.core.on_caught_up(self._now())
        self.poke()

    async def shutdown(self, timeout_s: float, stop_wait_s: float = STOP_WAIT_S) -> bool:
        """Controlled shutdown: heartbeat with WantShutDown until the controller answers
        ShouldShutDown or ``timeout_s`` passes; True if it did. Stops the task (waited
        for up to ``stop_wait_s``)."""
        self.core.begin_shutdown(self._now())
        self.poke()
        deadline = self.clock.monotonic() + timeout_s
        while self.core.state is not LifecycleState.SHUT_DOWN and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.02)
        done = self.core.state is LifecycleState.SHUT_DOWN
        if not done:
            log.warning("controlled shutdown: the controller did not answer ShouldShutDown within %.1f s; "
                        "stopping anyway (the controller fences this broker when its session expires)", timeout_s)
        await self.close(stop_wait_s)
        return done

    async def close(self, stop_wait_s: float = STOP_WAIT_S) -> None:
        """Stop the task (waited for up to ``stop_wait_s``; a warning if it does not end)."""
        task, self._task = self._task, None
        await cancel_and_wait(task, stop_wait_s)

    async def _run(self) -> None:
        while True:
            action = self.core.next_request(self._now())
            if action is None and self.core.state is LifecycleState.SHUT_DOWN:
                return
            if isinstance(action, Register):
                await self._register(action)
            elif isinstance(action, Heartbeat):
                await self._heartbeat(action)
            else:
                delay = 1.0 if action is None else max(0.0, (action.until_ms - self._now()) / 1000)
                self._wake.clear()
                await wait_event_on(self.clock, self._wake, delay)

    async def _register(self, action: Register) -> None:
        body = {"broker_id": self.settings.node_id, "cluster_id": self._cluster_id(),
                "incarnation_id": action.incarnation_id, **self._registration()}
        try:
            resp = await self.channel.request(
                62, lambda c: c.pick_version(62, REGISTRATION_VERSION_MAX), body)
        except (ControllerUnavailable, KafkaError) as exc:
            self.core.on_failure(self._now())
            log.debug("registration failed: %s", exc)
            return
        if resp.error_code == ErrorCode.inconsistent_cluster_id:
            where = self.channel.address
            self.on_foreign_cluster(f"{where[0]}:{where[1]}" if where else "the active controller")
        elif resp.error_code != ErrorCode.none:
            log.warning("the controller refused the registration of broker %d: %s (retrying)",
                        self.settings.node_id, ErrorCode(resp.error_code).name.upper())
        else:
            log.info("broker %d registered with the controller: epoch %d, incarnation %s", self.settings.node_id,
                     resp.broker_epoch, action.incarnation_id)
            self.registered.set()
        self.core.on_registered(resp.error_code, resp.broker_epoch, self._now())

    async def _heartbeat(self, action: Heartbeat) -> None:
        sent = self.clock.monotonic()
        body = {"broker_id": self.settings.node_id, "broker_epoch": action.broker_epoch,
                "current_metadata_offset": action.current_metadata_offset, "want_fence": action.want_fence,
                "want_shut_down": action.want_shut_down}
        version = HEARTBEAT_VERSION_MAX
        try:
            conn = await self.channel.connection()
            version = conn.pick_version(63, HEARTBEAT_VERSION_MAX)
            resp: BrokerHeartbeatResponse = await self.channel.request(
                63, version, body, decoder=lambda frame: decode_broker_heartbeat_response(version, frame)[1],
                timeout_s=self._timeout_s)
        except (ControllerUnavailable, KafkaError) as exc:
            self.core.on_failure(self._now())
            if isinstance(exc, KafkaTimeoutError):  # a paused or stuck controller: reconnect
                log.warning("the controller did not answer a heartbeat within %.1f s; reconnecting", self._timeout_s)
                self.channel.reset()
            log.debug("heartbeat failed: %s", exc)
            return
        self._note_controller()
        before, was_counted = self.core.lowest_acknowledged, self.counted()
        self.core.on_heartbeat(resp, self._now())
        if resp.error_code == ErrorCode.none and (not resp.is_fenced or self.core.shutting_down):
            self._counted_until = max(self._counted_until, sent + self.settings.session_timeout_ms / 1000)
        elif resp.error_code in (ErrorCode.none, ErrorCode.stale_broker_epoch):  # fenced, or not registered
            self._counted_until = -math.inf
        if resp.error_code == ErrorCode.stale_broker_epoch:
            log.warning("the controller does not know broker epoch %d (STALE_BROKER_EPOCH): registering again",
                        action.broker_epoch)
            self.registered.clear()
            self.unfenced.clear()
            self._was_fenced = None
        elif resp.error_code != ErrorCode.none:
            log.warning("heartbeat answered %s (retrying)", ErrorCode(resp.error_code).name.upper())
        else:
            self._note_fencing(resp.is_fenced)
        if self.core.lowest_acknowledged > before or (self.counted() and not was_counted):
            self._on_lao(self.core.lowest_acknowledged)

    def _note_controller(self) -> None:
        where = self.channel.address
        if where is None or where == self._controller:
            return
        if self._controller is not None:
            log.info("broker %d heartbeats to the active controller at %s:%d now (was %s:%d), epoch %d",
                     self.settings.node_id, where[0], where[1], self._controller[0], self._controller[1],
                     self.core.broker_epoch)
        self._controller = where

    def _note_fencing(self, fenced: bool) -> None:
        if fenced == self._was_fenced:
            return
        if not fenced:
            log.info("broker %d is unfenced (epoch %d)", self.settings.node_id, self.core.broker_epoch)
            self.unfenced.set()
        elif self._was_fenced is False and self.core.shutting_down:
            log.info("broker %d is fenced for its controlled shutdown", self.settings.node_id)
            self.unfenced.clear()
        elif self._was_fenced is False:
            log.warning("broker %d was fenced by the controller (epoch %d); heartbeating on", self.settings.node_id,
                        self.core.broker_epoch)
            self.unfenced.clear()
        self._was_fenced = fenced
