"""The asyncio shell of the Raft core on a controller (Kafka's KafkaRaftClient driver):
it runs :class:`~hightide.cluster.raft.RaftCore` over the ``__cluster_metadata-0`` log.

Theory of operation
-------------------
The core is sans-IO: every event (a message received, time passing, an append asked by
the controller, an fsync done) goes through :meth:`RaftShell._step`, which returns the
core's actions; the shell carries them out **in order**, through one FIFO:

* ``PersistElection``: the quorum-state file is written (tmp + fsync + rename + dir
  fsync, on a worker thread). Until it is durable nothing queued after it runs — in
  particular no ``Send`` leaves — so a vote is never granted, nor an epoch announced,
  before the voter would remember it after a crash (Kafka's rule). Several
  PersistElections queued back to back (only RoleChanged between: a lone voter's
  candidacy and leadership in one step) are one write of the last state.
* ``Append`` / ``Truncate``: the batches are written to (cut from) the partition log,
  with their base offsets and leader epochs (page cache, synchronous, as every append).
* ``Flush(end)``: an fsync by the flusher (off the loop); ``FlushDone(end)`` is fed back
  only after every earlier flush has completed (flushes complete in order). A failed
  fsync stops the shell: the voter no longer acknowledges anything (Kafka shuts such a
  controller down).
* ``Send``: a reply to a request this node is handling (correlation ids from
  ``INBOUND_CID_BASE`` up, assigned by :meth:`handle`) completes that request's future;
  any other Send is a request to a peer, sent by the transport in its own task; the
  answer comes back as ``Received`` (or ``SendFailed``).
* ``Committed(hw)``: the committed entries are applied to the image in log order
  (control batches skipped), writes waiting for them are answered, and ``on_commit``
  runs (wakes the observers' long-polls).
* ``RoleChanged``: logged; writes in flight on a leader that lost its role fail with an
  unknown outcome.
* Snapshots (:mod:`.snapshotter`): the snapshotter writes a snapshot of the image at the
  applied offset and hands it to :meth:`RaftShell.snapshot_created` (``SnapshotCreated``);
  ``TrimLog`` trims the log behind it (``on_trim``); ``InstallSnapshot`` (a follower
  below the leader's log start fetched the leader's snapshot) blocks the FIFO like a
  quorum-state write until ``install`` has written it and replaced the image and log.

The image holds exactly the committed prefix: on start it is the latest snapshot's (or
empty), not the replayed log (whose tail may be uncommitted); entries are applied as the
high watermark passes them. A lone voter (``hightide serve``, a single controller) is the
exception: nobody else can lead, so its whole log is committed as soon as it leads (its
first LeaderChange commits everything before it) and it keeps the image
:class:`~hightide.cluster.metadata_log.MetadataLog` replayed. It elects itself at start
(the core's ``lone_voter``: no election timeout) and a write commits once its own fsync
is done; it does not resign on close (there is nobody to tell). A leader is **active** (takes metadata writes) once its own LeaderChange
entry is applied, i.e. the image has everything committed before its epoch
(``on_activate`` runs then, before any write).

Dynamic voters (KIP-853): :meth:`RaftShell.change_voters` steps an ``AddVoter`` /
``RemoveVoter`` on the leader and waits, as a write does, until the voter-set entry is
committed; ``on_voters`` runs whenever the core's voter set changes (appended,
truncated, installed), so the transport learns the new voters' endpoints.

A timer task steps ``Tick`` at the core's ``next_deadline``. Time is wall-clock ms
(``clock.now_ms()``, :mod:`hightide.aio.clock`), so DescribeQuorum's timestamps are
Kafka's epoch milliseconds; the timer waits on the same clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from ..cluster.image import MetadataImage
from ..cluster.metadata_log import MetadataLog
from ..cluster.raft import (
    Action, AddVoter, Append, ClientAppend, Committed, ElectionState, Entry, Event, Flush, FlushDone,
    InstallSnapshot, NotLeaderError, PersistElection, RaftConfig, RaftCore, RaftLog, Received,
    RemoveVoter, Resign, RoleChanged, Send, SendFailed, Tick, TrimLog, Truncate, VoterChangeError, VoterSet,
)
from ..cluster.raft import OffsetAndEpoch, SnapshotCreated
from ..cluster.raft.batches import encode_entries
from ..cluster.raft import messages as m
from ..cluster.snapshot import SnapshotError, image_from_snapshot
from ..cluster.records import decode
from ..log.partition_log import PartitionLog
from ..protocol.records import decode_records, iter_headers, parse_header, validate_batches
from ..aio import halt as _halt_module
from ..aio.clock import SYSTEM_CLOCK, Clock, wait_event_on
from ..aio.tasks import wait_event

log = logging.getLogger("hightide.raft")

__all__ = ["RaftShell", "RaftTransport", "ElectionStore", "WriteOutcomeUnknown", "INBOUND_CID_BASE",
           "restore_raft_log"]

#: Correlation ids of requests received from peers start here; the core numbers its own
#: requests from 1, so a reply can never be taken for a request of ours.
INBOUND_CID_BASE = 1 << 40
_CONTROL_BIT = 0x20


class RaftTransport(Protocol):
    """Requests to other voters: ``request`` returns the peer's answer or raises
    (OSError, a client error, a timeout) when none came."""

    async def request(self, dest: int, message: m.Message) -> m.Message: ...

    async def close(self) -> None: ...


class ElectionStore(Protocol):
    """The quorum-state file (:class:`~.quorum_state.QuorumStateStore`)."""

    def read(self) -> ElectionState | None: ...

    async def awrite(self, state: ElectionState) -> None: ...


class Snapshotting(Protocol):
    """The snapshotter (:class:`~.snapshotter.Snapshotter`): ``run`` forever."""

    async def run(self) -> None: ...


class WriteOutcomeUnknown(Exception):
    """The leader lost its role after appending a write and before it committed: the
    write may still commit under the next leader, or be truncated."""


def _cancelling() -> bool:
    """True if the current task itself is being cancelled (not just a future it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def restore_raft_log(plog: PartitionLog, snapshot: OffsetAndEpoch | None = None) -> RaftLog:
    """The core's view of the log from the partition log on disk: the ``snapshot`` (the
    latest, if any) and one entry per record batch past it (epoch = PartitionLeaderEpoch,
    count = LastOffsetDelta + 1, control bit)."""
    entries: list[tuple[int, Entry]] = []
    offset = max(plog.log_start_offset, snapshot.offset if snapshot is not None else 0)
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, 1 << 20)
        if not chunk.data:
            break
        data = bytes(chunk.data)
        for h in iter_headers(data):
            if h.base_offset + h.last_offset_delta < offset:
                continue
            payload = data[h.position:h.position + h.length + 12]
            entries.append((h.base_offset, Entry(h.partition_leader_epoch, payload, h.last_offset_delta + 1,
                                                 bool(h.attributes & _CONTROL_BIT))))
            offset = h.base_offset + h.last_offset_delta + 1
    if snapshot is not None:
        return RaftLog.restore(snapshot, entries)
    restored = RaftLog()
    restored.start_offset = restored.end_offset = entries[0][0] if entries else plog.log_start_offset
    for base, entry in entries:
        if base != restored.end_offset:
            raise ValueError(f"entry at {base} does not follow end offset {restored.end_offset}")
        restored.append(entry)
    return restored


def _halt(why: str) -> None:
    """:func:`~hightide.aio.halt.halt_process`, looked up when called (a test or the
    simulator replaces it)."""
    _halt_module.halt_process(f"the metadata log cannot be written: {why}")


class RaftShell:
    """One voter of the controller quorum (see the module doc). ``durable(plog)``
    resolves once everything appended to ``plog`` is fsynced (the flusher's);
    ``on_commit()`` runs after committed entries are applied; ``on_activate(epoch)`` when
    this node becomes the active controller; ``on_role(role, epoch, leader_id)`` on every
    role change. With ``require_formatted`` a voter whose store holds no quorum-state
    yet neither votes nor stands for election until it follows a leader (RaftCore's
    ``can_vote``). ``voters`` are the static voters (or a dynamic quorum's bootstrap set,
    often empty: the core reads it from the bootstrap checkpoint and the log);
    ``kraft_version``, ``directory_id`` and ``discovery`` go to the core (KIP-853)."""

    def __init__(self, *, node_id: int, voters: Sequence[int] | VoterSet, metadata: MetadataLog, store: ElectionStore,
                 transport: RaftTransport, durable: Callable[[PartitionLog], Awaitable[object]],
                 config: RaftConfig | None = None, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None, require_formatted: bool = False, kraft_version: int = 0,
                 directory_id: str = "", discovery: Sequence[int] = ()) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.plog = metadata.log
        self.store = store
        self.transport = transport
        self._durable = durable
        self.clock = clock
        self.config = config or RaftConfig()
        sid = metadata.snapshot_id
        restored = restore_raft_log(self.plog, sid)
        snapshot_data = metadata.snapshots.read(sid) if sid is not None else b""
        if sid is None and restored.start_offset > 0:
            raise ValueError(f"the metadata log starts at {restored.start_offset} without a snapshot")
        election = store.read()
        # ``require_formatted``: a voter whose data dir has no quorum-state was not formatted
        # for this voter set (a new or wiped dir): it votes only once it follows a leader.
        self.core = RaftCore(node_id, voters, self.config, rng or random.Random(random.getrandbits(64)), clock.now_ms(),
                             election=election, log=restored, snapshot_data=snapshot_data,
                             can_vote=election is not None or not require_formatted, kraft_version=kraft_version,
                             directory_id=directory_id, discovery=discovery)
        lone = self.core.lone_voter
        #: The image holds every committed entry below this offset.
        self.applied_end = restored.start_offset
        if lone:
            # A lone voter's whole log is committed once it leads (nobody else can have
            # written a longer one, and its first LeaderChange commits everything before
            # it): MetadataLog's replay is the image. Nothing reads it before is_active.
            self.applied_end = restored.end_offset
        elif sid is not None:
            # MetadataLog replayed the log past the snapshot, whose tail may be
            # uncommitted: start from the snapshot's image (committed) and apply entries
            # as the high watermark passes them.
            metadata.image = image_from_snapshot(snapshot_data, sid)
        else:
            metadata.image = MetadataImage()
        if not self.core.can_vote:
            log.warning("raft: data dir %s is not formatted for voters %s (no quorum-state): node %d will not vote "
                        "or stand for election until it follows a leader the other voters elected (a new quorum's "
                        "dirs are formatted together before the first start: `hightide storage format`)",
                        os.path.dirname(self.plog.path), ",".join(map(str, sorted(self.core.voters))), node_id)
        #: ``TrimLog``: the log may now start at the snapshot's end (the snapshotter's trim).
        self.on_trim: Callable[[OffsetAndEpoch], None] = metadata.trim_to_snapshot
        #: ``InstallSnapshot``: write the fetched snapshot, reset the log, replace the image.
        self.install: Callable[[OffsetAndEpoch, bytes], Awaitable[object]] | None = None
        #: Writes snapshots when due (:class:`~.snapshotter.Snapshotter`); run by :meth:`start`.
        self.snapshotter: Snapshotting | None = None
        self._snapshot_task: asyncio.Task[None] | None = None
        self.on_commit: Callable[[], None] = lambda: None
        self.on_activate: Callable[[int], None] = lambda epoch: None
        self.on_role: Callable[[str, int, int], None] = lambda role, epoch, leader: None
        #: Called with the core's voter set at start and whenever it changes (KIP-853).
        self.on_voters: Callable[[VoterSet], None] = lambda voters: None
        self._voters_seen: VoterSet | None = None
        self.failed: str | None = None
        #: Called with the reason once the shell failed (see :meth:`_fail`); None: halt.
        self.on_fatal: Callable[[str], None] | None = None
        self.active_epoch = -1  # the epoch this node is the active controller of (-1: not active)
        self._queue: deque[Action] = deque()
        self._persisting = False
        self._last_flush: asyncio.Task[None] | None = None
        self._inbound: dict[int, asyncio.Future[m.Message]] = {}
        self._next_cid = INBOUND_CID_BASE
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # (end offset, epoch, future)
        self._activated = asyncio.Event()
        self._wake = asyncio.Event()
        self._sleeping_until: int | None = None  # the deadline the timer task sleeps until (None: no deadline)
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._closed = False
        self._started = False

    # -- state -----------------------------------------------------------------------------
    @property
    def role(self) -> str:
        return self.core.role

    @property
    def epoch(self) -> int:
        return self.core.epoch

    @property
    def leader_id(self) -> int:
        """The leader this node knows (itself when leading), -1 if none."""
        return self.core.leader_id

    @property
    def started(self) -> bool:
        """True once :meth:`start` ran."""
        return self._started

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began: the shell steps nothing more."""
        return self._closed

    @property
    def committed_end(self) -> int:
        """The offset below which the log is committed and applied to the image (a lone
        voter's image holds its whole log from the start, committed once it leads)."""
        return min(self.applied_end, max(self.core.high_watermark, self.core.log.start_offset))

    @property
    def is_active(self) -> bool:
        """True on the leader once its epoch's LeaderChange entry is applied: the image
        has every earlier committed entry, so metadata writes may run."""
        return self.active_epoch == self.core.epoch and self.core.role == "leader" and self.failed is None

    async def wait_active(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for this node to become active (it leads already);
        True if it is."""
        if self.is_active:
            return True
        self._activated.clear()
        await wait_event(self._activated, timeout_s)
        return self.is_active

    # -- running ---------------------------------------------------------------------------
    def start(self, *, timer: bool = True) -> None:
        """Start the core (its first Tick) and, with ``timer``, the timer task (tests
        drive :meth:`tick` themselves with a fake clock)."""
        self._started = True
        log.log(self._role_level, "raft: node %d starting as %s in epoch %d (log %d..%d, voters %s)", self.node_id,
                self.core.role, self.core.epoch, self.core.log.start_offset, self.core.log.end_offset,
                list(self.core.voters))
        self._step(Tick())
        self._voters_changed()
        if timer:
            self._timer = asyncio.get_running_loop().create_task(self._run_timer(), name="raft-timer")
        if self.snapshotter is not None:
            self._snapshot_task = asyncio.get_running_loop().create_task(self.snapshotter.run(), name="raft-snapshots")

    def tick(self) -> None:
        """Run the core's due timers now."""
        self._step(Tick())

    async def _run_timer(self) -> None:
        while not self._closed:
            deadline = self.core.next_deadline
            now = self.clock.now_ms()
            if deadline is not None and now >= deadline:
                try:
                    self._step(Tick())
                except Exception as exc:  # the core broke a rule it checks (a bug): stop taking part
                    log.exception("raft: the core failed on a timer")
                    self._fail(f"the core failed on a timer: {exc}")
                    return
                if self.core.next_deadline is not None and self.core.next_deadline <= now:
                    await self.clock.sleep(0.001)  # a deadline the core did not move: do not spin
                continue
            self._wake.clear()
            self._sleeping_until = deadline
            await wait_event_on(self.clock, self._wake, None if deadline is None else (deadline - now) / 1000)

    async def close(self, resign_wait_s: float = 0.3) -> None:
        """Stop: a leader of several voters resigns first (EndQuorumEpoch to the voters,
        waited for up to ``resign_wait_s``), then the timer stops, writes waiting fail with an unknown
        outcome and requests being handled get no answer (None)."""
        if self._closed:
            return
        if self.core.role == "leader" and self.failed is None and not self.core.lone_voter:
            self._step(Resign())
            pending = [t for t in self._tasks if not t.done()]
            if pending:
                await asyncio.wait(pending, timeout=resign_wait_s)
        self._closed = True
        for task in (self._timer, self._snapshot_task):
            if task is not None:
                task.cancel()
        for task in list(self._tasks):
            task.cancel()
        self._fail_waiters("the controller is shutting down")
        for fut in self._inbound.values():
            if not fut.done():
                fut.cancel()
        await self.transport.close()

    # -- the controller's writes -------------------------------------------------------------
    async def append(self, payload: bytes) -> int:
        """Append one record batch as the leader and return its end offset once it is
        committed and applied to the image. Raises :class:`NotLeaderError` (nothing
        appended) on a non-leader, :class:`WriteOutcomeUnknown` if leadership is lost
        before it commits."""
        end, fut = self.append_nowait(payload)
        await fut
        return end

    def append_nowait(self, payload: bytes) -> tuple[int, asyncio.Future[None]]:
        """Append one record batch as the leader, without waiting (pipelining: the next
        append need not wait for this one's commit): (its end offset, a future resolved
        once the batch is committed and applied to the image — or failed with
        :class:`WriteOutcomeUnknown` if leadership is lost first). Raises
        :class:`NotLeaderError` (nothing appended) on a non-leader."""
        if self._closed or self.failed is not None:
            raise NotLeaderError(self.core.leader_id, self.core.epoch)
        self._step(ClientAppend((payload,), (parse_header(payload).last_offset_delta + 1,)))
        end = self.core.log.end_offset
        return end, self.committed_future(end)

    def committed_future(self, end: int) -> asyncio.Future[None]:
        """A future resolved once the log below ``end`` is committed and applied (at once
        if it is), failed with :class:`WriteOutcomeUnknown` if this leader loses its
        role before that."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.applied_end >= end:
            fut.set_result(None)
        else:
            self._waiters.append((end, self.core.epoch, fut))
        return fut

    async def change_voters(self, change: AddVoter | RemoveVoter, timeout_s: float, *, wait_commit: bool = True) -> int:
        """AddRaftVoter / RemoveRaftVoter (KIP-853) on the leader: append the new voter
        set and (``wait_commit``) wait until it is committed. Returns the end offset of
        the voter-set entry. Raises :class:`VoterChangeError` (refused: nothing appended),
        :class:`WriteOutcomeUnknown` (leadership lost before the commit) and TimeoutError
        (not committed within ``timeout_s``: it may still commit)."""
        if self._closed or self.failed is not None:
            raise VoterChangeError(int(m.ErrorCode.not_leader_or_follower), f"node {self.node_id} is shutting down")
        self._step(change)
        end = self.core.log.end_offset
        if not wait_commit:
            return end
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, self.core.epoch, fut))
        async with asyncio.timeout(timeout_s):  # not wait_for
            await fut
        return end

    def _voters_changed(self) -> None:
        voters = self.core.voter_set
        if voters is not self._voters_seen:
            if self._voters_seen is not None:
                log.info("raft: node %d now has voters %s", self.node_id, list(voters.ids))
            self._voters_seen = voters
            self.on_voters(voters)

    # -- requests from peers ---------------------------------------------------------------
    async def handle(self, source: int, message: m.Message, timeout_s: float | None = None) -> m.Message | None:
        """Step a request from peer ``source`` and return the core's answer (a Fetch may
        be parked up to its MaxWaitMs). None when no answer comes within ``timeout_s``
        (default: the request timeout) or the shell stops."""
        if self._closed or self.failed is not None:
            return None
        cid = self._next_cid
        self._next_cid += 1
        fut: asyncio.Future[m.Message] = asyncio.get_running_loop().create_future()
        self._inbound[cid] = fut
        try:
            self._step(Received(source, message, cid))
            async with asyncio.timeout(timeout_s or self.config.request_timeout_ms / 1000):  # not wait_for
                return await fut
        except TimeoutError:
            return None
        except asyncio.CancelledError:
            if self._closed and not _cancelling():
                return None  # close() cancelled the answer: the shell stopped
            raise
        finally:
            self._inbound.pop(cid, None)

    # -- the core --------------------------------------------------------------------------
    def _step(self, event: Event) -> None:
        """Feed ``event`` to the core and carry out its actions. Raises NotLeaderError for
        a ClientAppend on a non-leader (nothing happened)."""
        if self._closed or self.failed is not None:
            if isinstance(event, ClientAppend):
                raise NotLeaderError(self.core.leader_id, self.core.epoch)
            return
        actions = self.core.step(self.clock.now_ms(), event)
        self._queue.extend(actions)
        if self.core.voter_set is not self._voters_seen and self._started:
            self._voters_changed()
        if not self._persisting:
            self._drain()
        deadline = self.core.next_deadline
        if deadline is not None and (self._sleeping_until is None or deadline < self._sleeping_until):
            self._wake.set()  # the timer sleeps too long now (a later or unchanged deadline needs no wake-up)

    def _drain(self) -> None:
        while self._queue and not self._closed:
            action = self._queue.popleft()
            if isinstance(action, PersistElection):
                self._persisting = True
                self._spawn(self._persist(self._superseding(action.state)), "raft-persist")
                return
            if isinstance(action, InstallSnapshot):
                self._persisting = True
                self._spawn(self._install_snapshot(action), "raft-install-snapshot")
                return
            try:
                self._carry_out(action)
            except Exception as exc:  # a bug or an unexpected IO error: stop voting rather than diverge
                log.exception("raft: carrying out %s failed", type(action).__name__)
                self._fail(f"carrying out {type(action).__name__} failed: {exc}")
                return

    def _superseding(self, state: ElectionState) -> ElectionState:
        """The state to write for a PersistElection of ``state``: the last of the
        PersistElections queued right behind it with only RoleChanged between (a lone
        voter's candidacy, vote and leadership in one step). The earlier ones are never
        acted on before the last is durable (nothing else runs in between), and the
        write replaces the whole file, so one write of the last stands for all of them;
        the RoleChanged actions run after it, in order."""
        run = 0
        for i, action in enumerate(self._queue):
            if isinstance(action, PersistElection):
                run = i + 1
            elif not isinstance(action, RoleChanged):
                break
        if run == 0:
            return state
        last = self._queue[run - 1]
        assert isinstance(last, PersistElection)
        kept = [a for a in list(self._queue)[:run] if not isinstance(a, PersistElection)]
        for _ in range(run):
            self._queue.popleft()
        self._queue.extendleft(reversed(kept))
        return last.state

    async def _persist(self, state: ElectionState) -> None:
        try:
            await self.store.awrite(state)
        except OSError as exc:
            self._fail(f"writing the quorum-state file failed: {exc}")
            return
        self._persisting = False
        self._drain()

    def _carry_out(self, action: Action) -> None:
        if isinstance(action, Send):
            self._send(action)
        elif isinstance(action, Append):
            self._append(action)
        elif isinstance(action, Truncate):
            log.info("raft: truncating the metadata log to %d (diverged from the leader)", action.offset)
            self.plog.truncate_to(action.offset)
        elif isinstance(action, Flush):
            durable = self._durable(self.plog)  # asked now (it may share an fsync round), reported in order
            self._last_flush = self._spawn(self._flush(action.end_offset, durable, self._last_flush), "raft-flush")
        elif isinstance(action, Committed):
            self._apply_committed(action.high_watermark)
        elif isinstance(action, RoleChanged):
            self._role_changed(action)
        elif isinstance(action, TrimLog):
            try:
                self.on_trim(action.snapshot_id)
            except OSError as exc:  # the log keeps its segments: harmless, retried at the next snapshot
                log.error("raft: trimming the metadata log to %s failed: %s", action.snapshot_id, exc)

    async def _install_snapshot(self, action: InstallSnapshot) -> None:
        sid = action.snapshot_id
        if self.install is None:
            self._fail(f"the leader sent snapshot {sid} but this node cannot install snapshots")
            return
        try:
            await self.install(sid, action.data)
        except (SnapshotError, OSError) as exc:
            self._fail(f"installing snapshot {sid} failed: {exc}")
            return
        log.info("raft: installed snapshot %s from the leader (the log restarts at %d)", sid, sid.offset)
        self.applied_end = sid.offset
        self.on_commit()
        self._persisting = False
        self._drain()

    def snapshot_created(self, sid: OffsetAndEpoch, data: bytes) -> None:
        """The snapshotter wrote snapshot ``sid`` (at most the applied offset, at an entry
        boundary): the core may serve it and trim the log behind it (``TrimLog``)."""
        try:
            self._step(SnapshotCreated(sid, data))
        except ValueError as exc:  # past the HW or not at an entry of its epoch: keep the log
            log.error("raft: snapshot %s not used to trim the log: %s", sid, exc)

    def _send(self, action: Send) -> None:
        if action.correlation_id >= INBOUND_CID_BASE:
            fut = self._inbound.get(action.correlation_id)
            if fut is not None and not fut.done():
                fut.set_result(action.message)
            return
        self._spawn(self._request(action.dest, action.message, action.correlation_id), "raft-send")

    async def _request(self, dest: int, message: m.Message, cid: int) -> None:
        try:
            answer = await self.transport.request(dest, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the peer or the connection
            log.debug("raft: %s to %d failed: %s", type(message).__name__, dest, exc)
            self._step(SendFailed(dest, cid))
            return
        self._step(Received(dest, answer, cid))

    def _append(self, action: Append) -> None:
        if self.plog.log_end_offset != action.base_offset:
            self._fail(f"the metadata log ends at {self.plog.log_end_offset}, the core appends at {action.base_offset}")
            return
        offset = action.base_offset
        now = self.clock.now_ms()
        try:
            for entry in action.entries:
                data = encode_entries(offset, (entry,))
                self.plog.append(data, validate_batches(data, client_origin=False), now, entry.epoch)
                offset += entry.count
        except OSError as exc:
            self._fail(f"appending to the metadata log failed: {exc}")

    async def _flush(self, end: int, durable: Awaitable[object], previous: asyncio.Task[None] | None) -> None:
        """Feed FlushDone(end) once ``durable`` resolved and every earlier flush was fed."""
        try:
            if previous is not None and not previous.done():
                await asyncio.shield(previous)
            await durable
        except OSError as exc:
            self._fail(f"fsync of the metadata log failed: {exc}")
            return
        self._step(FlushDone(end))

    def _apply_committed(self, hw: int) -> None:
        """Apply the entries below ``hw`` not applied yet (control batches skipped)."""
        offset = self.applied_end
        while offset < hw:
            entry = self.core.log.entry_at(offset)
            if entry is None:
                self._fail(f"committed offset {offset} is not an entry of the log")
                return
            if not entry.control:
                base = parse_header(entry.payload).base_offset
                records, offsets = [], []
                for rec in decode_records(entry.payload):
                    if rec.value is not None:
                        records.append(decode(rec.value))
                        offsets.append(offset + rec.offset - base)
                self.metadata.apply(records, offsets)
            offset += entry.count
        self.applied_end = offset
        if (self.core.role == "leader" and self.active_epoch != self.core.epoch
                and offset > self.core.epoch_start_offset >= 0):
            self.active_epoch = self.core.epoch
            log.info("raft: node %d is the active controller in epoch %d (metadata applied to %d)",
                     self.node_id, self.core.epoch, offset)
            self.on_activate(self.core.epoch)
            self._activated.set()
        still = []
        for end, epoch, fut in self._waiters:
            if end <= offset and not fut.done():
                fut.set_result(None)
            elif not fut.done():
                still.append((end, epoch, fut))
        self._waiters = still
        self.on_commit()

    @property
    def _role_level(self) -> int:
        """A lone voter's elections (one at every start) are not news: DEBUG."""
        return logging.DEBUG if self.core.lone_voter else logging.INFO

    def _role_changed(self, action: RoleChanged) -> None:
        log.log(self._role_level, "raft: node %d is %s in epoch %d (leader %d)", self.node_id, action.role,
                action.epoch, action.leader_id)
        if action.role != "leader":
            self.active_epoch = -1
            self._fail_waiters(f"this controller lost the leadership (now {action.role} in epoch {action.epoch})")
        self.on_role(action.role, action.epoch, action.leader_id)

    def _fail_waiters(self, why: str) -> None:
        waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(WriteOutcomeUnknown(why))

    def _fail(self, why: str) -> None:
        """Stop taking part in the quorum, then end the process (:attr:`on_fatal`, by
        default :func:`~hightide.aio.halt.halt_process`): as Kafka's Raft IO thread hands
        any failure to its fatal fault handler, which halts, the node neither serves nor
        shuts down cleanly over a metadata log it could not make durable (a clean shutdown
        would flush and mark clean what it refused). The next start recovers from disk."""
        if self.failed is None and self.on_fatal is not None:  # else the halt logs the one line
            log.critical("raft: node %d stops taking part in the quorum: %s", self.node_id, why)
        self.failed = why
        self.active_epoch = -1
        self._fail_waiters(why)
        self._activated.set()  # wait_active returns (False) at once
        (self.on_fatal or _halt)(why)

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
