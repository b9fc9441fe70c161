"""Metadata writes on a voter of ``__cluster_metadata`` — every node that writes the
metadata log: the single node (``hightide serve``), a lone controller, and each voter of
a controller quorum. :class:`RaftMetadataRuntime` runs them over the
:class:`~.raft_shell.RaftShell`, which applies committed entries to the image; there is
one write path whatever the number of voters.

A lone voter is a one-voter quorum: it elects itself as soon as its shell starts, a
write commits once its own fsync is done (the flusher's, off the event loop), and it has
no peers to talk to. Its data dir may have been written by hightide before the metadata
log went through Raft (no quorum-state, batches of leader epoch 0): it starts on it as
it is (:func:`raft_metadata_runtime`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.transport import LOOP_TRANSPORT, Transport
from ..client.properties import ClientSecurity
from ..cluster.image import MetadataImage
from ..cluster.metadata_log import MetadataLog
from ..cluster.raft import NotLeaderError, OffsetAndEpoch, RaftConfig, VoterSet
from ..cluster.raft.batches import leader_change_batch, read_voters_batches, voters_entry
from ..cluster.settings import ClusterSettings
from ..cluster.snapshot import copy_image
from ..log.partition_log import PartitionLog
from ..log.storage import POSIX, Storage
from ..protocol.errors import ErrorCode
from ..protocol.records import build_batch
from ..services import CoordinatorUnavailable
from .quorum_state import QuorumStateStore
from .raft_peers import RaftPeers
from .raft_shell import RaftShell, WriteOutcomeUnknown
from .snapshotter import Snapshotter, install_snapshot

#: How long a lone voter's start waits for its own election (a few local fsyncs).
LONE_VOTER_ELECTION_S = 30.0


class RaftMetadataRuntime:
    """Metadata writes through Raft: ``write(0, op, now_ms)`` / ``committed_offset(0)``.

    Writes are **pipelined** (Kafka's QuorumController): each ``op(image)`` runs in
    arrival order, alone, and decides from an image that has every earlier write applied
    — committed or not: the active controller keeps a *speculative* image (a
    :func:`~hightide.cluster.snapshot.copy_image` of the committed one made at its
    first write in a leader epoch, then every batch it appends applied to it at once) —
    and its records are appended through the core as one batch without waiting for the
    batches before it to commit (the core replicates and fsyncs whatever is appended by
    then together; followers fetch the batches in one Fetch). The answer is **parked**
    until the high watermark passed the batch and its records are applied to the
    committed image (on a lone voter: once its own fsync is done). An op with no records
    appends nothing and is answered once everything appended before it is committed
    (its answer may rest on those: Kafka does the same); at once when nothing is pending,
    or when the op says its answer rests on committed state only (its response is a
    :class:`Settled`, handed back as it is).
    So a caller never sees an answer decided from state that is not committed, and the
    committed image (what the node serves) holds only committed records.

    A write runs only on the active controller (the Raft leader once its epoch's
    LeaderChange entry is applied; a new leader is waited for up to
    ``activation_wait_s``). Raises :class:`~hightide.services.CoordinatorUnavailable` with
    NOT_CONTROLLER when this controller is not the active one (nothing was appended: the
    caller may send it to the active controller), and with REQUEST_TIMED_OUT when
    leadership was lost after the append (the write may or may not commit under the next
    leader: never re-send it blindly); the speculative image is dropped with the epoch.
    On a lone voter whose log failed (an append or fsync error: the shell stops, as
    Kafka's controller does) every write gets KAFKA_STORAGE_ERROR, the answer the single
    node always gave for a failed metadata write. The wait is shielded: a caller that
    goes away does not cut a write off between the append and the commit."""

    def __init__(self, shell: RaftShell, activation_wait_s: float = 2.0) -> None:
        self.shell = shell
        self.activation_wait_s = activation_wait_s
        self._lock = asyncio.Lock()
        #: The committed image plus every batch this leader appended (None: not made yet
        #: in ``_speculative_epoch``).
        self._speculative: MetadataImage | None = None
        self._speculative_epoch = -1
        #: Writes appended and not yet answered (for tests and metrics).
        self.in_flight = 0

    def committed_offset(self, partition: int) -> int:
        """The offset below which the metadata log is committed and applied."""
        return self.shell.committed_end

    def latest_image(self) -> MetadataImage:
        """The newest image this controller decides from: the speculative image while this
        leader has one in its epoch (every batch it appended applied, committed or not),
        else the committed image. Never makes a copy."""
        shell = self.shell
        if self._speculative is not None and self._speculative_epoch == shell.epoch:
            return self._speculative
        return shell.metadata.image

    async def write(self, partition: int, op: Callable[[MetadataImage], Any], now_ms: int) -> Any:
        result, committed, appended = await self._decide(op, now_ms)
        if committed is None:
            return result
        self.in_flight += 1
        try:
            await asyncio.shield(committed)
        except WriteOutcomeUnknown as exc:
            self._check_storage()
            if not appended:  # nothing of its own was written: the caller may ask the next controller
                raise CoordinatorUnavailable(_not_controller(self.shell), ErrorCode.not_controller) from None
            raise CoordinatorUnavailable(f"the metadata write may or may not have been applied: {exc}",
                                         ErrorCode.request_timed_out) from None
        finally:
            self.in_flight -= 1
        return result

    async def _decide(self, op: Callable[[MetadataImage], Any],
                      now_ms: int) -> tuple[Any, asyncio.Future[None] | None, bool]:
        """Run ``op`` on the speculative image and append its records: (result, the future
        of the commit it waits for — None when nothing is pending —, whether it appended)."""
        async with self._lock:
            shell = self.shell
            self._check_storage()
            if not shell.is_active and (shell.role != "leader" or not await shell.wait_active(self.activation_wait_s)):
                self._check_storage()
                raise CoordinatorUnavailable(_not_controller(shell), ErrorCode.not_controller)
            if shell.plog.log_end_offset != shell.core.log.end_offset:  # an action still queued (never while active)
                raise CoordinatorUnavailable(_not_controller(shell), ErrorCode.not_controller)
            image = self._image()
            result = op(image)
            records = list(result[1])
            if not records:
                end = shell.core.log.end_offset
                if isinstance(result[0], Settled):  # rests on nothing pending: answered now
                    return result, None, False
                return result, None if shell.committed_end >= end else shell.committed_future(end), False
            base = shell.core.log.end_offset
            payload = build_batch([(k, v, [], now_ms) for k, v in MetadataLog.encode_records(records)])
            try:
                _, committed = shell.append_nowait(payload)
            except NotLeaderError:
                self._check_storage()
                raise CoordinatorUnavailable(_not_controller(shell), ErrorCode.not_controller) from None
            for i, record in enumerate(records):
                image.apply(record, base + i)
            return result, committed, True

    def _image(self) -> MetadataImage:
        """The speculative image: made at this leader's first write of its epoch, a copy
        of the committed image (nothing of this leader's is pending then: only it writes
        content in its epoch, and its LeaderChange and voter entries change no image)."""
        shell = self.shell
        if self._speculative is None or self._speculative_epoch != shell.epoch:
            self._speculative, self._speculative_epoch = copy_image(shell.metadata.image), shell.epoch
        return self._speculative

    def _check_storage(self) -> None:
        """A lone voter whose metadata log failed: KAFKA_STORAGE_ERROR (nobody else
        could take the write)."""
        shell = self.shell
        if shell.failed is not None and shell.core.lone_voter:
            raise CoordinatorUnavailable(f"the metadata log failed: {shell.failed}", ErrorCode.kafka_storage_error)


@dataclass(frozen=True)
class Settled:
    """The response of an op with no records that rests on committed state only (e.g. a
    broker heartbeat that changes nothing while no write pending touches the brokers):
    :meth:`RaftMetadataRuntime.write` answers it at once instead of after the writes
    appended before it commit (the caller unwraps ``response``)."""

    response: Any


def _not_controller(shell: RaftShell) -> str:
    leader = shell.leader_id
    who = f"the active controller is {leader}" if leader >= 0 else "no active controller is known"
    return f"This node {shell.node_id} is not the active controller ({who}, epoch {shell.epoch})."


def raft_metadata_runtime(*, node_id: int, voters: Sequence[tuple[int, str, int]], metadata: MetadataLog,
                          durable: Callable[[PartitionLog], Awaitable[object]], cluster_id: str | None,
                          security: ClientSecurity | None = None, config: RaftConfig | None = None,
                          snapshots: SnapshotPolicy | None = None, storage: Storage = POSIX,
                          clock: Clock = SYSTEM_CLOCK, transport: Transport = LOOP_TRANSPORT,
                          dynamic: bool = False, directory_id: str = "",
                          bootstrap: Sequence[tuple[str, int]] = (),
                          listener_name: str = "CONTROLLER") -> RaftMetadataRuntime:
    """The metadata runtime of a voter: ``voters`` are (node id, host, port) of every
    voter's controller listener (this node included; a lone voter: only itself, its
    address unused); the quorum-state file lives in the metadata log's directory, on
    ``storage`` (the node's engine). The shell is created but not started
    (:meth:`RaftShell.start`). With ``snapshots`` the voter snapshots its image by that
    policy (:class:`~.snapshotter.Snapshotter`, started with the shell) and trims its log
    behind each snapshot; a follower installs the leader's snapshot when it is behind the
    leader's log start either way. ``clock``: the node's (Raft's timers, the
    snapshotter's); ``transport``: the node's (the connections to the other voters).

    A voter of several whose dir has no quorum-state neither votes nor stands for
    election before it follows a leader (``require_formatted``: data_dir's rule). A lone
    voter always stands: there is no other voter an empty log could win against, and the
    single node's dirs written before its metadata went through Raft have a metadata log
    and no quorum-state (their batches carry leader epoch 0; the first election here
    starts epoch 1 above them).

    ``dynamic``: a controller of a dynamic quorum (KIP-853, ``kraft.version`` 1): ``voters``
    is ignored — the voter set is read from the bootstrap checkpoint and the log — and
    ``bootstrap`` (``controller.quorum.bootstrap.servers``) are where it finds the leader
    while it knows no other voter (node ids -2, -3, ... as Kafka numbers bootstrap
    servers); ``directory_id`` is its replica directory id (``meta.properties``); the
    voters' addresses are their ``listener_name`` endpoints in the voter set, learned as
    it changes, and the leader's endpoint from Fetch answers."""
    config = config or RaftConfig(leader_change_payload=leader_change_batch)
    config = dataclasses.replace(config, voters_payload=voters_entry, read_voters=read_voters_batches)
    ids = [] if dynamic else [v[0] for v in voters]
    addresses = {v[0]: (v[1], v[2]) for v in voters if v[0] != node_id and not dynamic}
    discovery = [-(i + 2) for i in range(len(bootstrap))] if dynamic else []
    addresses.update({d: bootstrap[i] for i, d in enumerate(discovery)})
    peers = RaftPeers(node_id, addresses, cluster_id=cluster_id,
                      request_timeout_s=config.request_timeout_ms / 1000, security=security, transport=transport)
    shell = RaftShell(node_id=node_id, voters=ids, metadata=metadata,
                      store=QuorumStateStore(metadata.log.path, ids, cluster_id or "", storage, dynamic=dynamic),
                      transport=peers, durable=durable, config=config, require_formatted=len(ids) > 1 or dynamic,
                      clock=clock, kraft_version=int(dynamic), directory_id=directory_id, discovery=discovery)

    def learn_voters(voter_set: VoterSet) -> None:
        for n in voter_set.nodes:
            named = [e for e in n.endpoints if e[0] == listener_name] or list(n.endpoints)
            if n.node_id != node_id and named:
                peers.addresses[n.node_id] = (named[0][1], named[0][2])
    shell.on_voters = learn_voters

    async def install(sid: OffsetAndEpoch, data: bytes) -> None:
        await install_snapshot(metadata, sid, data)
    shell.install = install
    if snapshots is not None:
        policy = snapshots

        async def wait_commit(timeout_s: float) -> None:
            # Python 3.11's wait_for can swallow a cancellation that coincides with the
            # wake-up (stop wakes every waiter, then cancels): end the loop on close too.
            await policy.wait_commit(timeout_s)
            if shell.closed:
                raise asyncio.CancelledError()
        snapshotter = Snapshotter(metadata, max_bytes=snapshots.max_bytes, interval_ms=snapshots.interval_ms,
                                  applied_end=lambda: shell.committed_end, wait_commit=wait_commit,
                                  on_created=shell.snapshot_created, clock=clock,
                                  voters_at=lambda end: shell.core.voters_at(end) if shell.core.kraft_version else None)
        shell.on_trim = snapshotter.trim
        shell.snapshotter = snapshotter
    return RaftMetadataRuntime(shell)


def raft_config(settings: ClusterSettings) -> RaftConfig:
    """The Raft core's timeouts from Kafka's ``controller.quorum.*`` settings; the
    LeaderChange entry is Kafka's control batch (:mod:`hightide.cluster.raft.batches`)."""
    election, fetch, backoff, request, retry = settings.quorum_timeouts_ms
    return RaftConfig(election_timeout_ms=election, fetch_timeout_ms=fetch, election_backoff_max_ms=backoff,
                      request_timeout_ms=request, retry_backoff_ms=retry, leader_change_payload=leader_change_batch,
                      voters_payload=voters_entry, read_voters=read_voters_batches)


@dataclass(frozen=True)
class SnapshotPolicy:
    """When a voter snapshots its image (Kafka's names):
    ``metadata.log.max.record.bytes.between.snapshots`` (``max_bytes``),
    ``metadata.log.max.snapshot.interval.ms`` (``interval_ms``); ``wait_commit(timeout_s)``
    resolves at the next metadata commit."""

    max_bytes: int
    interval_ms: int
    wait_commit: Callable[[float], Awaitable[object]]
