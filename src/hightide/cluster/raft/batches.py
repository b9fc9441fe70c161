"""Raft's log entries as record batches, without kio (the shell's append path).

Every :class:`~.messages.Entry` payload is one v2 record batch. :func:`encode_entries`
writes each batch's BaseOffset and PartitionLeaderEpoch (neither is covered by the CRC,
as Kafka's leader rewrites them); :func:`leader_change_batch` builds the control batch a
leader appends first in every epoch (Kafka's LeaderChangeMessage, version 0).

These are here rather than in :mod:`.wire` (which converts the peers' messages with
kio's schemas, ~20-40 ms of imports) so that a lone voter — ``hightide serve`` — writes
its log without loading the inter-voter wire code it never uses.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

from ...protocol.records import LOG_OVERHEAD, build_batch, iter_headers
from . import messages as m

__all__ = ["encode_entries", "leader_change_batch", "leader_change_message", "LEADER_CHANGE", "CONTROL_KEY"]

_BASE_AND_LENGTH = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")
#: Kafka's ControlRecordType.LEADER_CHANGE; a control record's key is (version 0, type).
LEADER_CHANGE = 2
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
