"""Raft's log entries as record batches, without kio (the shell's append path).

Every :class:`~.messages.Entry` payload is one v2 record batch. :func:`encode_entries`
writes each batch's BaseOffset and PartitionLeaderEpoch (neither is covered by the CRC,
as Kafka's leader rewrites them); :func:`leader_change_batch` builds the control batch a
leader appends first in every epoch (Kafka's LeaderChangeMessage, version 0);
:func:`voters_batch` / :func:`read_voters_batches` write and read the voter set of a
dynamic quorum (KIP-853: a control batch with a KRaftVersionRecord and a VotersRecord,
both version 0; the same bytes kio's writer produces, tests/unit/test_raft_voters.py).

These are here rather than in :mod:`.wire` (which converts the peers' messages with
kio's schemas, ~20-40 ms of imports) so that a lone voter — ``hightide serve`` — writes
its log without loading the inter-voter wire code it never uses.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Sequence

from ...protocol.records import LOG_OVERHEAD, build_batch, decode_records, iter_headers
from . import messages as m
from .voters import VoterNode, VoterSet

__all__ = ["encode_entries", "leader_change_batch", "leader_change_message", "LEADER_CHANGE", "CONTROL_KEY",
           "KRAFT_VERSION", "KRAFT_VOTERS", "voters_batch", "voters_entry", "voters_record", "read_voters_batches",
           "parse_voters_record", "uuid_bytes", "uuid_text"]

_BASE_AND_LENGTH = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")
#: Kafka's ControlRecordType.LEADER_CHANGE; a control record's key is (version 0, type).
LEADER_CHANGE = 2
#: Kafka's ControlRecordType.KRAFT_VERSION and KRAFT_VOTERS (KIP-853).
KRAFT_VERSION = 5
KRAFT_VOTERS = 6
_U16 = struct.Struct(">H")
CONTROL_KEY = struct.Struct(">hh")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def encode_entries(base_offset: int, entries: tuple[m.Entry, ...]) -> bytes:
    """The batches of ``entries`` back to back, starting at ``base_offset``, each with its
    BaseOffset and PartitionLeaderEpoch set. Raises ValueError if a payload is not one
    batch of ``entry.count`` records."""
    out = bytearray()
    offset = base_offset
    for e in entries:
        start = len(out)
        out += e.payload
        headers = list(iter_headers(out, start))
        if len(headers) != 1 or headers[0].last_offset_delta + 1 != e.count \
                or headers[0].length + LOG_OVERHEAD != len(e.payload):
            raise ValueError(f"entry at {offset} is not one record batch of {e.count} records")
        _BASE_AND_LENGTH.pack_into(out, start, offset, headers[0].length)
        _EPOCH.pack_into(out, start + LOG_OVERHEAD, e.epoch)
        offset += e.count
    return bytes(out)


def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _voters(out: bytearray, voters: Sequence[int]) -> None:
    """A compact array of Voter {VoterId int32, no tagged fields}."""
    _uvarint(out, len(voters) + 1)
    for v in voters:
        out += _I32.pack(v)
        out.append(0)


def leader_change_message(leader_id: int, voters: Sequence[int], granting_voters: Sequence[int] = ()) -> bytes:
    """Kafka's LeaderChangeMessage, version 0 (flexible: compact arrays, empty tagged
    fields): Version int16, LeaderId int32, Voters, GrantingVoters (the same bytes kio's
    writer produces: tests/unit/test_raft_wire.py)."""
    out = bytearray(_I16.pack(0))
    out += _I32.pack(leader_id)
    _voters(out, voters)
    _voters(out, granting_voters)
    out.append(0)
    return bytes(out)


def leader_change_batch(leader_id: int, epoch: int, voters: Sequence[int],
                        granting_voters: Sequence[int] = ()) -> bytes:
    """Kafka's LeaderChangeMessage as a control batch (one control record, key = version
    0 and type LEADER_CHANGE, value = the message, version 0), with PartitionLeaderEpoch
    ``epoch``; the leader appends it first in every epoch. BaseOffset is set on append."""
    key = CONTROL_KEY.pack(0, LEADER_CHANGE)
    return build_batch([(key, leader_change_message(leader_id, voters, granting_voters), [],
                         int(time.time() * 1000))], is_control=True, partition_leader_epoch=epoch)


# --- the voter set (KIP-853) ---------------------------------------------------------------

def uuid_bytes(text: str) -> bytes:
    """Kafka's Uuid text (22 characters of URL-safe base64) as its 16 bytes; "" is the
    zero Uuid. Raises ValueError for other text."""
    if not text:
        return bytes(16)
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Uuid: {text!r}")
    return raw


def uuid_text(raw: bytes) -> str:
    """The text of a 16-byte Uuid ("" for the zero Uuid)."""
    return "" if raw == bytes(16) else base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _string(out: bytearray, text: str) -> None:
    data = text.encode()
    _uvarint(out, len(data) + 1)
    out += data


def voters_record(voters: VoterSet) -> bytes:
    """Kafka's VotersRecord, version 0 (flexible): Version int16, Voters [VoterId int32,
    VoterDirectoryId uuid, Endpoints [Name, Host, Port uint16], KRaftVersionFeature
    {MinSupportedVersion, MaxSupportedVersion int16: 0..1}]."""
    out = bytearray(_I16.pack(0))
    _uvarint(out, len(voters.nodes) + 1)
    for n in voters.nodes:
        out += _I32.pack(n.node_id)
        out += uuid_bytes(n.directory_id)
        _uvarint(out, len(n.endpoints) + 1)
        for name, host, port in n.endpoints:
            _string(out, name)
            _string(out, host)
            out += _U16.pack(port)
            out.append(0)
        out += _I16.pack(0) + _I16.pack(1)
        out.append(0)   # the feature's tagged fields
        out.append(0)   # the voter's
    out.append(0)
    return bytes(out)


def voters_batch(voters: VoterSet, epoch: int, base_offset: int = 0, now_ms: int | None = None) -> bytes:
    """The control batch of a voter set: a KRaftVersionRecord (kraft.version 1) and a
    VotersRecord, with PartitionLeaderEpoch ``epoch`` (in the log, BaseOffset is set on
    append; in a snapshot, ``base_offset``)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    kraft_version = _I16.pack(0) + _I16.pack(1) + b"\x00"
    return build_batch([(CONTROL_KEY.pack(0, KRAFT_VERSION), kraft_version, [], now),
                        (CONTROL_KEY.pack(0, KRAFT_VOTERS), voters_record(voters), [], now)],
                       base_offset=base_offset, is_control=True, partition_leader_epoch=epoch)


def voters_entry(voters: VoterSet, epoch: int) -> tuple[bytes, int]:
    """The Raft core's voter-set entry: (:func:`voters_batch`, its 2 offsets)."""
    return voters_batch(voters, epoch), 2


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError("VotersRecord: truncated")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError("VotersRecord: bad varint")

    def string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise ValueError("VotersRecord: null string")
        return self.take(n).decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def parse_voters_record(value: bytes) -> VoterSet:
    """A VotersRecord (version 0) back into a :class:`VoterSet`. Raises ValueError."""
    r = _Reader(value)
    if _I16.unpack(r.take(2))[0] != 0:
        raise ValueError("VotersRecord: unknown version")
    nodes = []
    for _ in range(r.uvarint() - 1):
        node_id = _I32.unpack(r.take(4))[0]
        directory = uuid_text(r.take(16))
        endpoints = []
        for _ in range(r.uvarint() - 1):
            name, host = r.string(), r.string()
            endpoints.append((name, host, _U16.unpack(r.take(2))[0]))
            r.skip_tags()
        r.take(4)
        r.skip_tags()
        r.skip_tags()
        nodes.append(VoterNode(node_id, directory, tuple(endpoints)))
    r.skip_tags()
    return VoterSet.of(nodes)


def read_voters_batches(data: bytes) -> VoterSet | None:
    """The last voter set in ``data`` (record batches: a log entry, or a snapshot file):
    its last VotersRecord control record; None if it holds none. Only control batches
    are opened. Raises ValueError for a VotersRecord it cannot read."""
    found: VoterSet | None = None
    for h in iter_headers(data):
        if not h.attributes & 0x20:
            continue
        for rec in decode_records(memoryview(data)[h.position:h.position + h.length + LOG_OVERHEAD]):
            if rec.key is not None and len(rec.key) >= 4 and rec.value is not None \
                    and CONTROL_KEY.unpack_from(rec.key)[1] == KRAFT_VOTERS:
                found = parse_voters_record(bytes(rec.value))
    return found
