"""The generated coordinator record codecs (``tools/gen_records.py``) against the JSON they
come from.

* the generated modules are what the generator writes today (run it after a change);
* golden bytes from the JSON: a small reference encoder here, which walks the parsed
  definition field by field (Kafka's rules: fields of a version in order, int16 /
  int32 lengths and counts, or compact ones and a tagged-field section in flexible
  versions, a tagged field written when it differs from its default), must produce the
  generated encoder's bytes for every record, every version hightide writes, and any
  field values;
* round trips: the generated decoder reads the reference bytes of every version (also
  those only other brokers write) back to the same value, for every record type (keys at
  every record type they are read under).

The hand-checked bytes of the versions hightide writes are pinned in
``test_group_record_golden.py``, ``test_txn_state.py`` and ``test_share_coordinator.py``.
"""

from __future__ import annotations

import importlib
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gen_records as GR  # noqa: E402

sys.path.remove(str(ROOT / "tools"))

# JSON type -> (struct format, hypothesis strategy): written here, not taken from the generator
PRIMITIVES: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "int8": (">b", st.integers(-2**7, 2**7 - 1)), "int16": (">h", st.integers(-2**15, 2**15 - 1)),
    "uint16": (">H", st.integers(0, 2**16 - 1)), "int32": (">i", st.integers(-2**31, 2**31 - 1)),
    "uint32": (">I", st.integers(0, 2**32 - 1)), "int64": (">q", st.integers(-2**63, 2**63 - 1)),
    "bool": (">?", st.booleans()), "float64": (">d", st.floats(allow_nan=False)),
}


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def module_of(m: GR.Module) -> Any:
    return importlib.import_module(m.path.removeprefix("src/").removesuffix(".py").replace("/", "."))


def _value(default: str) -> Any:
    return eval(default, {"_ZERO_UUID": uuid.UUID(int=0)})  # noqa: S307 (a literal of the generator's)


# -- the reference encoder -------------------------------------------------------------------------
def ref_struct(s: GR.Struct, obj: Any, v: int, flex: bool) -> bytes:
    values = dict(zip([f.py for f in s.py_fields], obj if s.bind.kind == GR.TUPLE
                      else [getattr(obj, f.py) for f in s.py_fields], strict=True))
    out = b"".join(ref_field(f, values[f.py], v, flex) for f in s.fields if v in f.versions and f.tag is None)
    if flex:
        tagged = sorted((f for f in s.fields if f.tag is not None and v in f.versions
                         and values[f.py] != _value(f.default)), key=lambda f: f.tag or 0)
        out += uvarint(len(tagged))
        for f in tagged:
            data = ref_elem(f, values[f.py], v, flex)
            out += uvarint(f.tag or 0) + uvarint(len(data)) + data
    return out


def ref_field(f: GR.Field, x: Any, v: int, flex: bool) -> bytes:
    if not f.is_array:
        return ref_elem(f, x, v, flex)
    if x is None:
        assert v in f.nullable
        return b"\x00" if flex else struct.pack(">i", -1)
    head = uvarint(len(x) + 1) if flex else struct.pack(">i", len(x))
    return head + b"".join(ref_elem(f, e, v, flex) for e in x)


def ref_elem(f: GR.Field, x: Any, v: int, flex: bool) -> bytes:
    if f.struct is not None:
        return ref_struct(f.struct, x, v, flex)
    if f.elem in ("string", "bytes"):
        size = ">h" if f.elem == "string" else ">i"
        if x is None:
            return b"\x00" if flex else struct.pack(size, -1)
        data = x.encode() if f.elem == "string" else x
        return (uvarint(len(data) + 1) if flex else struct.pack(size, len(data))) + data
    if f.elem == "uuid":
        return x.bytes
    return struct.pack(PRIMITIVES[f.elem][0], x)


# -- values of a struct at a version ---------------------------------------------------------------
def st_struct(mod: Any, s: GR.Struct, v: int) -> st.SearchStrategy[Any]:
    fields = {f.py: (st_field(mod, f, v) if v in f.versions else st.just(_value(f.default))) for f in s.py_fields}

    def make(values: dict[str, Any]) -> Any:
        for target, source in s.bind.fill.items():  # a field a version lacks reads as another's value
            t = next(f for f in s.fields if f.name == target)
            if v not in t.versions:
                values[t.py] = values[next(f.py for f in s.fields if f.name == source)]
        args = [values[f.py] for f in s.py_fields]
        return tuple(args) if s.bind.kind == GR.TUPLE else getattr(mod, s.bind.name)(*args)
    return st.fixed_dictionaries(fields).map(make)


def st_field(mod: Any, f: GR.Field, v: int) -> st.SearchStrategy[Any]:
    if f.struct is not None:
        elem: st.SearchStrategy[Any] = st_struct(mod, f.struct, v)
    elif f.elem == "string":
        elem = st.text(max_size=8)
    elif f.elem == "bytes":
        elem = st.binary(max_size=8)
    elif f.elem == "uuid":
        elem = st.uuids()
    else:
        elem = PRIMITIVES[f.elem][1]
    if f.is_array:
        elem = st.lists(elem, max_size=3).map(tuple)
    if f.tag is not None:
        elem = st.just(_value(f.default)) | elem
    return st.none() | elem if v in f.nullable else elem


# -- the cases -------------------------------------------------------------------------------------
def _cases() -> tuple[list[Any], list[Any]]:
    keys, values = [], []
    for m in GR.MODULES:
        for key, value in GR.load_module(m):
            keys.append(pytest.param(m, key, id=key.name))
            for v in value.valid:
                values.append(pytest.param(m, value, v, id=f"{value.name}-v{v}"))
    return keys, values


KEYS, VALUES = _cases()


def test_generated_modules_are_up_to_date() -> None:
    for path, text in GR.render_all().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is out of date: run python tools/gen_records.py"


def test_every_record_type_is_covered() -> None:
    assert len(KEYS) == 14 + 2 + 1
    assert len(VALUES) == 5 + 5 + 12 + 2 + 2  # offsets v0-4, group metadata v0-4, ...


@pytest.mark.parametrize(("m", "msg"), KEYS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_key_bytes_are_the_jsons_and_round_trip(m: GR.Module, msg: GR.Message, data: st.DataObject) -> None:
    mod = module_of(m)
    write = GR.writes(msg)[0]
    key = data.draw(st_struct(mod, msg.struct, write))
    expected = struct.pack(">h", write) + ref_struct(msg.struct, key, write, False)
    assert mod.encode_key(key) == expected
    for record_type in msg.valid:  # every record type the key is read under
        decoded = mod.decode_key(struct.pack(">h", record_type) + expected[2:])
        assert decoded == key and type(decoded) is type(key)


@pytest.mark.parametrize(("m", "msg", "version"), VALUES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_value_bytes_are_the_jsons_and_round_trip(m: GR.Module, msg: GR.Message, version: int,
                                                   data: st.DataObject) -> None:
    mod = module_of(m)
    value = data.draw(st_struct(mod, msg.struct, version))
    name = GR.snake(msg.struct.bind.name)
    expected = struct.pack(">h", version) + ref_struct(msg.struct, value, version, version in msg.flexible)
    assert getattr(mod, f"decode_{name}")(expected) == value  # every version decodes
    writes = GR.writes(msg)
    if version in writes:  # the versions hightide writes
        assert getattr(mod, f"encode_{name}")(value, version) == expected
        if version == writes[0]:
            assert mod.encode_value(value) == expected
    else:
        with pytest.raises(ValueError):
            getattr(mod, f"encode_{name}")(value, version)


def test_a_value_version_outside_the_json_is_refused() -> None:
    from hightide.group import records_gen as G
    from hightide.protocol.coordinator_codec import RecordFormatError
    with pytest.raises(RecordFormatError, match="unknown OffsetCommitValue version 5"):
        G.decode_offset_value(struct.pack(">hq", 5, 1))
    with pytest.raises(ValueError):
        G.encode_offset_value(G.OffsetValue(1), 5)
