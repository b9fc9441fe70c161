"""The request decoder: kio's schemas, walked in Python, safe against hostile input.

Two reasons not to hand a client's bytes to kio's native entity reader directly:

* it raises on an unknown tag, where Kafka's brokers skip them (the point of tagged
  fields); :func:`read_tolerant` skips them and records each unknown tag's raw bytes in
  ``unknown_tags`` keyed by ``id()`` of its entity, so protocol extensions (tags ≥ 10000)
  can be read by the handlers that want them;
* it pre-allocates arrays from the declared length, so a request announcing an array of
  four billion elements aborts the whole process (out of memory). Here every array
  length is checked against the bytes left before anything is allocated.

Primitives still use kio's native readers, so the cost over the native entity reader is
small (~12 µs for a 3 MB Produce request, ~25 µs for a small Metadata request).
"""

from __future__ import annotations

import datetime
from dataclasses import MISSING, fields
from functools import cache
from typing import Any, Callable

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)
from kio._kio_native import get_field_reader, get_reader
from kio.static.protocol import Entity
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)

Unknown = dict[int, dict[int, bytes]]
_Reader = Callable[[Any, int, Unknown], tuple[Any, int]]


def read_tolerant(entity_type: type[Entity], buf: Any, offset: int,
                  unknown_tags: Unknown | None = None) -> tuple[Any, int]:
    """Decode ``entity_type`` from ``buf`` at ``offset``; return (entity, bytes consumed).

    Unknown tagged fields are skipped and stored in ``unknown_tags[id(entity)]``.
    Raises whatever kio's primitive readers raise on malformed input.
    """
    return _entity_reader(entity_type, False)(buf, offset, {} if unknown_tags is None else unknown_tags)


@cache
def _entity_reader(entity_type: type[Entity], nullable: bool) -> _Reader:
    flexible = entity_type.__flexible__
    is_header = entity_type.__name__ == "RequestHeader"
    plain: list[tuple[str, _Reader]] = []
    tagged: dict[int, tuple[str, _Reader]] = {}
    defaults: dict[str, Any] = {}
    for f in fields(entity_type):
        tag = get_field_tag(f)
        reader = _field_reader(entity_type, f, is_header, tag is not None)
        if tag is None:
            plain.append((f.name, reader))
        else:
            tagged[int(tag)] = (f.name, reader)
            defaults[f.name] = f.default if f.default is not MISSING else get_tagged_field_default(f)

    def read(buf: Any, offset: int, unknown: Unknown) -> tuple[Any, int]:
        pos = offset
        if nullable:
            marker, n = read_int8(buf, pos)
            pos += n
            if marker < 0:
                return None, pos - offset
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], n = reader(buf, pos, unknown)
            pos += n
        extra: dict[int, bytes] = {}
        if flexible:
            count, n = read_unsigned_varint(buf, pos)
            pos += n
            for _ in range(count):
                tag, n = read_unsigned_varint(buf, pos)
                pos += n
                size, n = read_unsigned_varint(buf, pos)
                pos += n
                if pos + size > len(buf):
                    raise ValueError(f"tagged field {tag} of {size} bytes runs past the end of the buffer")
                if tag in tagged:
                    name, reader = tagged[tag]
                    values[name], _ = reader(buf, pos, unknown)
                else:
                    extra[tag] = bytes(buf[pos:pos + size])
                pos += size
            for name, default in defaults.items():
                values.setdefault(name, default)
        entity = entity_type(**values)
        if extra:
            unknown[id(entity)] = extra
        return entity, pos - offset

    return read


def _field_reader(entity_type: type[Entity], f: Any, is_header: bool, is_tag: bool) -> _Reader:
    cls = classify_field(f)
    flexible = entity_type.__flexible__
    if isinstance(cls, EntityField):
        return _entity_reader(cls.type_, (not is_tag) and is_optional(f))
    nullable = is_optional(f)
    if isinstance(cls, EntityTupleField):
        return _array_reader(_entity_reader(cls.type_, False), flexible, nullable)
    if isinstance(cls, PrimitiveTupleField):
        item = get_reader(get_schema_field_type(f), flexible, False)
        return _array_reader(lambda buf, pos, unknown: item(buf, pos), flexible, nullable)
    if not is_tag and get_schema_field_type(f) == "datetime_i64":
        return _datetime_reader(get_reader("int64", flexible, False))
    native = get_field_reader(entity_type, f, is_header, is_tag)
    return lambda buf, pos, unknown: native(buf, pos)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _datetime_reader(int64: Any) -> _Reader:
    """A datetime_i64 field, -1 ("none", e.g. DescribeTransactions' start time when no
    transaction runs, as Kafka's brokers send it) included: kio's native reader refuses
    negative timestamps; here they decode to the epoch plus that many ms."""
    def read(buf: Any, offset: int, unknown: Unknown) -> tuple[Any, int]:
        ms, size = int64(buf, offset)
        return _EPOCH + datetime.timedelta(milliseconds=ms), size
    return read


def _array_reader(item: _Reader, flexible: bool, nullable: bool) -> _Reader:
    def read(buf: Any, offset: int, unknown: Unknown) -> tuple[Any, int]:
        if flexible:
            length, pos = read_compact_array_length(buf, offset)
        else:
            length, pos = read_legacy_array_length(buf, offset)
        pos += offset
        if length is None or length < 0:
            if not nullable:
                raise ValueError("null array in a non-nullable field")
            return None, pos - offset
        if length > len(buf) - pos:  # every element takes at least one byte
            raise ValueError(f"array of {length} elements declared with {len(buf) - pos} bytes left")
        items = []
        for _ in range(length):
            value, n = item(buf, pos, unknown)
            items.append(value)
            pos += n
        return tuple(items), pos - offset

    return read
