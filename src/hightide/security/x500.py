"""The subject DN of an X.509 certificate as Java prints it (sans-IO, no ``ssl``).

Kafka maps a TLS client's principal from ``X500Principal.getName()`` — RFC 2253 as
Java's ``sun.security.x509`` writes it — so ``ssl.principal.mapping.rules`` and ACLs
written for Kafka name DNs in exactly that form. :func:`certificate_subject_dn` reads the
subject from the certificate's DER bytes (the ``ssl`` module's dictionary form loses
the ASN.1 string types Java's output depends on) and prints it the same way:

* RDNs last first, separated by ``,``; the attributes of a multi-valued RDN in their
  DER order, separated by ``+``;
* the attribute type as Java's RFC 2253 keyword (``CN C L ST O OU STREET DC UID``), any
  other type as its dotted OID;
* the value, for a keyword type whose value is a string (PrintableString, TeletexString,
  IA5String, GeneralString, BMPString, UTF8String), as its content bytes read as UTF-8
  with ``, = + < > # ; " \\`` escaped by a backslash, NUL as ``\\00``, and every leading
  and trailing space or carriage return escaped; for a dotted OID or any other value,
  ``#`` and the lower-case hex of the value's whole DER encoding (tag and length
  included): an ``emailAddress`` is ``1.2.840.113549.1.9.1=#16...`` (IA5String, tag 0x16).

Malformed DER raises :class:`ValueError`.
"""

from __future__ import annotations

__all__ = ["certificate_subject_dn", "name_rfc2253"]

_SEQUENCE, _SET, _OID, _INTEGER = 0x30, 0x31, 0x06, 0x02
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})  # Printable, T61, IA5, General, BMP, UTF8
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
             "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
_ESCAPED = frozenset(',=+<>#;"\\')


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at ``pos`` (before ``end``)."""
    if pos + 2 > end:
        raise ValueError("truncated DER element")
    tag, first = data[pos], data[pos + 1]
    if tag & 0x1F == 0x1F:
        raise ValueError("multi-byte DER tags are not expected in a certificate name")
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or pos + count > end:
            raise ValueError("bad DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > end:
        raise ValueError("DER element runs past its container")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in ``[start, end)``."""
    out = []
    pos = start
    while pos < end:
        tag, cstart, cend = _tlv(data, pos, end)
        out.append((tag, pos, cstart, cend))
        pos = cend
    return out


def _oid(content: bytes) -> str:
    if not content or content[-1] & 0x80:
        raise ValueError("bad OID")
    arcs, value = [], 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in (first, arcs[0] - 40 * first, *arcs[1:]))


def _escape(text: str) -> str:
    chars = ["\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text]
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in (" ", "\r"):
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def _attribute(data: bytes, start: int, end: int) -> str:
    parts = _children(data, start, end)
    if len(parts) != 2 or parts[0][0] != _OID:
        raise ValueError("bad AttributeTypeAndValue")
    oid = _oid(data[parts[0][2]:parts[0][3]])
    tag, vstart, cstart, cend = parts[1]
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{data[vstart:cend].hex()}"
    return f"{keyword}={_escape(data[cstart:cend].decode('utf-8', 'replace'))}"


def name_rfc2253(data: bytes, start: int = 0, end: int | None = None) -> str:
    """The RFC 2253 string (Java's) of the DER ``Name`` at ``data[start:end]``."""
    end = len(data) if end is None else end
    tag, cstart, cend = _tlv(data, start, end)
    if tag != _SEQUENCE:
        raise ValueError("a Name is a SEQUENCE")
    rdns = []
    for rtag, _, rstart, rend in _children(data, cstart, cend):
        if rtag != _SET:
            raise ValueError("an RDN is a SET")
        atvs = _children(data, rstart, rend)
        if not atvs or any(t != _SEQUENCE for t, *_ in atvs):
            raise ValueError("bad RDN")
        rdns.append("+".join(_attribute(data, s, e) for _, _, s, e in atvs))
    return ",".join(reversed(rdns))


def certificate_subject_dn(der: bytes) -> str:
    """The subject DN of a DER certificate, as Java's ``X500Principal.getName()``."""
    tag, cstart, cend = _tlv(der, 0, len(der))
    if tag != _SEQUENCE:
        raise ValueError("a certificate is a SEQUENCE")
    tbs = _children(der, cstart, cend)
    if not tbs or tbs[0][0] != _SEQUENCE:
        raise ValueError("no tbsCertificate")
    fields = _children(der, tbs[0][2], tbs[0][3])
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[0][0] != _INTEGER or fields[4][0] != _SEQUENCE:
        raise ValueError("bad tbsCertificate")
    _, subject_start, _, subject_end = fields[4]
    return name_rfc2253(der, subject_start, subject_end)
