"""Kafka's principal serde for forwarded requests (``DefaultKafkaPrincipalBuilder``'s
``serialize``/``deserialize``): a broker puts its client's principal in an Envelope's
``RequestPrincipal`` and the controller runs the inner request under it.

The bytes are Kafka's ``DefaultPrincipalData`` message, version-prefixed: int16 version
(0), then the flexible v0 body — ``Type`` and ``Name`` as compact strings, ``TokenAuthenticated``
as a boolean, and an empty tagged-field section. Principals are strings ``"<Type>:<Name>"``
(``"User:alice"``) as everywhere in hightide.
"""

from __future__ import annotations

__all__ = ["PrincipalDeserializationError", "deserialize_principal", "serialize_principal"]


class PrincipalDeserializationError(ValueError):
    """The bytes are not a DefaultPrincipalData v0 (Kafka: PRINCIPAL_DESERIALIZATION_FAILURE)."""


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def serialize_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """``"User:alice"`` as Kafka's version-prefixed DefaultPrincipalData v0."""
    ptype, _, name = principal.partition(":")
    return (b"\x00\x00" + _compact_string(ptype) + _compact_string(name)
            + (b"\x01" if token_authenticated else b"\x00") + b"\x00")


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise PrincipalDeserializationError("truncated or oversized varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _read_compact_string(data: bytes, pos: int) -> tuple[str, int]:
    n, pos = _read_uvarint(data, pos)
    if n == 0 or pos + n - 1 > len(data):
        raise PrincipalDeserializationError("null or truncated string")
    try:
        return data[pos:pos + n - 1].decode(), pos + n - 1
    except UnicodeDecodeError:
        raise PrincipalDeserializationError("string is not UTF-8") from None


def deserialize_principal(data: bytes) -> str:
    """The ``"Type:Name"`` principal of serialized DefaultPrincipalData. Raises
    PrincipalDeserializationError for another version or malformed bytes."""
    if len(data) < 2 or int.from_bytes(data[:2], "big", signed=True) != 0:
        raise PrincipalDeserializationError("unsupported DefaultPrincipalData version")
    ptype, pos = _read_compact_string(data, 2)
    name, pos = _read_compact_string(data, pos)
    if pos >= len(data) or data[pos] not in (0, 1):
        raise PrincipalDeserializationError("missing TokenAuthenticated")
    tags, pos = _read_uvarint(data, pos + 1)
    for _ in range(tags):  # skip unknown tagged fields
        _, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    if pos != len(data) or not ptype:
        raise PrincipalDeserializationError("trailing bytes or empty principal type")
    return f"{ptype}:{name}"
