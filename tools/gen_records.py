"""Generate hightide's coordinator record codecs from the record layouts.

    python tools/gen_records.py          # (re)write the generated modules
    python tools/gen_records.py --check  # exit 1 if one is out of date

Input: ``tools/coordinator_records.json`` (:data:`SCHEMA`; the wire layouts of Kafka's
coordinator records, written down by us) — per record, by name: ``types`` (the record
types: the int16 that starts a key), ``key`` (its fields; keys are not flexible) and
``value``: ``versions``, ``flexible`` (versions in Kafka's range syntax), ``fields`` and
``structs`` (the fields of each struct type used). A field is ``[name, type, versions]``
plus an optional object with ``nullable`` (versions), ``tag`` (a tagged field: its tag)
and ``default`` (null: None). And :data:`MODULES` below, which binds each record to
hightide's Python names: the class it decodes to (a frozen dataclass, a NamedTuple, a
plain tuple, or an existing class), Python defaults, renamed or omitted fields, the
version hightide writes.

Output, per module: the classes, a decoder and an encoder per struct and version —
straight-line code, consecutive fixed-width fields read and written with one
``struct.Struct`` — and ``decode_key`` / ``decode_value`` / ``encode_key`` /
``encode_value`` over every record of the topic. Every variable-length read goes through
:mod:`hightide.protocol.coordinator_codec` (the one bounded reader).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tools" / "coordinator_records.json"


# -- bindings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bind:
    """How a JSON struct is seen in Python.

    ``kind``: ``dataclass`` (frozen, slots), ``namedtuple``, ``tuple`` (a plain tuple of
    the fields), ``import`` (an existing class of ``module``, fields named as generated)
    or ``subclass`` (a generated empty subclass of ``base`` from ``module``, which holds
    the fields). ``defaults``: Python defaults by JSON field name (a trailing run; tagged
    fields get their JSON default). ``rename``/``omit``: JSON field names given another
    Python name / left out (a tagged field only: skipped on read, never written).
    ``fill``: a field absent in a version reads as another field's value. ``writes``: the
    versions hightide writes, the first the default (a record's highest if empty); every
    valid version decodes."""

    name: str
    kind: str = "dataclass"
    defaults: dict[str, str] = field(default_factory=dict)
    rename: dict[str, str] = field(default_factory=dict)
    omit: frozenset[str] = frozenset()
    fill: dict[str, str] = field(default_factory=dict)
    writes: tuple[int, ...] = ()
    module: str = ""
    base: str = ""
    doc: str = ""


TUPLE = "tuple"


@dataclass(frozen=True)
class Module:
    path: str
    doc: str
    records: tuple[str, ...]  # record names in SCHEMA: "<name>Key" and "<name>Value"
    bindings: dict[str, Bind]  # by key, value ("<name>Key"/"<name>Value") or struct name


GROUP = Module(
    "src/hightide/group/records_gen.py",
    "The records of ``__consumer_offsets`` (see :mod:`.records`, :mod:`.consumer_records`,\n"
    ":mod:`.share_records`).",
    ("OffsetCommit", "GroupMetadata",
     "ConsumerGroupMetadata", "ConsumerGroupPartitionMetadata", "ConsumerGroupMemberMetadata",
     "ConsumerGroupTargetAssignmentMetadata", "ConsumerGroupTargetAssignmentMember",
     "ConsumerGroupCurrentMemberAssignment",
     "ShareGroupMemberMetadata", "ShareGroupMetadata", "ShareGroupTargetAssignmentMetadata",
     "ShareGroupTargetAssignmentMember", "ShareGroupCurrentMemberAssignment", "ShareGroupStatePartitionMetadata"),
    {
        # offsets and classic groups: NamedTuples for offsets (built per committed partition);
        # offsets written as v3, or v1 with an expire timestamp (as Kafka does)
        "OffsetCommitKey": Bind("OffsetKey", "namedtuple", writes=(1,)),
        "OffsetCommitValue": Bind("OffsetValue", "namedtuple", writes=(3, 1), defaults={
            "leaderEpoch": "-1", "metadata": '""', "commitTimestamp": "-1", "expireTimestamp": "-1"}),
        "GroupMetadataKey": Bind("GroupKey"),
        "GroupMetadataValue": Bind("GroupValue", writes=(3,), defaults={"currentStateTimestamp": "-1", "members": "()"}),
        # Kafka's GroupMetadataManager: a v0 member's rebalance timeout is its session timeout
        "MemberMetadata": Bind("MemberMetadata", fill={"rebalanceTimeout": "sessionTimeout"}),
        # KIP-848 consumer groups
        "ConsumerGroupMetadataKey": Bind("ConsumerGroupMetadataKey"),
        "ConsumerGroupMetadataValue": Bind("ConsumerGroupMetadataValue"),
        "ConsumerGroupPartitionMetadataKey": Bind("ConsumerGroupPartitionMetadataKey"),
        "ConsumerGroupPartitionMetadataValue": Bind("ConsumerGroupPartitionMetadataValue", defaults={"Topics": "()"}),
        "TopicMetadata": Bind("TopicMetadata", rename={"PartitionMetadata": "partition_racks"},
                              defaults={"PartitionMetadata": "()"}),
        "PartitionMetadata": Bind(TUPLE, TUPLE),
        "ConsumerGroupMemberMetadataKey": Bind("ConsumerGroupMemberMetadataKey"),
        "ConsumerGroupMemberMetadataValue": Bind("ConsumerGroupMemberMetadataValue", omit=frozenset({
            "ClassicMemberMetadata"}), defaults={"RebalanceTimeoutMs": "-1", "ServerAssignor": "None"}),
        "ConsumerGroupTargetAssignmentMetadataKey": Bind("ConsumerGroupTargetAssignmentMetadataKey"),
        "ConsumerGroupTargetAssignmentMetadataValue": Bind("TargetAssignmentMetadataValue"),
        "ConsumerGroupTargetAssignmentMemberKey": Bind("ConsumerGroupTargetAssignmentMemberKey"),
        "ConsumerGroupTargetAssignmentMemberValue": Bind("TargetAssignmentMemberValue",
                                                         defaults={"TopicPartitions": "()"}),
        "TopicPartition": Bind(TUPLE, TUPLE),
        "TopicPartitions": Bind(TUPLE, TUPLE),
        "ConsumerGroupCurrentMemberAssignmentKey": Bind("ConsumerGroupCurrentMemberAssignmentKey"),
        "ConsumerGroupCurrentMemberAssignmentValue": Bind("ConsumerGroupCurrentMemberAssignmentValue", defaults={
            "AssignedPartitions": "()", "PartitionsPendingRevocation": "()"}),
        # KIP-932 share groups
        "ShareGroupMemberMetadataKey": Bind("ShareGroupMemberMetadataKey"),
        "ShareGroupMemberMetadataValue": Bind("ShareGroupMemberMetadataValue"),
        "ShareGroupMetadataKey": Bind("ShareGroupMetadataKey"),
        "ShareGroupMetadataValue": Bind("ShareGroupMetadataValue", defaults={"MetadataHash": "0"}),
        "ShareGroupTargetAssignmentMetadataKey": Bind("ShareGroupTargetAssignmentMetadataKey"),
        "ShareGroupTargetAssignmentMetadataValue": Bind("TargetAssignmentMetadataValue"),
        "ShareGroupTargetAssignmentMemberKey": Bind("ShareGroupTargetAssignmentMemberKey"),
        "ShareGroupTargetAssignmentMemberValue": Bind("TargetAssignmentMemberValue",
                                                      defaults={"TopicPartitions": "()"}),
        "ShareGroupCurrentMemberAssignmentKey": Bind("ShareGroupCurrentMemberAssignmentKey"),
        "ShareGroupCurrentMemberAssignmentValue": Bind("ShareGroupCurrentMemberAssignmentValue",
                                                       defaults={"AssignedPartitions": "()"}),
        "ShareGroupStatePartitionMetadataKey": Bind("ShareGroupStatePartitionMetadataKey"),
        "ShareGroupStatePartitionMetadataValue": Bind("ShareGroupStatePartitionMetadataValue", defaults={
            "InitializingTopics": "()", "InitializedTopics": "()", "DeletingTopics": "()"}),
        "TopicPartitionsInfo": Bind("TopicPartitionsInfo"),
        "TopicInfo": Bind("TopicInfo"),
    },
)

SHARE = Module(
    "src/hightide/share/records_gen.py",
    "The records of ``__share_group_state`` (see :mod:`.records`).",
    ("ShareSnapshot", "ShareUpdate"),
    {
        "ShareSnapshotKey": Bind("ShareSnapshotKey", "subclass", module=".types", base="ShareStateKey",
                                 doc="Key of record type 0: the share partition whose complete state the value is."),
        "ShareUpdateKey": Bind("ShareUpdateKey", "subclass", module=".types", base="ShareStateKey",
                               doc="Key of record type 1: the share partition whose changed batches the value holds."),
        "ShareSnapshotValue": Bind("ShareSnapshotValue", defaults={"StateBatches": "()"}),
        "ShareUpdateValue": Bind("ShareUpdateValue", defaults={"StateBatches": "()"}),
        "StateBatch": Bind("StateBatch", "import", module=".types"),
    },
)

TXN = Module(
    "src/hightide/txn/records_gen.py",
    "The records of ``__transaction_state`` (see :mod:`.records`, which maps them to\n"
    ":class:`~.state.TxnMetadata`).",
    ("TransactionLog",),
    {
        "TransactionLogKey": Bind("TransactionLogKey", "namedtuple"),
        # hightide writes v0 (what Kafka writes before transaction version 2); v1 decodes
        "TransactionLogValue": Bind("TransactionLogValue", "namedtuple", writes=(0,)),
        "PartitionsSchema": Bind(TUPLE, TUPLE),
    },
)

MODULES = (GROUP, SHARE, TXN)


# -- the model of a JSON definition --------------------------------------------------------------------
FIXED = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q", "float64": "d",
         "bool": "?", "uuid": "16s"}
PY_TYPES = {"int8": "int", "int16": "int", "uint16": "int", "int32": "int", "uint32": "int", "int64": "int",
            "float64": "float", "bool": "bool", "uuid": "uuid.UUID", "string": "str", "bytes": "bytes"}


def versions(spec: str | None, lo: int = 0, hi: int = 99) -> frozenset[int]:
    """Kafka's version range syntax: ``"3"``, ``"0-4"``, ``"2+"``, ``"none"``."""
    if spec is None or spec == "none":
        return frozenset()
    if spec.endswith("+"):
        return frozenset(range(max(int(spec[:-1]), lo), hi + 1))
    if "-" in spec:
        a, b = spec.split("-")
        return frozenset(range(int(a), int(b) + 1))
    return frozenset({int(spec)})


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@dataclass
class Field:
    name: str
    py: str
    type: str  # "int32", "string", "[]int32", "[]Struct", "Struct", ...
    versions: frozenset[int]
    nullable: frozenset[int]
    tag: int | None
    default: str  # a Python literal: what an absent field reads as
    struct: Struct | None = None  # of a struct or an array of structs

    @property
    def elem(self) -> str:
        return self.type[2:] if self.type.startswith("[]") else self.type

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")


@dataclass
class Struct:
    name: str  # JSON name
    bind: Bind
    fields: list[Field]  # JSON order, omitted fields left out

    @property
    def py_fields(self) -> list[Field]:
        """Python attribute order: the regular fields, then the tagged ones."""
        return [f for f in self.fields if f.tag is None] + [f for f in self.fields if f.tag is not None]


@dataclass
class Message:
    name: str
    valid: list[int]
    flexible: frozenset[int]
    struct: Struct


def _default(name: str, typ: str, nullable: bool, extra: dict[str, Any]) -> str:
    """A Python literal for what an absent field reads as: ``extra["default"]`` (JSON null:
    None) or the type's zero value."""
    null = "default" in extra and extra["default"] is None
    d = extra.get("default")
    if typ.startswith("[]"):
        return "None" if null else "()"
    if null or (d is None and typ not in PY_TYPES and nullable):
        return "None"
    if typ == "string":
        return repr(d if d is not None else "")
    if typ == "bytes":
        return 'b""'
    if typ == "uuid":
        return "_ZERO_UUID"
    if typ == "bool":
        return "True" if str(d).lower() == "true" else "False"
    if typ in FIXED:
        return str(int(str(d), 0)) if d is not None else "0"
    if d is None and typ not in PY_TYPES:
        raise ValueError(f"struct field without a default: {name}")
    return str(d)


def build_struct(name: str, rows: list[list[Any]], structs: dict[str, list[list[Any]]],
                 bindings: dict[str, Bind], valid: list[int]) -> Struct:
    """``rows``: ``[name, type, versions]`` or ``[name, type, versions, extra]``, where
    ``extra`` may hold ``nullable`` (versions), ``tag`` (tagged in ``versions``) and
    ``default``; a struct type's rows are ``structs[type]``."""
    bind = bindings[name]
    fields = []
    for row in rows:
        fname, typ, spec = row[0], row[1], row[2]
        extra: dict[str, Any] = row[3] if len(row) > 3 else {}
        if fname in bind.omit:
            if "tag" not in extra:
                raise ValueError(f"{name}.{fname}: only a tagged field can be omitted")
            continue
        vs = versions(spec, min(valid), max(valid)) & set(valid)
        nullable = versions(extra.get("nullable"), min(valid), max(valid))
        f = Field(fname, bind.rename.get(fname, snake(fname)), typ, frozenset(vs),
                  frozenset(nullable), extra.get("tag"), _default(fname, typ, bool(nullable), extra))
        elem = f.elem
        if elem not in PY_TYPES:
            sub = structs.get(elem)
            if sub is None:
                raise ValueError(f"{name}.{f.name}: unknown type {typ}")
            f.struct = build_struct(elem, sub, structs, bindings, valid)
        if f.tag is not None and (f.struct is not None or f.is_array or elem not in FIXED):
            raise NotImplementedError(f"{name}.{f.name}: tagged fields are fixed-width here")
        fields.append(f)
    return Struct(name, bind, fields)


def load_module(module: Module) -> list[tuple[Message, Message]]:
    """The key and value of each of ``module.records``, from :data:`SCHEMA`."""
    schema = json.loads(SCHEMA.read_text())
    out = []
    for r in module.records:
        rec = schema[r]
        types = sorted(versions(rec["types"]))
        key = Message(r + "Key", types, frozenset(),
                      build_struct(r + "Key", rec["key"], {}, module.bindings, types))
        v = rec["value"]
        valid = sorted(versions(v["versions"]))
        flexible = versions(v["flexible"], valid[0], valid[-1])
        value = Message(r + "Value", valid, flexible,
                        build_struct(r + "Value", v["fields"], v.get("structs", {}), module.bindings, valid))
        out.append((key, value))
    return out


# -- code generation -------------------------------------------------------------------------------
def _shape(s: Struct) -> tuple[Any, ...]:
    """What two structs bound to one class must share."""
    return tuple((f.py, f.type, tuple(sorted(f.versions)), tuple(sorted(f.nullable)), f.tag, f.default,
                  _shape(f.struct) if f.struct else None) for f in s.fields)


class Gen:
    def __init__(self, module: Module) -> None:
        self.module = module
        self.structs: dict[str, str] = {}  # fmt -> constant name
        self.classes: dict[str, Struct] = {}  # emitted class name -> struct
        self.funcs: dict[str, str] = {}  # function name -> source
        self.bodies: dict[str, str] = {}  # a function's signature and body -> its first name
        self.imports: dict[str, set[str]] = {}  # relative module -> names
        self.out_classes: list[str] = []

    # names
    def const(self, fmt: str) -> str:
        name = "_S_" + fmt.replace("?", "o")
        self.structs[fmt] = name
        return name

    def fname(self, kind: str, s: Struct, version: int) -> str:
        base = s.name if s.bind.kind == TUPLE else s.bind.name
        return f"_{kind}_{base}_v{version}"

    # Python types
    def py_type(self, f: Field) -> str:
        elem = f.elem
        if f.struct is not None:
            t = self.struct_type(f.struct)
        else:
            t = PY_TYPES[elem]
        if f.is_array:
            t = f"tuple[{t}, ...]"
        return f"{t} | None" if f.nullable else t

    def struct_type(self, s: Struct) -> str:
        if s.bind.kind == TUPLE:
            return "tuple[" + ", ".join(self.py_type(f) for f in s.fields) + "]"
        return s.bind.name

    # classes
    def declare(self, s: Struct, doc: str) -> None:
        for f in s.fields:
            if f.struct is not None:
                self.declare(f.struct, "")
        kind, name = s.bind.kind, s.bind.name
        if kind == TUPLE:
            return
        if name in self.classes:
            if _shape(self.classes[name]) != _shape(s):
                raise ValueError(f"{name}: bound to structs of different layouts")
            return
        self.classes[name] = s
        if kind == "import":
            self.imports.setdefault(s.bind.module, set()).add(name)
            return
        if kind == "subclass":
            self.imports.setdefault(s.bind.module, set()).add(s.bind.base)
            self.out_classes.append(f"class {name}({s.bind.base}):\n    {_doc(s.bind.doc or doc)}\n\n"
                                    f"    __slots__ = ()\n")
            return
        defaults = {s.bind.rename.get(k, snake(k)): v for k, v in s.bind.defaults.items()}
        lines = []
        seen_default = False
        for f in s.py_fields:
            d = f.default if f.tag is not None else defaults.get(f.py)
            if d is None and seen_default:
                raise ValueError(f"{name}.{f.py}: a field without a default after one with")
            seen_default |= d is not None
            lines.append(f"    {f.py}: {self.py_type(f)}" + (f" = {d}" if d is not None else ""))
        head = "@dataclass(frozen=True, slots=True)\nclass {}:" if kind == "dataclass" else "class {}(NamedTuple):"
        self.out_classes.append(head.format(name) + f"\n    {_doc(doc or s.bind.doc or f'The {s.name} struct.')}\n\n"
                                + "\n".join(lines) + "\n")

    # decoders
    def least(self, s: Struct, v: int, flex: bool) -> int:
        """The fewest bytes a struct takes on the wire."""
        n = 1 if flex else 0
        for f in s.fields:
            if v not in f.versions or f.tag is not None:
                continue
            if f.is_array or f.elem in ("string", "bytes"):
                n += 1 if flex else (4 if f.is_array or f.elem == "bytes" else 2)
            elif f.struct is not None:
                n += self.least(f.struct, v, flex)
            else:
                n += _size(FIXED[f.elem])
        return n

    def all_fixed(self, s: Struct, v: int) -> bool:
        return all(f.tag is None and not f.is_array and f.elem in FIXED and f.elem != "uuid"
                   for f in s.fields if v in f.versions)

    def decoder(self, s: Struct, v: int, flex: bool) -> str:
        """``_d_<struct>_v<v>(buf, pos) -> (value, pos)``; its name."""
        name = self.fname("d", s, v)
        if name in self.funcs:
            return name
        self.funcs[name] = ""  # (recursion guard)
        body: list[str] = []
        run: list[tuple[str, str]] = []  # fixed-width fields not read yet: (format, variable)
        post: list[str] = []  # what follows their read (uuids from bytes)

        def flush() -> None:
            if run:
                fmt = "".join(f for f, _ in run)
                names = [n for _, n in run]
                body.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {self.const(fmt)}.unpack_from(buf, pos)")
                body.append(f"pos += {_size(fmt)}")
                body.extend(post)
                run.clear()
                post.clear()

        for i, f in enumerate(s.fields):
            if v in f.versions and f.tag is None:
                self.read_field(f, i, v, flex, body, run, post, flush)
        flush()
        tagged = [f for f in s.fields if f.tag is not None and v in f.versions]
        if flex and tagged:
            body.append("tg, pos = C.tags(buf, pos)")
            body.extend(f"{f.py} = C.tagged(tg, {f.tag}, {self.const(FIXED[f.elem])}, {f.default})" for f in tagged)
        elif flex:
            body.append("pos = C.skip_tags(buf, pos)")
        args = []
        for f in s.py_fields:
            if v in f.versions:
                args.append(f.py)
            elif f.name in s.bind.fill:  # absent in this version: another field's value
                args.append(next(x.py for x in s.fields if x.name == s.bind.fill[f.name]))
            else:
                args.append(f.default)
        body.append(f"return {self.construct(s, args)}, pos")
        self.define(name, f"(buf: bytes, pos: int) -> tuple[{self.struct_type(s)}, int]:\n"
                    + "\n".join("    " + line for line in body) + "\n")
        return name

    def read_field(self, f: Field, i: int, v: int, flex: bool, body: list[str], run: list[tuple[str, str]],
                   post: list[str], flush: Callable[[], None]) -> None:
        """The lines that read field ``f`` (the ``i``-th) into a variable named ``f.py``:
        fixed-width ones join ``run`` (read together at the next ``flush``)."""
        var, nullable = f.py, v in f.nullable
        if f.is_array:
            count, least = f"n{i}", self.elem_least(f, v, flex)
            null = ", True" if nullable else ""
            if flex:
                flush()
                body.append(f"{count}, pos = C.compact_count(buf, pos, {least}{null})")
            else:
                run.append(("i", count))
                flush()
                body.append(f"{count} = C.count(buf, pos, {count}, {least}{null})")
            loop = self.read_elems(f, v, flex, i, var)
            if nullable:
                body.extend([f"{var}: {self.py_type(f)} = None", f"if {count} >= 0:"])
                body.extend("    " + line for line in loop)
            else:
                body.extend(loop)
        elif f.elem in ("string", "bytes"):
            kind = ("nullable_" if nullable else "") + f.elem
            if flex:
                flush()
                body.append(f"{var}, pos = C.compact_{kind}(buf, pos)")
            else:
                run.append(("h" if f.elem == "string" else "i", f"n{i}"))
                flush()
                body.append(f"{var}, pos = C.{'bytes_' if kind == 'bytes' else kind}(buf, pos, n{i})")
        elif f.struct is not None:
            flush()
            body.append(f"{var}, pos = {self.decoder(f.struct, v, flex)}(buf, pos)")
        else:
            run.append((FIXED[f.elem], var))
            if f.elem == "uuid":
                post.append(f"{var} = _UUID(bytes={var})")

    def define(self, name: str, rest: str) -> None:
        """Function ``name``: ``def name`` + ``rest``, or an alias of an identical one."""
        first = self.bodies.setdefault(rest, name)
        self.funcs[name] = f"def {name}{rest}" if first == name else f"{name} = {first}\n"

    def construct(self, s: Struct, args: list[str]) -> str:
        if s.bind.kind == TUPLE:
            return f"({', '.join(args)}{',' if len(args) == 1 else ''})"
        if s.bind.kind == "namedtuple":
            return f"_new({s.bind.name}, ({', '.join(args)}{',' if len(args) == 1 else ''}))"
        return f"{s.bind.name}({', '.join(args)})"

    def elem_least(self, f: Field, v: int, flex: bool) -> int:
        if f.struct is not None:
            return self.least(f.struct, v, flex)
        if f.elem in ("string", "bytes"):
            return 1 if flex else (2 if f.elem == "string" else 4)
        return _size(FIXED[f.elem])

    def read_elems(self, f: Field, v: int, flex: bool, i: int, var: str) -> list[str]:
        elem, count = f.elem, f"n{i}"
        if f.struct is None and elem in FIXED and elem != "uuid":
            c = FIXED[elem]
            return [f"{var} = struct.unpack_from('>%d{c}' % {count}, buf, pos)", f"pos += {_size(c)} * {count}"]
        if f.struct is not None and self.all_fixed(f.struct, v):
            s = f.struct
            fmt = "".join(FIXED[x.elem] for x in s.fields if v in x.versions) + ("B" if flex else "")
            k = len([x for x in s.fields if v in x.versions])
            names = [f"a{j}" for j in range(k)]
            row = ", ".join(names) + (", _" if flex else "")
            make = self.construct(s, self.row_args(s, v, names))
            lines = [f"e{i} = pos + {_size(fmt)} * {count}",
                     f"rows{i} = list({self.const(fmt)}.iter_unpack(buf[pos:e{i}]))"]
            if not flex:
                return lines + [f"{var} = tuple([{make} for {row} in rows{i}])", f"pos = e{i}"]
            slow = self.decoder(s, v, flex)
            return lines + [
                f"if not any([r[-1] for r in rows{i}]):  # no element has tagged fields: all at once",
                f"    {var} = tuple([{make} for {row} in rows{i}])",
                f"    pos = e{i}",
                "else:",
                f"    items{i}: list[{self.struct_type(s)}] = []",
                f"    for _ in range({count}):",
                f"        item{i}, pos = {slow}(buf, pos)",
                f"        items{i}.append(item{i})",
                f"    {var} = tuple(items{i})"]
        if f.struct is not None:
            read = f"{self.decoder(f.struct, v, flex)}(buf, pos)"
        elif elem == "string":
            read = "C.compact_string(buf, pos)" if flex else "C.string(buf, pos + 2, _S_h.unpack_from(buf, pos)[0])"
        elif elem == "bytes":
            read = "C.compact_bytes(buf, pos)" if flex else "C.bytes_(buf, pos + 4, _S_i.unpack_from(buf, pos)[0])"
        else:  # uuid
            read = "_UUID(bytes=buf[pos:pos + 16]), pos + 16"
        if elem in ("string", "bytes") and not flex:
            self.const("h" if elem == "string" else "i")
        return [f"items{i}: list[{self.struct_type(f.struct) if f.struct else PY_TYPES[elem]}] = []",
                f"for _ in range({count}):",
                f"    item{i}, pos = {read}",
                f"    items{i}.append(item{i})",
                f"{var} = tuple(items{i})"]

    def row_args(self, s: Struct, v: int, names: list[str]) -> list[str]:
        it = iter(names)
        return [next(it) if v in f.versions else f.default for f in s.py_fields]

    # encoders
    def encoder(self, s: Struct, v: int, flex: bool, version_prefix: int | None = None) -> str:
        name = self.fname("e" if version_prefix is not None else "s", s, v)
        if name in self.funcs:
            return name
        self.funcs[name] = ""
        prep: list[str] = []
        items: list[tuple[str, str]] = []  # ("fmt", expr) fixed; ("", expr) bytes
        if version_prefix is not None:
            items.append(("h", str(version_prefix)))
        tuple_kind = s.bind.kind == TUPLE
        for i, f in enumerate(s.fields):
            if v not in f.versions or f.tag is not None:
                continue
            acc = f"v[{s.py_fields.index(f)}]" if tuple_kind else f"v.{f.py}"
            nullable = v in f.nullable
            if f.is_array:
                x = f"a{i}"
                prep.append(f"{x} = {acc}")
                if flex:
                    cnt = f"C.w_uvarint(len({x}) + 1)"
                    items.append(("", f"(b'\\x00' if {x} is None else {cnt})" if nullable else cnt))
                else:
                    items.append(("i", f"(-1 if {x} is None else len({x}))" if nullable else f"len({x})"))
                elems = self.write_elems(f, v, flex, x)
                items.append(("", f"(b'' if {x} is None else {elems})" if nullable else elems))
            elif f.elem in ("string", "bytes"):
                is_str = f.elem == "string"
                if flex:
                    fn = ("w_compact_nullable_" if nullable else "w_compact_") + ("string" if is_str else "bytes")
                    items.append(("", f"C.{fn}({acc})"))
                else:
                    b = f"b{i}"
                    enc = f"{acc}.encode()" if is_str else acc
                    if nullable:
                        prep.append(f"{b} = None if {acc} is None else {enc}" if is_str else f"{b} = {acc}")
                        items.append(("h" if is_str else "i", f"(-1 if {b} is None else len({b}))"))
                        items.append(("", f"({b} or b'')"))
                    else:
                        prep.append(f"{b} = {enc}")
                        items.append(("h" if is_str else "i", f"len({b})"))
                        items.append(("", b))
            elif f.struct is not None:
                items.append(("", f"{self.encoder(f.struct, v, flex)}({acc})"))
            else:
                items.append((FIXED[f.elem], f"{acc}.bytes" if f.elem == "uuid" else acc))
        if flex:
            tagged = sorted((f for f in s.fields if f.tag is not None and v in f.versions), key=lambda f: f.tag or 0)
            if len(tagged) == 1:  # one known tagged field: written when not its default
                f = tagged[0]
                acc = f"v[{s.py_fields.index(f)}]" if tuple_kind else f"v.{f.py}"
                head = b"\x01" + _uv(f.tag or 0) + _uv(_size(FIXED[f.elem]))
                items.append(("", f"({head!r} + {self.const(FIXED[f.elem])}.pack({acc}) if {acc} != {f.default} "
                                  "else b'\\x00')"))
            elif tagged:
                prep.append("tg = []")
                for f in tagged:
                    acc = f"v[{s.py_fields.index(f)}]" if tuple_kind else f"v.{f.py}"
                    fmt = FIXED[f.elem]
                    head = _uv(f.tag or 0) + _uv(_size(fmt))
                    prep.append(f"if {acc} != {f.default}:")
                    prep.append(f"    tg.append({head!r} + {self.const(fmt)}.pack({acc}))")
                items.append(("", "C.w_uvarint(len(tg)) + b''.join(tg)"))
            else:
                items.append(("B", "0"))
        parts: list[str] = []
        run: list[tuple[str, str]] = []
        for fmt, expr in items + [("", "")]:
            if fmt:
                run.append((fmt, expr))
                continue
            if run == [("B", "0")]:  # an empty tagged-field section alone
                parts.append("b'\\x00'")
            elif run:
                parts.append(f"{self.const(''.join(f for f, _ in run))}.pack({', '.join(e for _, e in run)})")
            run.clear()
            if expr:
                parts.append(expr)
        ret = parts[0] if len(parts) == 1 else (" + ".join(parts) if len(parts) <= 3
                                                 else "b''.join((\n        " + ",\n        ".join(parts) + "))")
        typ = self.struct_type(s)
        self.define(name, f"(v: {typ}) -> bytes:\n" + "".join(f"    {p}\n" for p in prep) + f"    return {ret}\n")
        return name

    def write_elems(self, f: Field, v: int, flex: bool, x: str) -> str:
        elem = f.elem
        if f.struct is None and elem in FIXED and elem != "uuid":
            return f"struct.pack('>%d{FIXED[elem]}' % len({x}), *{x})"
        if f.struct is not None and self.all_fixed(f.struct, v):
            s = f.struct
            fmt = "".join(FIXED[y.elem] for y in s.fields if v in y.versions) + ("B" if flex else "")
            get = [f"e[{j}]" if s.bind.kind == TUPLE else f"e.{y.py}" for j, y in enumerate(s.py_fields) if v in y.versions]
            return f"b''.join([{self.const(fmt)}.pack({', '.join(get + (['0'] if flex else []))}) for e in {x}])"
        if f.struct is not None:
            return f"b''.join([{self.encoder(f.struct, v, flex)}(e) for e in {x}])"
        if elem == "string":
            if flex:
                return f"b''.join([C.w_compact_string(e) for e in {x}])"
            return f"b''.join([_S_h.pack(len(d)) + d for d in [e.encode() for e in {x}]])"
        if elem == "bytes":
            return (f"b''.join([C.w_compact_bytes(e) for e in {x}])" if flex
                    else f"b''.join([_S_i.pack(len(e)) + e for e in {x}])")
        return f"b''.join([e.bytes for e in {x}])"  # uuid

    # the module
    def record(self, key: Message, value: Message, tables: dict[str, list[str]]) -> None:
        """Declare a record's classes and codecs; its rows of the topic's tables."""
        self.declare(key.struct, f"The key of {key.name} (record type{'s' if len(key.valid) > 1 else ''} "
                                 f"{', '.join(map(str, key.valid))}).")
        flexible = f"; flexible {_range(sorted(value.flexible))}" if value.flexible else ""
        self.declare(value.struct, f"{value.name} (version{'s' if len(value.valid) > 1 else ''} "
                                   f"{_range(value.valid)}{flexible}).")
        kcls, vcls = key.struct.bind.name, value.struct.bind.name
        for kv in key.valid:
            tables["key_dec"].append(f"{kv}: {self.decoder(key.struct, kv, kv in key.flexible)}")
        kw = writes(key)[0]
        tables["key_enc"].append(f"{kcls}: {self.encoder(key.struct, kw, kw in key.flexible, kw)}")
        fn = snake(vcls)
        tables["value_dec"].append(f"{kcls}: decode_{fn}")
        tables["keys"].append(kcls)
        if f"decode_{fn}" in self.funcs:  # a class of two records (one layout): once
            return
        lo, hi = value.valid[0], value.valid[-1]
        dec = [self.decoder(value.struct, vv, vv in value.flexible) for vv in value.valid]
        enc = {vv: self.encoder(value.struct, vv, vv in value.flexible, vv) for vv in writes(value)}
        tables["value_enc"].append(f"{vcls}: {enc[writes(value)[0]]}")
        tables["values"].append(vcls)
        self.funcs[f"_D_{fn.upper()}"] = f"_D_{fn.upper()} = ({', '.join(dec)},)\n"
        self.funcs[f"_E_{fn.upper()}"] = f"_E_{fn.upper()} = {{{', '.join(f'{k}: {e}' for k, e in enc.items())}}}\n"
        check = f"version != {lo}" if lo == hi else f"not {lo} <= version <= {hi}"
        self.funcs[f"decode_{fn}"] = _DECODE_VALUE.format(fn=fn, cls=vcls, name=value.name, vs=_range(value.valid),
                                                          check=check, lo=lo, FN=fn.upper())
        self.funcs[f"encode_{fn}"] = _ENCODE_VALUE.format(fn=fn, cls=vcls, name=value.name, FN=fn.upper(),
                                                          vs=("version " if len(enc) == 1 else "versions ") + ", ".join(map(str, enc)),
                                                          write=writes(value)[0])

    def render(self) -> str:
        tables: dict[str, list[str]] = {"key_dec": [], "key_enc": [], "value_dec": [], "value_enc": [], "keys": [],
                                        "values": []}
        for key, value in load_module(self.module):
            self.record(key, value, tables)
        kinds = {c.bind.kind for c in self.classes.values()}
        head = [f'"""{self.module.doc}\n\nGenerated by ``tools/gen_records.py`` from ``tools/coordinator_records.json`` '
                '— do not edit;\nchange the schema or the bindings and run the generator.\n"""\n',
                "from __future__ import annotations\n",
                "import struct\nimport uuid\nfrom collections.abc import Callable"
                + ("\nfrom dataclasses import dataclass" if "dataclass" in kinds else "")
                + "\nfrom typing import Any" + (", NamedTuple" if "namedtuple" in kinds else "") + "\n",
                "from ..protocol import coordinator_codec as C"]
        head += [f"from {mod} import {', '.join(sorted(names))}" for mod, names in sorted(self.imports.items())]
        head.append("\n_UUID = uuid.UUID\n_ZERO_UUID = uuid.UUID(int=0)\n_new = tuple.__new__")
        self.const("h")
        head += [f"{n} = struct.Struct('>{fmt}')" for fmt, n in sorted(self.structs.items(), key=lambda x: x[1])]

        def part(*prefixes: str, sep: str = "\n\n") -> str:
            return sep.join(src for name, src in self.funcs.items() if name.startswith(prefixes))
        codecs = "\n\n".join(src for name, src in self.funcs.items() if name.startswith(("_d_", "_e_", "_s_")))
        dispatch = _DISPATCH.format(
            key_union=" | ".join(tables.pop("keys")), value_union=" | ".join(tables.pop("values")),
            **{k: "\n".join(f"    {row}," for row in rows) for k, rows in tables.items()})
        return ("\n".join(head) + "\n\n\n# -- records " + "-" * 88 + "\n" + "\n\n".join(self.out_classes)
                + "\n\n# -- decoders and encoders (one per struct and version) " + "-" * 43 + "\n" + codecs
                + "\n\n" + part("_D_", "_E_", sep="") + "\n\n# -- by record " + "-" * 85 + "\n"
                + part("decode_", "encode_") + "\n\n" + dispatch)


def writes(m: Message) -> tuple[int, ...]:
    """The versions hightide writes of a record (the first: what ``encode_*`` writes)."""
    return m.struct.bind.writes or (m.valid[-1],)


_DECODE_VALUE = '''def decode_{fn}(data: bytes) -> {cls}:
    """The {name} of ``data`` (any of versions {vs}); bytes after the fields of its
    version are ignored, as Kafka's readers do. Raises RecordFormatError."""
    try:
        (version,) = _S_h.unpack_from(data, 0)
        if {check}:
            raise C.RecordFormatError(f"unknown {name} version {{version}}")
        value = _D_{FN}[version - {lo}](data, 2)[0]
    except struct.error:
        raise C.RecordFormatError("record truncated") from None
    return value
'''

_ENCODE_VALUE = '''def encode_{fn}(value: {cls}, version: int = {write}) -> bytes:
    """The bytes of a {name} as ``version`` lays it out (hightide writes {vs})."""
    encode = _E_{FN}.get(version)
    if encode is None:
        raise ValueError(f"hightide does not write {name} version {{version}}")
    return encode(value)
'''

_DISPATCH = '''# -- the topic ------------------------------------------------------------------------------------------
Key = {key_union}
Value = {value_union}

_KEY_DECODERS: dict[int, Callable[[bytes, int], tuple[Any, int]]] = {{
{key_dec}
}}
_KEY_ENCODERS: dict[type, Callable[[Any], bytes]] = {{
{key_enc}
}}
_VALUE_DECODERS: dict[type, Callable[[bytes], Any]] = {{
{value_dec}
}}
_VALUE_ENCODERS: dict[type, Callable[[Any], bytes]] = {{
{value_enc}
}}


def decode_key(data: bytes) -> Key | None:
    """The key; None for a record type (the int16 that starts a key) not generated here.
    Bytes after the key's fields are ignored, as Kafka's readers do. Raises
    RecordFormatError."""
    try:
        (version,) = _S_h.unpack_from(data, 0)
        decode = _KEY_DECODERS.get(version)
        if decode is None:
            return None
        key = decode(data, 2)[0]
    except struct.error:
        raise C.RecordFormatError("record truncated") from None
    return key


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value of ``key``'s record (None for a tombstone). Raises RecordFormatError."""
    return None if data is None else _VALUE_DECODERS[type(key)](data)


def encode_key(key: Key) -> bytes:
    """The key's bytes (its record type's version)."""
    return _KEY_ENCODERS[type(key)](key)


def encode_value(value: Value | None) -> bytes | None:
    """The value's bytes in the version hightide writes; None for a tombstone."""
    return None if value is None else _VALUE_ENCODERS[type(value)](value)
'''


def _doc(text: str) -> str:
    return f'"""{text}"""'


def _range(vs: list[int]) -> str:
    return str(vs[0]) if len(vs) == 1 else f"{vs[0]}-{vs[-1]}"


def _size(fmt: str) -> int:
    import struct
    return struct.calcsize(">" + fmt)


def _uv(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def render_all() -> dict[Path, str]:
    return {ROOT / m.path: Gen(m).render() for m in MODULES}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated module is out of date")
    args = ap.parse_args()
    stale = []
    for path, text in render_all().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
