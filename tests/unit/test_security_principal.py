"""Kafka's principal serde (DefaultPrincipalData v0, version-prefixed) for Envelope."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hightide.security.principal import PrincipalDeserializationError, deserialize_principal, serialize_principal


def test_bytes_are_kafkas_default_principal_data():
    # int16 version 0, compact "User", compact "alice", TokenAuthenticated=false, no tagged fields
    assert serialize_principal("User:alice") == b"\x00\x00\x05User\x06alice\x00\x00"
    assert serialize_principal("User:CN=a,O=b", token_authenticated=True)[-2:] == b"\x01\x00"


# A principal is text decoded from UTF-8 (a certificate, a SASL name, a config): never a
# lone surrogate, which has no UTF-8 encoding.
_UTF8 = st.characters(blacklist_categories=("Cs",))


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=":"), min_size=1),
       st.text(alphabet=_UTF8))
def test_roundtrip(ptype, name):
    assert deserialize_principal(serialize_principal(f"{ptype}:{name}")) == f"{ptype}:{name}"


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x05User\x06alice\x00\x00", b"\x00\x00\x05Us", b"\x00\x00\x00\x01\x00\x00",
                                  b"\x00\x00\x05User\x06alice\x00\x00junk", b"\x00\x00\x05User\x06alice\x07\x00",
                                  b"\x00\x00" + b"\xff" * 10])
def test_malformed_bytes_are_refused(data):
    with pytest.raises(PrincipalDeserializationError):
        deserialize_principal(data)
