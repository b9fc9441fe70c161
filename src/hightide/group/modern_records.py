"""The encoding shared by KIP-848 consumer group and KIP-932 share group records.

Both families of ``__consumer_offsets`` records (:mod:`.consumer_records`, key versions
3–8, and :mod:`.share_records`, 10–15) are laid out the same way, as Kafka generates
them from its group-coordinator message definitions:

* a key is non-flexible: int16 version (the record type), the group id, and for
  member-scoped records the member id (int16-length strings);
* a value is int16 version 0, then its fields in the flexible encoding — compact
  (uvarint length + 1) strings and arrays, 16-byte uuids — and a tagged-field section
  after every struct. Tagged fields a schema does not name are skipped on read; a named
  one is written only when it differs from its default;
* a null value is a tombstone.

So a record type here is *declared*, not coded: a key class derives from
:class:`GroupRecordKey` or :class:`MemberRecordKey` and sets ``VERSION``; a value class
gets a :class:`Struct` schema naming its fields and their :class:`Type` in wire order.
:class:`Codec` runs the schemas of one family. Errors are
:class:`~.records.RecordFormatError` (truncation, trailing bytes, a null where the
schema forbids one, a tagged field of the wrong size, an unknown value version).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from .records import _R, _W, RecordFormatError

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]
"""An assignment on the wire: ``((topic_id, (partition, ...)), ...)``."""


# -- keys -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GroupRecordKey:
    """A ``{group}`` key; a subclass per record type sets ``VERSION`` (and ``__slots__ = ()``)."""

    group_id: str
    VERSION: ClassVar[int] = -1


@dataclass(frozen=True, slots=True)
class MemberRecordKey:
    """A ``{group, member}`` key; a subclass per record type sets ``VERSION``."""

    group_id: str
    member_id: str
    VERSION: ClassVar[int] = -1


# -- field types ----------------------------------------------------------------------------------
class _FW(_W):
    """``_W`` plus the flexible encodings."""

    __slots__ = ()

    def uvarint(self, v: int) -> _FW:
        while v >= 0x80:
            self.b.append((v & 0x7F) | 0x80)
            v >>= 7
        self.b.append(v)
        return self

    def raw(self, data: bytes) -> _FW:
        self.b += data
        return self


class Type:
    """One wire type: ``write(w, value)`` and ``read(r) -> value``."""

    def write(self, w: _FW, v: Any) -> None:
        raise NotImplementedError

    def read(self, r: _R) -> Any:
        raise NotImplementedError


class _Fixed(Type):
    def __init__(self, fmt: str) -> None:
        self.s = struct.Struct(fmt)

    def write(self, w: _FW, v: int) -> None:
        w.raw(self.s.pack(v))

    def read(self, r: _R) -> int:
        return r._take(self.s)


class _Uuid(Type):
    def write(self, w: _FW, v: uuid.UUID) -> None:
        w.raw(v.bytes)

    def read(self, r: _R) -> uuid.UUID:
        return uuid.UUID(bytes=r._raw(16))


class _String(Type):
    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable

    def write(self, w: _FW, v: str | None) -> None:
        if v is None:
            w.uvarint(0)
            return
        data = v.encode()
        w.uvarint(len(data) + 1).raw(data)

    def read(self, r: _R) -> str | None:
        s = r.string(flexible=True)
        if s is None and not self.nullable:
            raise RecordFormatError("null in a non-nullable string")
        return s


class Array(Type):
    """A non-nullable compact array of ``elem``, read as a tuple."""

    def __init__(self, elem: Type) -> None:
        self.elem = elem

    def write(self, w: _FW, v: Iterable[Any]) -> None:
        items = tuple(v)
        w.uvarint(len(items) + 1)
        for item in items:
            self.elem.write(w, item)

    def read(self, r: _R) -> tuple:
        n = r.array_len(True)
        if n < 0:
            raise RecordFormatError("null in a non-nullable array")
        return tuple(self.elem.read(r) for _ in range(n))


INT8 = _Fixed(">b")
INT16 = _Fixed(">h")
INT32 = _Fixed(">i")
INT64 = _Fixed(">q")
UUID = _Uuid()
STRING = _String(nullable=False)
NULLABLE_STRING = _String(nullable=True)


@dataclass(frozen=True)
class Tagged:
    """A tagged field: written only when it is not ``default``; absent reads as ``default``."""

    tag: int
    name: str
    type: Type
    default: Any


class Tuple(Type):
    """A struct read as a plain tuple (such as ``(topic_id, partitions)``): its fields in
    order, then an (empty when written) tagged-field section."""

    def __init__(self, *types: Type) -> None:
        self.types = types

    def write(self, w: _FW, v: tuple) -> None:
        for t, x in zip(self.types, v, strict=True):
            t.write(w, x)
        w.uvarint(0)

    def read(self, r: _R) -> tuple:
        values = tuple(t.read(r) for t in self.types)
        _read_tags(r)
        return values


class Struct(Type):
    """A struct read as dataclass ``make``: the named fields in wire order, then the
    tagged-field section (the ``tagged`` fields, unknown tags skipped)."""

    def __init__(self, make: Callable[..., Any], fields: Iterable[tuple[str, Type]],
                 tagged: Iterable[Tagged] = ()) -> None:
        self.make = make
        self.fields = tuple(fields)
        self.tagged = tuple(sorted(tagged, key=lambda f: f.tag))

    def write(self, w: _FW, v: Any) -> None:
        for name, t in self.fields:
            t.write(w, getattr(v, name))
        present = [f for f in self.tagged if getattr(v, f.name) != f.default]
        w.uvarint(len(present))
        for f in present:
            body = _FW()
            f.type.write(body, getattr(v, f.name))
            w.uvarint(f.tag).uvarint(len(body.b)).raw(bytes(body.b))

    def read(self, r: _R) -> Any:
        kwargs = {name: t.read(r) for name, t in self.fields}
        tags = _read_tags(r)
        for f in self.tagged:
            kwargs[f.name] = f.default if f.tag not in tags else _read_whole(f, tags[f.tag])
        return self.make(**kwargs)


def _read_tags(r: _R) -> dict[int, bytes]:
    out = {}
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        out[tag] = r._raw(r.uvarint())
    return out


def _read_whole(t: Tagged, data: bytes) -> Any:
    r = _R(data)
    try:
        v = t.type.read(r)
    except RecordFormatError:
        raise RecordFormatError(f"tagged field {t.tag} ({t.name}): too short") from None
    if r.pos != len(data):
        raise RecordFormatError(f"tagged field {t.tag} ({t.name}): {len(data)} bytes, expected {r.pos}")
    return v


def schema(cls: type, *fields: tuple[str, Type], tagged: Iterable[Tagged] = ()) -> Struct:
    """The :class:`Struct` of dataclass ``cls`` (fields in wire order)."""
    return Struct(cls, fields, tagged)


TOPIC_PARTITIONS = Array(Tuple(UUID, Array(INT32)))
"""``[]TopicPartitions``: topic id, ``[]int32`` partitions, tags — as :data:`TopicPartitions`."""


# -- values both families share -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    """The target assignment epoch (consumer record 6, share record 12: the same layout)."""

    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    """A member's target assignment (consumer record 7, share record 13: the same layout)."""

    topic_partitions: TopicPartitions = ()


TARGET_ASSIGNMENT_METADATA = schema(TargetAssignmentMetadataValue, ("assignment_epoch", INT32))
TARGET_ASSIGNMENT_MEMBER = schema(TargetAssignmentMemberValue, ("topic_partitions", TOPIC_PARTITIONS))


# -- a family of records ------------------------------------------------------------------------
class Codec:
    """The records of one family: ``{key class: schema of its value}``."""

    def __init__(self, schemas: dict[type, Struct]) -> None:
        self.keys: dict[int, Any] = {getattr(k, "VERSION"): k for k in schemas}
        self.by_key = schemas
        self.by_value = {s.make: s for s in schemas.values()}

    def encode_key(self, key: GroupRecordKey | MemberRecordKey) -> bytes:
        """Key bytes: int16 version, the group id, then the member id of a member key."""
        w = _W().i16(key.VERSION).string(key.group_id)
        if isinstance(key, MemberRecordKey):
            w.string(key.member_id)
        return bytes(w.b)

    def decode_key(self, data: bytes) -> Any:
        """The key of a version of this family; None for any other version. Raises
        RecordFormatError if truncated."""
        r = _R(data)
        cls = self.keys.get(r.i16())
        if cls is None:
            return None
        group_id = r.string() or ""
        if issubclass(cls, MemberRecordKey):
            return cls(group_id, r.string() or "")
        return cls(group_id)

    def encode_value(self, value: Any) -> bytes | None:
        """Value bytes (version 0, flexible); None for a tombstone."""
        if value is None:
            return None
        w = _FW()
        w.i16(0)
        self.by_value[type(value)].write(w, value)
        return bytes(w.b)

    def decode_value(self, key: Any, data: bytes | None) -> Any:
        """The value of ``key`` (None for a tombstone). Raises RecordFormatError for an
        unknown value version, truncation or trailing bytes."""
        if data is None:
            return None
        r = _R(data)
        version = r.i16()
        if version != 0:
            raise RecordFormatError(f"unknown {type(key).__name__} value version {version}")
        value = self.by_key[type(key)].read(r)
        if r.pos != len(r.buf):
            raise RecordFormatError("trailing bytes after the record")
        return value
