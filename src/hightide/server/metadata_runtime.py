"""Metadata writes through a controller quorum (more than one voter in
``controller.quorum.voters``): :class:`RaftMetadataRuntime` over the
:class:`~.raft_shell.RaftShell`, which applies committed entries to the image on every
voter. It has the same ``write``/``committed_offset`` surface as the single voter's
serial runtime (:mod:`hightide.coordinator.metadata`), with Raft's commit in place of
the local fsync. One voter (``hightide serve``, a lone controller) keeps that path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..aio.transport import LOOP_TRANSPORT, Transport
from ..cluster.image import MetadataImage
from ..cluster.metadata_log import MetadataLog
from ..client.properties import ClientSecurity
from ..cluster.raft import NotLeaderError, OffsetAndEpoch, RaftConfig
from ..log.partition_log import PartitionLog
from ..cluster.settings import ClusterSettings
from ..protocol.errors import ErrorCode
from ..protocol.records import build_batch
from ..services import MetadataOp
from ..coordinator.runtime import CoordinatorUnavailable
from ..node.quorum_state import QuorumStateStore
from ..node.raft_peers import RaftPeers
from ..node.raft_shell import RaftShell, WriteOutcomeUnknown



class RaftMetadataRuntime:
    """Metadata writes through the controller quorum (more than one voter): the same
    ``write(0, op, now_ms)`` / ``committed_offset(0)`` surface as the single voter's
    runtime, with Raft's commit in place of the local fsync.

    Writes are serial (one at a time, each deciding from an image that has every earlier
    write applied). A write runs only on the active controller (the Raft leader once its
    epoch's LeaderChange entry is applied; a new leader is waited for up to
    ``activation_wait_s``): ``op(image)``, its records encoded as one batch, appended
    through the core, and the result returned once the high watermark passed the batch
    and its records are applied to the image. Raises
    :class:`~.coordinator_runtime.CoordinatorUnavailable` with NOT_CONTROLLER when this
    controller is not the active one (nothing was appended: the caller may send it to
    the active controller), and with REQUEST_TIMED_OUT when leadership was lost after
    the append (the write may or may not commit under the next leader: never re-send it
    blindly). An op with no records appends nothing and returns at once (still behind
    the earlier writes). The write is shielded: a caller that goes away does not cut it
    off between the append and the commit."""

    def __init__(self, shell: RaftShell, activation_wait_s: float = 2.0) -> None:
        self.shell = shell
        self.activation_wait_s = activation_wait_s
        self._lock = asyncio.Lock()

    def committed_offset(self, partition: int) -> int:
        """The offset below which the metadata log is committed and applied."""
        return self.shell.applied_end

    async def write(self, partition: int, op: Callable[[MetadataImage], Any], now_ms: int) -> Any:
        return await asyncio.shield(asyncio.ensure_future(self._write(op, now_ms)))

    async def _write(self, op: Callable[[MetadataImage], Any], now_ms: int) -> Any:
        async with self._lock:
            shell = self.shell
            if not shell.is_active and (shell.role != "leader" or not await shell.wait_active(self.activation_wait_s)):
                raise CoordinatorUnavailable(_not_controller(shell), ErrorCode.not_controller)
            if shell.plog.log_end_offset != shell.core.log.end_offset:  # an action still queued (never while active)
                raise CoordinatorUnavailable(_not_controller(shell), ErrorCode.not_controller)
            result = op(shell.metadata.image)
            records = list(result[1])
            if not records:
                return result
            payload = build_batch([(k, v, [], now_ms) for k, v in MetadataLog.encode_records(records)])
            try:
                await shell.append(payload)
            except NotLeaderError:
                raise CoordinatorUnavailable(_not_controller(shell), ErrorCode.not_controller) from None
            except WriteOutcomeUnknown as exc:
                raise CoordinatorUnavailable(f"the metadata write may or may not have been applied: {exc}",
                                             ErrorCode.request_timed_out) from None
            return result


def _not_controller(shell: RaftShell) -> str:
    leader = shell.leader_id
    who = f"the active controller is {leader}" if leader >= 0 else "no active controller is known"
    return f"This node {shell.node_id} is not the active controller ({who}, epoch {shell.epoch})."


def raft_metadata_runtime(*, node_id: int, voters: Sequence[tuple[int, str, int]], metadata: MetadataLog,
                          durable: Callable[[PartitionLog], Awaitable[object]], cluster_id: str | None,
                          security: ClientSecurity | None = None, config: RaftConfig | None = None,
                          snapshots: SnapshotPolicy | None = None, clock: Clock = SYSTEM_CLOCK,
                          transport: Transport = LOOP_TRANSPORT) -> RaftMetadataRuntime:
    """The metadata runtime of a voter of a controller quorum: ``voters`` are
    (node id, host, port) of every voter's controller listener (this node included);
    the quorum-state file lives in the metadata log's directory. The shell is created
    but not started (:meth:`RaftShell.start`). With ``snapshots`` the voter snapshots its
    image by that policy (:class:`~.snapshotter.Snapshotter`, started with the shell) and
    trims its log behind each snapshot; a follower installs the leader's snapshot when it
    is behind the leader's log start either way. ``clock``: the node's (Raft's timers,
    the snapshotter's); ``transport``: the node's (the connections to the other voters)."""
    from ..node.snapshotter import Snapshotter, install_snapshot  # it imports this module
    config = config or RaftConfig(leader_change_payload=leader_change_batch)
    ids = [v[0] for v in voters]
    peers = RaftPeers(node_id, {v[0]: (v[1], v[2]) for v in voters if v[0] != node_id}, cluster_id=cluster_id,
                      request_timeout_s=config.request_timeout_ms / 1000, security=security, transport=transport)
    shell = RaftShell(node_id=node_id, voters=ids, metadata=metadata,
                      store=QuorumStateStore(metadata.log.path, ids, cluster_id or ""), transport=peers,
                      durable=durable, config=config, require_formatted=True, clock=clock)

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
                                  applied_end=lambda: shell.applied_end, wait_commit=wait_commit,
                                  on_created=shell.snapshot_created, clock=clock)
        shell.on_trim = snapshotter.trim
        shell.snapshotter = snapshotter
    return RaftMetadataRuntime(shell)


def leader_change_batch(*args: Any, **kwargs: Any) -> bytes:
    """Kafka's LeaderChangeMessage control batch (:func:`hightide.cluster.raft.wire.leader_change_batch`)."""
    from ..cluster.raft.wire import leader_change_batch as build  # when used: Raft's kio messages cost a single node ~20 ms of start-up
    return build(*args, **kwargs)


def raft_config(settings: ClusterSettings) -> RaftConfig:
    """The Raft core's timeouts from Kafka's ``controller.quorum.*`` settings; the
    LeaderChange entry is Kafka's control batch."""
    election, fetch, backoff, request, retry = settings.quorum_timeouts_ms
    return RaftConfig(election_timeout_ms=election, fetch_timeout_ms=fetch, election_backoff_max_ms=backoff,
                      request_timeout_ms=request, retry_backoff_ms=retry, leader_change_payload=leader_change_batch)


@dataclass(frozen=True)
class SnapshotPolicy:
    """When a voter snapshots its image (Kafka's names):
    ``metadata.log.max.record.bytes.between.snapshots`` (``max_bytes``),
    ``metadata.log.max.snapshot.interval.ms`` (``interval_ms``); ``wait_commit(timeout_s)``
    resolves at the next metadata commit."""

    max_bytes: int
    interval_ms: int
    wait_commit: Callable[[float], Awaitable[object]]
