"""A broker following the controller's metadata log (Kafka's observer ``Fetch`` of
``__cluster_metadata-0`` plus its ``MetadataLoader``).

Theory of operation: one task loops

1. Fetch ``__cluster_metadata-0`` from the controller at ``FetchOffset`` = the local
   copy's log end offset, ``ReplicaId`` = this node, ``ReplicaEpoch`` = the broker epoch
   (-1 before registration), ``MaxWaitMs`` 500 (the controller parks the Fetch until the
   log grows);
2. :func:`plan` decides what the answer means (sans-IO): records to append, a divergence
   (the local copy has offsets the controller does not: truncate, replay, fetch again), a
   ``SnapshotId`` (the fetch offset is below the controller's log start: download it with
   FetchSnapshot, replace the local copy and the image by it, fetch on from its end; see
   :mod:`.snapshotter`), or an error to back off from;
3. the records are appended to the local copy (the same :class:`MetadataLog` files the
   controller writes, in this broker's own data dir; its fsync is asked for but not
   waited on: a broker that loses a tail in a crash fetches it again) and applied to the
   image — **before** the next Fetch is sent, so a Fetch at offset N proves N − 1 is
   applied and the controller may count it as an acknowledgement;
4. then :attr:`MetadataFollower.on_applied` (the broker's ``after_metadata_change``: open
   or close partition logs, refresh configs, leadership), the lifecycle manager (applied
   offset; a prompt heartbeat after content records) and the read gate are told.

**Finding the leader** (the metadata Fetch goes to the active controller, the Raft
leader): every answer's ``CurrentLeader`` (id, epoch) and ``NodeEndpoints`` are handed
to the channel's :class:`~.controller_channel.ControllerLocator` (shared with the
lifecycle channel). An answer NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (the voter
does not lead, or leads a newer epoch than ours) with a leader hint sends the next Fetch
to that leader at once; without one (an election is on), or UNKNOWN_LEADER_EPOCH (that
voter is behind us), the next voter in turn after a short backoff. The Fetch carries
``CurrentLeaderEpoch`` = the newest epoch known. The image is kept throughout.

**Committed only**: a Raft leader may send records past its high watermark (not yet
committed: a failover can still take them back). Only whole batches below the high
watermark the answer reports are appended and applied; the rest is fetched again once
committed. So the local copy never holds an uncommitted record, a Fetch at offset N
still proves N − 1 applied, and a restart replays only committed records.

The first time the local copy reaches the controller's high watermark the follower
reports it caught up (``WantFence`` ends). While a divergence resync is replaying, the
broker is not told about the shrinking image (its partition logs must not be deleted
because a topic is briefly missing): it hears about the rebuilt image once the resync has
caught up again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..client.errors import KafkaError, KafkaTimeoutError
from ..cluster.broker_records import NoOpRecord
from ..cluster.image import MetadataImage
from ..cluster.metadata_log import METADATA_TOPIC, MetadataLog
from ..cluster.raft.messages import OffsetAndEpoch
from ..cluster.records import MetadataRecord, decode
from ..cluster.snapshot import SnapshotError
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..protocol.records import BatchHeader, decode_records, validate_batches
from .controller_channel import NOT_CONTROLLER, ControllerChannel, ControllerLocator, ControllerUnavailable
from .snapshotter import SnapshotFetchFailed, fetch_snapshot, install_snapshot
from ..aio.tasks import STOP_WAIT_S, cancel_and_wait

log = logging.getLogger("hightide.metadata_follower")

#: KRaft's fixed topic id of ``__cluster_metadata`` (Kafka's ``Uuid.METADATA_TOPIC_ID``).
METADATA_TOPIC_ID = uuid.UUID(int=1)
FETCH_VERSION_MAX = 17
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 << 20
#: How soon to fetch again when the leader's answer holds nothing committed beyond the
#: local copy (its records are past the high watermark, or it does not know the high
#: watermark yet): a commit is one voter round trip away.
UNCOMMITTED_BACKOFF_MS = 5
#: A Fetch unanswered this long past its long-poll means the controller is paused or cut
#: off: reconnect to the next candidate (Kafka's ``controller.quorum.request.timeout.ms``).
FETCH_TIMEOUT_S = 2.0
#: Backoff before asking the next voter when the one asked knows no leader.
NO_LEADER_BACKOFF_MS = 100
_LOG_OVERHEAD = 12  # BaseOffset + BatchLength
_CONTROL_BIT = 0x20
_NOT_LEADER = int(ErrorCode.not_leader_or_follower)
_FENCED_EPOCH = int(ErrorCode.fenced_leader_epoch)
_UNKNOWN_EPOCH = int(ErrorCode.unknown_leader_epoch)


# -- sans-IO: what a Fetch answer means ----------------------------------------------
@dataclass(frozen=True)
class Append:
    """Append these whole batches (starting at the fetch offset) and apply them."""
    data: bytes
    high_watermark: int


@dataclass(frozen=True)
class Truncate:
    """The local copy diverged from the controller's: keep only offsets below ``offset``
    (0: resync from scratch)."""
    offset: int
    reason: str


@dataclass(frozen=True)
class Backoff:
    """Nothing usable (an error, or nothing new after the long-poll); fetch again after
    ``delay_ms`` (0: at once)."""
    delay_ms: int
    high_watermark: int = -1
    reason: str | None = None


@dataclass(frozen=True)
class LoadSnapshot:
    """The fetch offset is below the controller's log start: load snapshot
    ``snapshot_id`` with FetchSnapshot (``leader_epoch`` as CurrentLeaderEpoch), replace
    the local copy and image by it, then fetch on from its end offset."""
    snapshot_id: OffsetAndEpoch
    leader_epoch: int
    high_watermark: int


Outcome = Append | Truncate | Backoff | LoadSnapshot


def whole_batches(data: bytes | memoryview, fetch_offset: int) -> bytes:
    """The prefix of ``data`` made of complete batches, without batches that end below
    ``fetch_offset`` (a Fetch may return a partial last batch and, in Kafka, the start of
    the batch that contains the fetch offset)."""
    mv = memoryview(data)
    start = pos = 0
    while pos + _LOG_OVERHEAD <= len(mv):
        base = int.from_bytes(mv[pos:pos + 8], "big", signed=True)
        size = int.from_bytes(mv[pos + 8:pos + 12], "big", signed=True) + _LOG_OVERHEAD
        if size < _LOG_OVERHEAD or pos + size > len(mv):
            break
        if base < fetch_offset and start == pos:
            last_delta = int.from_bytes(mv[pos + 23:pos + 27], "big", signed=True) if size >= 27 else 0
            if base + last_delta < fetch_offset:
                start = pos + size  # wholly before the fetch offset: skip
        pos += size
    return bytes(mv[start:pos])


def plan(partition: Any, fetch_offset: int) -> Outcome:
    """What the Fetch answer ``partition`` (one kio ``PartitionData``) for ``fetch_offset``
    asks of the follower. Errors back off 100-500 ms; OFFSET_OUT_OF_RANGE or a
    DivergingEpoch mean the local copy has offsets the controller does not. The local
    copy holds committed records only, so that happens only when the controller's log
    was replaced (a new data dir): nothing says where the two histories part, so the
    whole copy is fetched again (truncate to 0; snapshots will make this cheaper). Only
    whole batches below the answer's high watermark are appended; a high watermark below
    the fetch offset (a new leader that has not committed in its epoch yet) or records
    past it are asked for again after ``UNCOMMITTED_BACKOFF_MS``."""
    code = int(partition.error_code)
    hwm = int(partition.high_watermark)
    if code == ErrorCode.offset_out_of_range:
        return Truncate(0, f"the controller answered OFFSET_OUT_OF_RANGE at offset {fetch_offset}")
    if code != ErrorCode.none:
        name = ErrorCode(code).name.upper() if code in ErrorCode._value2member_map_ else str(code)
        return Backoff(500 if code == ErrorCode.unknown_topic_or_partition else 100, -1, name)
    snapshot = getattr(partition, "snapshot_id", None)
    if snapshot is not None and int(snapshot.end_offset) >= 0:  # below the log start (Kafka's SnapshotId)
        leader = getattr(partition, "current_leader", None)
        return LoadSnapshot(OffsetAndEpoch(int(snapshot.end_offset), int(snapshot.epoch)),
                            int(leader.leader_epoch) if leader is not None else -1, hwm)
    diverging = getattr(partition, "diverging_epoch", None)
    if diverging is not None and int(diverging.end_offset) >= 0 and int(diverging.end_offset) < fetch_offset:
        return Truncate(0, f"the controller's log diverges at offset {int(diverging.end_offset)} (epoch "
                           f"{int(diverging.epoch)})")
    if hwm < fetch_offset:  # a new leader that does not know the high watermark yet (Raft: -1 until it commits)
        return Backoff(UNCOMMITTED_BACKOFF_MS, -1)
    data = whole_batches(partition.records or b"", fetch_offset)
    committed = committed_prefix(data, hwm)
    if committed:
        return Append(committed, hwm)
    return Backoff(UNCOMMITTED_BACKOFF_MS if data else 0, hwm)


def committed_prefix(data: bytes, high_watermark: int) -> bytes:
    """The prefix of ``data`` (whole batches) whose batches lie wholly below
    ``high_watermark`` (committed); a batch that straddles it is left out."""
    mv = memoryview(data)
    pos = 0
    while pos + 27 <= len(mv):
        base = int.from_bytes(mv[pos:pos + 8], "big", signed=True)
        size = int.from_bytes(mv[pos + 8:pos + 12], "big", signed=True) + _LOG_OVERHEAD
        last_delta = int.from_bytes(mv[pos + 23:pos + 27], "big", signed=True)
        if base + last_delta >= high_watermark:
            break
        pos += size
    return bytes(mv[:pos]) if pos < len(mv) else data


def is_control(header: BatchHeader) -> bool:
    """A control batch (attributes bit 5): Raft's LeaderChange, KRaft's snapshot header
    and footer — not metadata records; appliers skip them."""
    return bool(header.attributes & _CONTROL_BIT)


def last_batch_epoch(plog: PartitionLog) -> int:
    """The leader epoch of the local copy's last batch (-1 when it has none): the
    ``LastFetchedEpoch`` of the next Fetch."""
    for seg in reversed(plog.segments):
        offset, epoch = max(seg.base_offset, plog.log_start_offset), -1
        while offset < plog.log_end_offset:
            chunk = plog.read(offset, 1 << 20)
            headers = validate_batches(chunk.data, client_origin=False) if chunk.data else []
            if not headers:
                break
            epoch, offset = headers[-1].partition_leader_epoch, headers[-1].last_offset + 1
        if epoch >= 0:
            return epoch
    return -1


def fetch_epoch(metadata: MetadataLog) -> int:
    """``LastFetchedEpoch`` for the next Fetch: the local copy's last batch's epoch, or
    the snapshot's when the copy is empty from it (-1 when neither)."""
    epoch = last_batch_epoch(metadata.log)
    sid = metadata.snapshot_id
    if epoch < 0 and sid is not None and metadata.log.log_end_offset == sid.offset:
        return sid.epoch
    return epoch


def replay(plog: PartitionLog) -> MetadataImage:
    """A new image from the whole local copy (after a truncation)."""
    image = MetadataImage()
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, 1 << 20)
        if not chunk.data:
            break
        for header in validate_batches(chunk.data, client_origin=False):
            if is_control(header):
                offset = header.last_offset + 1
                continue
            batch = memoryview(chunk.data)[header.position:header.position + header.size]
            for rec in decode_records(batch):
                if rec.offset >= offset and rec.value is not None:
                    image.apply(decode(rec.value), rec.offset)
            offset = header.last_offset + 1
    return image


def content_offset(image: MetadataImage) -> int:
    """The offset of the last applied record that is not a NoOp (the image's
    ``content_offset`` when it keeps one; else its last applied offset)."""
    value = getattr(image, "content_offset", None)
    return int(value) if value is not None else image.offset


# -- the IO shell --------------------------------------------------------------------
class MetadataFollower:
    """Follows the controller's metadata log into ``metadata`` (the broker's local copy
    and image). ``epoch`` returns the broker epoch for ReplicaEpoch (-1 before
    registration); ``cluster_id`` the cluster id sent in the Fetch; ``on_applied(
    applied_offset, content_offset)`` runs after each applied batch (and after a resync
    caught up); ``on_caught_up()`` runs once, the first time the local copy reaches the
    controller's high watermark; ``on_reset()`` after a truncation; ``clock`` (the
    node's :class:`~hightide.aio.clock.Clock`) for backoffs and append times."""

    def __init__(self, metadata: MetadataLog, channel: ControllerChannel, node_id: int, *,
                 epoch: Callable[[], int], cluster_id: Callable[[], str | None],
                 on_applied: Callable[[int, int], None], on_caught_up: Callable[[], None],
                 on_reset: Callable[[], None] = lambda: None,
                 durable: Callable[[PartitionLog], Any] | None = None,
                 on_foreign_cluster: Callable[[str], None] = lambda where: None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.metadata = metadata
        self.clock = clock  # backoffs, append and fetch times
        self.channel = channel
        self.node_id = node_id
        self._epoch = epoch
        self._cluster_id = cluster_id
        self._on_applied = on_applied
        self._on_caught_up = on_caught_up
        self._on_reset = on_reset
        self._durable = durable
        self._on_foreign_cluster = on_foreign_cluster
        #: Controllers that answered INCONSISTENT_CLUSTER_ID since the last good answer.
        self._foreign: set[tuple[str, int]] = set()
        self.caught_up = False
        self.high_watermark = -1  # the controller's, from the last answer
        self.last_fetch_ms = 0
        self._resyncing = False
        self._content_offset = content_offset(metadata.image)
        self._last_epoch = fetch_epoch(metadata)
        #: Where the active controller is (shared with the lifecycle channel); None for a
        #: channel without one (tests).
        self.locator: ControllerLocator | None = getattr(channel, "locator", None)
        self._task: asyncio.Task[None] | None = None
        self._last_problem: str | None = None
        self._problems: set[str] = set()  # reasons logged since the last successful fetch

    @property
    def log_end_offset(self) -> int:
        return self.metadata.log.log_end_offset

    @property
    def applied_offset(self) -> int:
        return self.metadata.image.offset

    @property
    def applied_content_offset(self) -> int:
        return self._content_offset

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metadata-follower")

    async def close(self, stop_wait_s: float = STOP_WAIT_S) -> None:
        """Stop fetching (the task waited for up to ``stop_wait_s``; a warning if it does not end)."""
        task, self._task = self._task, None
        await cancel_and_wait(task, stop_wait_s)

    async def _run(self) -> None:
        while True:
            outcome = await self._fetch()
            if isinstance(outcome, Append):
                self._append_and_apply(outcome)
                self._after(outcome.high_watermark)
            elif isinstance(outcome, Truncate):
                self._truncate(outcome)
            elif isinstance(outcome, LoadSnapshot):
                await self._load_snapshot(outcome)
            else:
                if outcome.high_watermark >= 0:
                    self._after(outcome.high_watermark)
                if outcome.reason is not None:
                    self._problem(outcome.reason)
                if outcome.delay_ms:
                    await self.clock.sleep(outcome.delay_ms / 1000)

    def _request(self, version: int) -> dict[str, Any]:
        fetch_offset = self.log_end_offset
        epoch = self.locator.leader_epoch if self.locator is not None else -1
        partition = {"partition": 0, "current_leader_epoch": epoch, "fetch_offset": fetch_offset,
                     "last_fetched_epoch": self._last_epoch, "log_start_offset": -1,
                     "partition_max_bytes": FETCH_MAX_BYTES}
        topic: dict[str, Any] = {"partitions": [partition]}
        if version >= 13:
            topic["topic_id"] = METADATA_TOPIC_ID
        else:
            topic["topic"] = METADATA_TOPIC
        body: dict[str, Any] = {"cluster_id": self._cluster_id(), "max_wait": FETCH_MAX_WAIT_MS, "min_bytes": 1,
                                "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": 0,
                                "session_epoch": -1, "topics": [topic], "forgotten_topics_data": [],
                                "rack_id": ""}
        if version >= 15:
            body["replica_state"] = {"replica_id": self.node_id, "replica_epoch": self._epoch()}
        else:
            body["replica_id"] = self.node_id
        return body

    async def _fetch(self) -> Outcome:
        fetch_offset = self.log_end_offset
        try:
            conn = await self.channel.connection()
            version = conn.pick_version(1, FETCH_VERSION_MAX, 12)
            resp = await self.channel.request(1, version, self._request(version),
                                              timeout_s=FETCH_MAX_WAIT_MS / 1000 + FETCH_TIMEOUT_S)
        except KafkaTimeoutError:
            self.channel.reset()  # a paused or gone controller: reconnect
            return Backoff(100, -1, "the controller did not answer a metadata Fetch in time")
        except (ControllerUnavailable, KafkaError) as exc:
            return Backoff(0 if isinstance(exc, ControllerUnavailable) else 500, -1, str(exc))
        self.last_fetch_ms = self.clock.now_ms()
        asked = (conn.host, conn.port)
        if resp.error_code == NOT_CONTROLLER:
            return self._not_leader(asked, None, resp) or Backoff(NO_LEADER_BACKOFF_MS, -1, "NOT_CONTROLLER")
        if resp.error_code == ErrorCode.inconsistent_cluster_id:
            return self._inconsistent_cluster(asked)
        self._foreign.clear()
        if resp.error_code != ErrorCode.none:
            return Backoff(500, -1, f"metadata Fetch answered {ErrorCode(resp.error_code).name.upper()}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == 0:
                    return self._not_leader(asked, p, resp) or plan(p, fetch_offset)
        return Backoff(500, -1, "the controller's Fetch answer has no __cluster_metadata-0")

    def _inconsistent_cluster(self, asked: tuple[str, int]) -> Outcome:
        """A controller of another cluster: nothing of its answer is applied (the local
        copy is never truncated for it). Ask the next voter; once a majority of the
        controllers (every one, without a quorum) has answered so, the broker halts
        (``on_foreign_cluster``)."""
        self._foreign.add(asked)
        addresses = list(self.locator.addresses) if self.locator is not None else []
        if len(self._foreign) >= len(addresses) // 2 + 1 or not addresses:
            self._on_foreign_cluster(", ".join(f"{h}:{p}" for h, p in sorted(self._foreign)))
            return Backoff(1000, -1, "the controller belongs to another cluster (INCONSISTENT_CLUSTER_ID)")
        self.channel.reset()
        return Backoff(NO_LEADER_BACKOFF_MS, -1, f"the controller at {asked[0]}:{asked[1]} belongs to another "
                                                 "cluster (INCONSISTENT_CLUSTER_ID); trying the next voter")

    def _not_leader(self, asked: tuple[str, int], partition: Any, resp: Any) -> Outcome | None:
        """Follow the answer's leader hint (see the module doc): None when the voter
        asked is the leader and answered (the hint is noted), else where to go next."""
        code = int(partition.error_code) if partition is not None else NOT_CONTROLLER
        leader = getattr(partition, "current_leader", None)
        leader_id = int(leader.leader_id) if leader is not None else -1
        epoch = int(leader.leader_epoch) if leader is not None else -1
        locator = self.locator
        if code not in (_NOT_LEADER, _FENCED_EPOCH, _UNKNOWN_EPOCH, NOT_CONTROLLER):
            if locator is not None and code == ErrorCode.none and leader_id >= 0:
                locator.hint(leader_id, epoch, asked, authoritative=True)
            return None
        name = ErrorCode(code).name.upper()
        if locator is None:
            return Backoff(NO_LEADER_BACKOFF_MS, -1, name)
        if code != _UNKNOWN_EPOCH:
            locator.hint(leader_id, epoch, _endpoint(resp, leader_id))
        if locator.leader_address == asked:  # the leader itself: only our epoch was old
            return Backoff(0, -1)
        self.channel.reset()  # go to the leader (or the next voter)
        if code != _UNKNOWN_EPOCH and locator.leader_address is not None:
            log.info("metadata fetch: %s:%d answered %s; following the leader %s", asked[0], asked[1], name,
                     locator.describe())
            return Backoff(0, -1)
        why = "is behind the epoch this broker knows" if code == _UNKNOWN_EPOCH else "knows no leader"
        return Backoff(NO_LEADER_BACKOFF_MS, -1, f"the controller at {asked[0]}:{asked[1]} answered {name} and "
                                                 f"{why} (epoch {max(epoch, locator.leader_epoch)}); trying the "
                                                 "next voter")

    def _append_and_apply(self, outcome: Append) -> None:
        plog = self.metadata.log
        headers = validate_batches(outcome.data, client_origin=False)
        if headers[0].base_offset != plog.log_end_offset:
            self._truncate(Truncate(min(headers[0].base_offset, plog.log_end_offset),
                                    f"the controller sent offset {headers[0].base_offset}, expected "
                                    f"{plog.log_end_offset}"))
            return
        plog.append(outcome.data, headers, self.clock.now_ms(), headers[-1].partition_leader_epoch)
        self._last_epoch = headers[-1].partition_leader_epoch
        if self._durable is not None:
            fut = self._durable(plog)
            if hasattr(fut, "add_done_callback"):
                fut.add_done_callback(_log_flush_failure)
        records: list[MetadataRecord] = []
        offsets: list[int] = []
        content = self._content_offset
        for h in headers:
            if is_control(h):
                continue
            batch = memoryview(outcome.data)[h.position:h.position + h.size]
            for rec in decode_records(batch):
                if rec.value is None:
                    continue
                record = decode(rec.value)
                records.append(record)
                offsets.append(rec.offset)
                if not isinstance(record, NoOpRecord):
                    content = rec.offset
        self.metadata.apply(records, offsets)
        self._content_offset = max(content, content_offset(self.metadata.image)) if records else content
        if not self._resyncing:
            self._on_applied(self.applied_offset, self._content_offset)

    def _after(self, high_watermark: int) -> None:
        self.high_watermark = high_watermark
        if self._last_problem is not None:
            log.info("following the controller's metadata log again at offset %d", self.log_end_offset)
            self._last_problem = None
            self._problems.clear()
        if high_watermark < 0 or self.log_end_offset < high_watermark:
            return
        if self._resyncing:
            self._resyncing = False
            log.info("metadata resync caught up at offset %d", self.log_end_offset)
            self._on_applied(self.applied_offset, self._content_offset)
        if not self.caught_up:
            self.caught_up = True
            log.info("metadata log caught up with the controller at offset %d", self.log_end_offset)
            self._on_caught_up()

    def _truncate(self, outcome: Truncate) -> None:
        plog = self.metadata.log
        log.warning("local metadata copy truncated to offset %d: %s; fetching it again from the controller",
                    outcome.offset, outcome.reason)
        self.metadata.truncate_to(outcome.offset)  # and the snapshots past it; the image rebuilt
        self._content_offset = content_offset(self.metadata.image)
        self._last_epoch = fetch_epoch(self.metadata)
        self._resyncing = True
        self._on_reset()

    async def _load_snapshot(self, outcome: LoadSnapshot) -> None:
        """Download snapshot ``outcome.snapshot_id``, install it (see
        :mod:`.snapshotter`), and tell the broker about the new image (unless a resync
        is replaying). A failure backs off and fetches the log again (its answer names
        the snapshot to load, which may be a newer one by then)."""
        sid, t0 = outcome.snapshot_id, self.clock.monotonic()
        log.info("metadata fetch at offset %d is below the controller's log start: loading snapshot %d-%d",
                 self.log_end_offset, sid.offset, sid.epoch)
        try:
            data = await fetch_snapshot(self.channel, sid, replica_id=self.node_id, leader_epoch=outcome.leader_epoch,
                                        cluster_id=self._cluster_id())
            await install_snapshot(self.metadata, sid, data)
        except (SnapshotFetchFailed, SnapshotError, OSError, ControllerUnavailable, KafkaError) as exc:
            self._problem(f"loading metadata snapshot {sid.offset}-{sid.epoch} failed: {exc}")
            await self.clock.sleep(0.5)
            return
        self._last_epoch = sid.epoch
        self._content_offset = content_offset(self.metadata.image)
        log.info("loaded metadata snapshot %d-%d (%d bytes, %d topics) in %.0f ms; following the log from offset %d",
                 sid.offset, sid.epoch, len(data), len(self.metadata.image.topics),
                 (self.clock.monotonic() - t0) * 1000,
                 self.log_end_offset)
        if not self._resyncing:
            self._on_applied(self.applied_offset, self._content_offset)
        self._after(outcome.high_watermark)

    def _problem(self, reason: str) -> None:
        """Log ``reason`` once until the next successful fetch (several voters in turn
        give alternating reasons; each is logged once)."""
        if reason not in self._problems:
            log.warning("metadata fetch: %s (retrying)", reason)
            self._problems.add(reason)
        self._last_problem = reason


def _endpoint(resp: Any, node_id: int) -> tuple[str, int] | None:
    """The address of ``node_id`` among a Fetch answer's NodeEndpoints (v16+), if listed."""
    for node in getattr(resp, "node_endpoints", None) or ():
        if int(node.node_id) == node_id:
            return str(node.host), int(node.port)
    return None


def _log_flush_failure(fut: Any) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("fsync of the local metadata copy failed: %s", fut.exception())
