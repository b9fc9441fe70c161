"""KRaft metadata snapshots: the metadata image as a file of record batches (sans-IO
codec plus a small file store over the storage seam).

Theory of operation
-------------------
A snapshot is the :class:`~hightide.cluster.image.MetadataImage` after applying every
record below its **end offset**, written in Kafka's layout (``RecordsSnapshotWriter``):

* file ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`` in the
  ``__cluster_metadata-0`` directory; ``epoch`` is the leader epoch of the last record it
  covers (the pair is Kafka's ``OffsetAndEpoch`` snapshot id). It is written as
  ``….checkpoint.part``, fsynced and renamed, so a ``.checkpoint`` file is always whole;
  leftover ``.part`` files are removed when the store opens, deleted snapshots are first
  renamed ``….checkpoint.deleted`` (the log loader removes those too);
* v2 record batches with partition leader epoch = the snapshot's epoch and offsets
  counted from 0 inside the file: a control batch holding one ``SnapshotHeader`` control
  record (control type 3; value: Kafka's ``SnapshotHeaderRecord`` v0 through kio:
  version, LastContainedLogTimestamp), then the image as metadata records (the values
  hightide's metadata log stores, :mod:`hightide.cluster.records`) in batches of at most
  :data:`MAX_BATCH_BYTES` / :data:`MAX_BATCH_RECORDS`, then a control batch with one
  ``SnapshotFooter`` control record (type 4). Every batch carries its CRC-32C.

Loading applies every record of a snapshot at offset ``end offset - 1`` (Kafka's
QuorumController replays snapshot records at the snapshot's last contained offset), so
the loaded image equals the image the log replay would have built, except for values
that are offsets of individual records: a broker registration's ``registration_offset``
and the image's ``content_offset`` become ``end offset - 1`` (both only ever compared
with "has the broker applied at least this", so they stay safe), and the legacy merged
``broker_configs`` view, which a snapshot rebuilds from the per-broker configs.

The voter set (KIP-853): with dynamic voters (``kraft.version`` 1) the header batch is
followed by one control batch holding a KRaftVersionRecord and the VotersRecord in
effect at the snapshot's end (Kafka's layout), so a replica that installs the snapshot
knows its voters; a static quorum's snapshots have none. ``hightide storage format
--standalone / --initial-controllers`` writes the *bootstrap* snapshot
``00000000000000000000-0000000000.checkpoint``: header, voter set, footer and no records
(:func:`encode_bootstrap_snapshot`, Kafka's bootstrap checkpoint).

API for the Raft shell and the snapshotter (``hightide.node.snapshotter``):
:func:`copy_image` (on the owning thread: a consistent copy, cheap),
:func:`image_records` (the image as frozen records), :func:`encode_snapshot` (bytes), :func:`decode_snapshot` /
:func:`image_from_snapshot` (anywhere: raise :class:`SnapshotError` on any defect), and
:class:`SnapshotStore` (blocking file IO: run it off the event loop).
"""

from __future__ import annotations

import io
import logging
import os
import struct
from collections.abc import Iterator, Sequence
import dataclasses
from dataclasses import dataclass, fields

from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.serial import entity_writer
from kio.static.primitive import i16, i64

from ..log.storage import POSIX, Storage
from ..security.authorizer import AclIndex
from ..protocol.records import InvalidRecords, build_batch, decode_records, validate_batches
from ..protocol.tolerant import read_tolerant
from .broker_records import BrokerRegistrationChangeRecord, RegisterBrokerRecord
from .image import MetadataImage, TopicImage
from .raft.batches import KRAFT_VERSION, KRAFT_VOTERS, voters_batch
from .raft.messages import OffsetAndEpoch
from .raft.voters import VoterSet
from .security_image import SecurityImage
from .records import (
    BROKER_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
    decode,
    encode,
)
from .quota_records import ClientQuotaRecord
from .security_records import AccessControlEntryRecord, UserScramCredentialRecord

__all__ = [
    "SNAPSHOT_SUFFIX", "PARTIAL_SUFFIX", "DELETED_SUFFIX", "SnapshotError", "DecodedSnapshot", "SnapshotStore",
    "snapshot_name", "parse_snapshot_name", "copy_image", "image_records", "encode_snapshot", "decode_snapshot",
    "image_from_snapshot", "load_latest", "encode_bootstrap_snapshot", "BOOTSTRAP_SNAPSHOT",
]

log = logging.getLogger("hightide.metadata")

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
#: Kafka's ControlRecordType codes.
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4
MAX_BATCH_BYTES = 1 << 20
MAX_BATCH_RECORDS = 10_000
_CONTROL_KEY = struct.Struct(">hh")  # ControlRecordType key: version 0, type


class SnapshotError(ValueError):
    """A snapshot is unusable (truncated, corrupt, not a snapshot); the message says why."""


# -- names ---------------------------------------------------------------------------
def snapshot_name(sid: OffsetAndEpoch) -> str:
    """Kafka's file name of snapshot ``sid``: ``%020d-%010d.checkpoint``."""
    return f"{sid.offset:020d}-{sid.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> OffsetAndEpoch | None:
    """The snapshot id a file name stands for, or None if it is not a whole snapshot's
    name (``.part`` and ``.deleted`` files included)."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[:-len(SNAPSHOT_SUFFIX)]
    offset, dash, epoch = stem.partition("-")
    if not dash or len(offset) != 20 or len(epoch) != 10 or not offset.isdigit() or not epoch.isdigit():
        return None
    return OffsetAndEpoch(int(offset), int(epoch))


# -- the image as records ------------------------------------------------------------
def copy_image(image: MetadataImage) -> MetadataImage:
    """A copy of ``image`` that later changes to ``image`` leave alone, for a snapshot
    encoded on another thread. Every mutable container is copied (topics, their partition
    and config maps, configs, features, brokers, ACLs, credentials); the partition images
    themselves are shared, as :meth:`MetadataImage.apply` replaces a partition's image and
    never changes one in place. Cost: a few dict copies per topic (about 1 µs per
    partition), on the caller's thread."""
    topics = {name: _copy_topic(t) for name, t in image.topics.items()}
    acls = AclIndex()
    for acl_id, binding in image.security.acls.by_id.items():
        acls.add(acl_id, binding)
    return dataclasses.replace(
        image, topics=topics, topics_by_id={t.topic_id: t for t in topics.values()},
        broker_configs=dict(image.broker_configs),
        broker_dynamic={k: dict(v) for k, v in image.broker_dynamic.items()},
        group_configs={k: dict(v) for k, v in image.group_configs.items()}, features=dict(image.features),
        brokers={b: dataclasses.replace(r) for b, r in image.brokers.items()},
        security=SecurityImage(acls, dict(image.security.scram)), quotas=image.quotas.copy())


def _copy_topic(topic: TopicImage) -> TopicImage:
    """A shallow copy with its own partition and config maps (every field kept; 3-4x
    faster than ``dataclasses.replace``, which matters at 10,000 topics)."""
    copy = object.__new__(TopicImage)
    copy.__dict__.update(topic.__dict__)
    copy.partitions = dict(topic.partitions)
    copy.configs = dict(topic.configs)
    return copy


def image_records(image: MetadataImage) -> list[MetadataRecord]:
    """The records that rebuild ``image`` when applied to an empty one, in an order that
    applies (features, brokers, topics with their partitions and configs, the other
    configs, producer ids, ACLs, SCRAM credentials, client quotas). The records are frozen: the list
    stays valid while the image keeps changing. Cost: one object per record, on the
    caller's thread."""
    out: list[MetadataRecord] = [FeatureLevelRecord(n, lvl) for n, lvl in sorted(image.features.items())]
    for bid in sorted(image.brokers):
        reg = image.brokers[bid]
        out.append(RegisterBrokerRecord(reg.broker_id, str(reg.incarnation_id), reg.epoch, reg.endpoints,
                                        reg.features, reg.rack, reg.fenced, reg.in_controlled_shutdown))
    names = [f.name for f in fields(PartitionRecord) if f.name != "topic_id"]
    for topic in image.topics.values():
        tid = str(topic.topic_id)
        out.append(TopicRecord(topic.name, tid))
        for p in sorted(topic.partitions):
            part = topic.partitions[p]
            out.append(PartitionRecord(tid, **{n: getattr(part, n) for n in names}))
        out.extend(ConfigRecord(TOPIC_RESOURCE, topic.name, k, v) for k, v in sorted(topic.configs.items()))
    for resource in sorted(image.broker_dynamic):
        out.extend(ConfigRecord(BROKER_RESOURCE, resource, k, v)
                   for k, v in sorted(image.broker_dynamic[resource].items()))
    for group in sorted(image.group_configs):
        out.extend(ConfigRecord(GROUP_RESOURCE, group, k, v) for k, v in sorted(image.group_configs[group].items()))
    if image.next_producer_id:
        out.append(ProducerIdsRecord(image.next_producer_id))
    for acl_id, b in sorted(image.security.acls.by_id.items()):
        out.append(AccessControlEntryRecord(acl_id, int(b.resource_type), b.resource_name, int(b.pattern_type),
                                            b.principal, b.host, int(b.operation), int(b.permission)))
    for (user, mechanism), cred in sorted(image.security.scram.items()):
        out.append(UserScramCredentialRecord.of(user, mechanism, cred.salt, cred.stored_key, cred.server_key,
                                                cred.iterations))
    for entity, values in sorted(image.quotas.entities.items(), key=lambda kv: repr(kv[0])):
        out.extend(ClientQuotaRecord(entity, k, v) for k, v in sorted(values.items()))
    return out


# -- bytes ---------------------------------------------------------------------------
def _entity_bytes(entity: SnapshotHeaderRecord | SnapshotFooterRecord) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _control_batch(kind: int, value: bytes, offset: int, epoch: int, now_ms: int) -> bytes:
    return build_batch([(_CONTROL_KEY.pack(0, kind), value, [], now_ms)], base_offset=offset, is_control=True,
                       partition_leader_epoch=epoch)


def _chunks(values: Sequence[bytes]) -> Iterator[Sequence[bytes]]:
    start = size = 0
    for i, v in enumerate(values):
        if i > start and (size + len(v) > MAX_BATCH_BYTES or i - start >= MAX_BATCH_RECORDS):
            yield values[start:i]
            start, size = i, 0
        size += len(v) + 8
    if start < len(values):
        yield values[start:]


def encode_snapshot(records: Sequence[MetadataRecord], sid: OffsetAndEpoch, last_contained_ms: int,
                    now_ms: int, voters: VoterSet | None = None) -> bytes:
    """The snapshot file's bytes: header batch, the voter set (``voters``, a dynamic
    quorum's), ``records`` in batches, footer batch. ``last_contained_ms`` is the append
    time of the last log record it covers (Kafka's LastContainedLogTimestamp); ``now_ms``
    stamps the batches."""
    header = SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(last_contained_ms))
    parts = [_control_batch(SNAPSHOT_HEADER, _entity_bytes(header), 0, sid.epoch, now_ms)]
    offset = 1
    if voters is not None:
        parts.append(voters_batch(voters, sid.epoch, offset, now_ms))
        offset += 2
    for chunk in _chunks([encode(r) for r in records]):
        parts.append(build_batch([(None, v, [], now_ms) for v in chunk], base_offset=offset,
                                 partition_leader_epoch=sid.epoch))
        offset += len(chunk)
    parts.append(_control_batch(SNAPSHOT_FOOTER, _entity_bytes(SnapshotFooterRecord(version=i16(0))), offset,
                                sid.epoch, now_ms))
    return b"".join(parts)


#: The id of the bootstrap snapshot a dynamic quorum's controllers are formatted with.
BOOTSTRAP_SNAPSHOT = OffsetAndEpoch(0, 0)


def encode_bootstrap_snapshot(voters: VoterSet, now_ms: int) -> bytes:
    """Kafka's bootstrap checkpoint (``0-0``): the initial voter set and no records."""
    return encode_snapshot((), BOOTSTRAP_SNAPSHOT, -1, now_ms, voters)


@dataclass(frozen=True)
class DecodedSnapshot:
    """A whole, checked snapshot: its records and the header's LastContainedLogTimestamp."""
    records: list[MetadataRecord]
    last_contained_ms: int


def _control_type(batch: memoryview, what: str) -> tuple[int, bytes]:
    recs = decode_records(batch)
    if len(recs) != 1 or recs[0].key is None or len(recs[0].key) < 4 or recs[0].value is None:
        raise SnapshotError(f"the {what} batch does not hold one control record")
    return _CONTROL_KEY.unpack_from(recs[0].key)[1], recs[0].value


def decode_snapshot(data: bytes | memoryview) -> DecodedSnapshot:
    """Check and decode a whole snapshot file. Raises :class:`SnapshotError` if any batch
    is truncated or fails its CRC, the first batch is not a SnapshotHeader control batch,
    the last not a SnapshotFooter, a control batch other than the voter set's
    (KRaftVersion, Voters) sits in between, or a record does not decode."""
    try:
        headers = validate_batches(data, client_origin=False)
    except InvalidRecords as exc:
        raise SnapshotError(str(exc)) from None
    mv = memoryview(data)
    if len(headers) < 2 or not headers[0].is_control or not headers[-1].is_control:
        raise SnapshotError("no SnapshotHeader and SnapshotFooter control batches (a partial file?)")
    try:
        kind, value = _control_type(mv[headers[0].position:headers[0].position + headers[0].size], "first")
        if kind != SNAPSHOT_HEADER:
            raise SnapshotError(f"the first control record has type {kind}, not SnapshotHeader (3)")
        header, _ = read_tolerant(SnapshotHeaderRecord, memoryview(value), 0)
        h = headers[-1]
        kind, _ = _control_type(mv[h.position:h.position + h.size], "last")
        if kind != SNAPSHOT_FOOTER:
            raise SnapshotError(f"the last control record has type {kind}, not SnapshotFooter (4)")
        records: list[MetadataRecord] = []
        for h in headers[1:-1]:
            if h.is_control:
                kinds = {_CONTROL_KEY.unpack_from(r.key)[1] for r in decode_records(mv[h.position:h.position + h.size])
                         if r.key is not None and len(r.key) >= 4}
                if not kinds or not kinds <= {KRAFT_VERSION, KRAFT_VOTERS}:
                    raise SnapshotError(f"a control batch at offset {h.base_offset} inside the snapshot")
                continue
            records.extend(decode(r.value) for r in decode_records(mv[h.position:h.position + h.size])
                           if r.value is not None)
    except SnapshotError:
        raise
    except (InvalidRecords, ValueError, KeyError, TypeError, struct.error) as exc:
        raise SnapshotError(f"undecodable record: {exc}") from None
    return DecodedSnapshot(records, int(header.last_contained_log_timestamp))


def image_from_snapshot(data: bytes | memoryview, sid: OffsetAndEpoch) -> MetadataImage:
    """A new image from snapshot ``sid``'s bytes (every record applied at offset
    ``sid.offset - 1``, as Kafka). Raises :class:`SnapshotError`."""
    decoded = decode_snapshot(data)
    image = MetadataImage()
    at = sid.offset - 1
    try:
        for r in decoded.records:
            image.apply(r, at)
    except (KeyError, ValueError, TypeError) as exc:
        raise SnapshotError(f"record does not apply: {exc!r}") from None
    image.offset = image.content_offset = at
    return image


# -- files ---------------------------------------------------------------------------
class SnapshotStore:
    """The snapshot files of one metadata log directory, over the storage seam. Every
    method does blocking file IO: call it off the event loop (``asyncio.to_thread``)
    unless the cost is one small directory operation."""

    def __init__(self, directory: str, storage: Storage = POSIX) -> None:
        self.directory = directory
        self.storage = storage

    def path(self, sid: OffsetAndEpoch) -> str:
        return os.path.join(self.directory, snapshot_name(sid))

    def remove_partial(self) -> None:
        """Delete leftovers of interrupted writes and deletions (``.part``,
        ``.deleted``)."""
        for name in self.storage.listdir(self.directory):
            if name.endswith((PARTIAL_SUFFIX, DELETED_SUFFIX)):
                self.storage.unlink(os.path.join(self.directory, name))

    def ids(self) -> list[OffsetAndEpoch]:
        """Ids of the whole snapshot files, oldest first."""
        ids = [parse_snapshot_name(n) for n in self.storage.listdir(self.directory)]
        return sorted((s for s in ids if s is not None), key=lambda s: (s.offset, s.epoch))

    def latest(self) -> OffsetAndEpoch | None:
        ids = self.ids()
        return ids[-1] if ids else None

    def size(self, sid: OffsetAndEpoch) -> int:
        """Raises OSError (ENOENT) if there is no such snapshot."""
        f = self.storage.open(self.path(sid), create=False)
        try:
            return f.size()
        finally:
            f.close()

    def read(self, sid: OffsetAndEpoch, position: int = 0, max_bytes: int | None = None) -> bytes:
        """``max_bytes`` (all when None) of snapshot ``sid`` from byte ``position``.
        Raises OSError (ENOENT) if there is no such snapshot."""
        f = self.storage.open(self.path(sid), create=False)
        try:
            size = f.size()
            n = size - position if max_bytes is None else min(max_bytes, size - position)
            return f.pread(max(n, 0), position)
        finally:
            f.close()

    def write(self, sid: OffsetAndEpoch, data: bytes) -> int:
        """Write snapshot ``sid`` durably: ``.part`` file, fsync, rename, directory fsync.
        Returns its size. Raises OSError (the ``.part`` file removed)."""
        final = self.path(sid)
        part = final[:-len(SNAPSHOT_SUFFIX)] + PARTIAL_SUFFIX
        try:
            f = self.storage.open(part, truncate=True)
            try:
                f.pwrite(data, 0)
                f.fsync()
            finally:
                f.close()
            self.storage.replace(part, final)
            self.storage.fsync_dir(self.directory)
        except OSError:
            try:
                self.storage.unlink(part)
            except OSError:
                pass
            raise
        return len(data)

    def delete(self, sid: OffsetAndEpoch) -> None:
        """Delete one snapshot (renamed ``.deleted`` first, as Kafka)."""
        final = self.path(sid)
        gone = final[:-len(SNAPSHOT_SUFFIX)] + DELETED_SUFFIX
        self.storage.replace(final, gone)
        self.storage.unlink(gone)

    def delete_before(self, sid: OffsetAndEpoch) -> list[OffsetAndEpoch]:
        """Delete every snapshot older than ``sid`` (the latest is kept, as Kafka keeps
        the snapshot its log start offset needs). Returns the ids deleted."""
        older = [s for s in self.ids() if (s.offset, s.epoch) < (sid.offset, sid.epoch)]
        for s in older:
            self.delete(s)
        return older

    def delete_all(self) -> None:
        for s in self.ids():
            self.delete(s)


def load_latest(store: SnapshotStore) -> tuple[OffsetAndEpoch, MetadataImage] | None:
    """The newest snapshot that decodes whole, with its image, or None. A snapshot that
    does not (corrupt, truncated, unreadable) is skipped with a WARNING naming the file
    and the defect, and the next older one is tried."""
    for sid in reversed(store.ids()):
        try:
            image = image_from_snapshot(store.read(sid), sid)
        except (SnapshotError, OSError) as exc:
            log.warning("metadata snapshot %s is unusable (%s): ignored, trying an older snapshot or the log",
                        store.path(sid), exc)
            continue
        return sid, image
    return None
