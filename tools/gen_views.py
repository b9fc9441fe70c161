"""Generate the typed request views (``src/hightide/protocol/views/``) from kio's schemas.

    python tools/gen_views.py          # (re)write the generated files
    python tools/gen_views.py --check  # exit 1 if one is out of date

Input: the versions hightide serves per API (the route tables of
:mod:`hightide.server.handlers`, broker and controller listeners: what ApiVersions
advertises) and kio's request classes for those versions (one dataclass per version per
API, ``kio.schema.<api>.v<N>.request``, nested entities as classes of the same module).

Output: per API a module ``views/<api>.py`` (kio's module name) with one final class per
entity (the request and every nested entity, kio's class names) whose read-only
properties are the fields present in **every** served version in which the entity occurs,
typed with the builtin type behind kio's field type (``i32`` -> ``int``, ``TopicName`` ->
``str``, ``tuple[X, ...]`` -> ``Sequence[X]``, the union over the versions when it
varies), so that kio's entities and hightide's hand decoders (plain ints, lists) both
fit. A field present only in some served versions is not a property: it is read with
``opt(entity, "name", default)``, ``getattr`` at run time (``views/__init__.py``) and for
mypy an overload per such field (``views/__init__.pyi``) checking the entity, the name and
the default, returning ``field type | type of default``.

The views are classes, not Protocols, on purpose: a request reaches its handler as
``Any`` (the decoder's result), so a view is only ever an annotation, and ``opt``'s
overloads must tell entities apart by name (structurally, an entity with no field common
to all versions would match every overload).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re
import sys
import textwrap
import types
import typing
import uuid
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "hightide" / "protocol" / "views"

#: kio's field types, most specific first: a field's view type is the first one its kio type derives from.
BUILTINS: tuple[tuple[type, str], ...] = (
    (bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (bytes, "bytes"),
    (datetime.timedelta, "timedelta"), (datetime.datetime, "datetime"), (uuid.UUID, "UUID"),
)

#: Fields whose view type is not kio's, because every served version is decoded by hand
#: (:data:`hightide.protocol.codec.FAST_DECODERS`): Produce's records are views of the frame.
OVERRIDES: dict[tuple[str, str, str], str] = {
    ("produce", "PartitionProduceData", "records"): "memoryview | None",
}


@dataclasses.dataclass
class Entity:
    """One kio entity class of an API over the served versions it occurs in."""

    api: str
    name: str
    versions: list[int] = dataclasses.field(default_factory=list)
    fields: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)  # name -> version -> type text

    def common(self) -> list[str]:
        return [f for f, per in self.fields.items() if len(per) == len(self.versions)]

    def optional(self) -> list[str]:
        return [f for f, per in self.fields.items() if len(per) != len(self.versions)]

    def type(self, name: str) -> str:
        per = self.fields[name]
        return union(per[v] for v in sorted(per, reverse=True))


def served_versions() -> dict[int, tuple[int, int]]:
    """api key -> (min, max): the union of the broker's and the controller's route tables."""
    sys.path.insert(0, str(ROOT / "src"))
    from hightide.server import handlers as H
    from hightide.server.registry import build_routes
    modules = {*H.MODULES, *H.CONTROLLER_MODULES, *H.CONTROLLER_SERVICE_MODULES, H.raft_rpcs, H.describe_quorum}
    out: dict[int, tuple[int, int]] = {}
    for module in sorted(modules, key=lambda m: m.__name__):
        for key, route in build_routes([module]).items():
            lo, hi = out.get(key, (route.min_version, route.max_version))
            out[key] = (min(lo, route.min_version), max(hi, route.max_version))
    return dict(sorted(out.items()))


def type_text(t: typing.Any, nested: list[type]) -> str:
    """The view type of kio field type ``t``; nested entity classes are appended to ``nested``."""
    if t is type(None):
        return "None"
    origin = typing.get_origin(t)
    if origin in (types.UnionType, typing.Union):
        return union(type_text(a, nested) for a in typing.get_args(t))
    if origin is tuple:
        return f"Sequence[{type_text(typing.get_args(t)[0], nested)}]"
    if dataclasses.is_dataclass(t):
        nested.append(typing.cast(type, t))
        return t.__name__
    for base, name in BUILTINS:
        if isinstance(t, type) and issubclass(t, base):
            return name
    raise TypeError(f"no view type for kio type {t!r}")


def union(texts: Iterable[str]) -> str:
    """The union of type texts (first-seen order, None last, duplicates dropped)."""
    parts: list[str] = []
    for text in texts:
        for p in text.split(" | "):
            if p not in parts:
                parts.append(p)
    return " | ".join([p for p in parts if p != "None"] + (["None"] if "None" in parts else []))


def entities() -> dict[str, dict[str, Entity]]:
    """api (kio's module name) -> entity name -> entity, the request first."""
    from kio.index import load_request_schema
    out: dict[str, dict[str, Entity]] = {}
    for key, (lo, hi) in served_versions().items():
        api = load_request_schema(key, hi).__module__.split(".")[2]  # kio.schema.<api>.v<N>.request
        ents: dict[str, Entity] = {}
        for v in range(hi, lo - 1, -1):  # newest first: fields in kio's latest order
            todo = [load_request_schema(key, v)]
            while todo:
                cls = todo.pop(0)
                hints = typing.get_type_hints(cls)
                e = ents.setdefault(cls.__name__, Entity(api, cls.__name__))
                e.versions.insert(0, v)
                for f in dataclasses.fields(cls):
                    nested: list[type] = []
                    text = type_text(hints[f.name], nested)
                    e.fields.setdefault(f.name, {})[v] = OVERRIDES.get((api, cls.__name__, f.name), text)
                    todo.extend(nested)
        out[api] = ents
    return dict(sorted(out.items()))


def spans(versions: Iterable[int]) -> str:
    """``v3``, ``v3-7``, ``v3-5, v7``: versions as ranges."""
    vs = sorted(versions)
    out, start = [], vs[0]
    for a, b in zip(vs, vs[1:] + [-1]):
        if b != a + 1:
            out.append(f"v{start}" if start == a else f"v{start}-{a}")
            start = b
    return ", ".join(out)


#: The views' properties have no body (a view is never instantiated).
EMPTY_BODIES = '# mypy: disable-error-code="empty-body"\n'
HEADER = '''"""{doc}

Generated by ``tools/gen_views.py`` from kio's request classes and the route tables — do
not edit; run the generator when the served versions change.
"""
'''


def render_api(ents: dict[str, Entity]) -> str:
    request = next(iter(ents.values()))
    texts = " ".join(e.type(f) for e in ents.values() for f in e.common())
    imports = ["from __future__ import annotations", ""]
    if "Sequence[" in texts:
        imports.append("from collections.abc import Sequence")
    dt = sorted({w for w in ("datetime", "timedelta") if re.search(rf"\b{w}\b", texts)})
    if dt:
        imports.append(f"from datetime import {', '.join(dt)}")
    imports.append("from typing import final")
    if re.search(r"\bUUID\b", texts):
        imports.append("from uuid import UUID")
    classes = []
    for e in ents.values():
        doc = (f"{request.name} {spans(e.versions)}" if e is request
               else f"{request.name}'s {e.name} ({spans(e.versions)})")
        opt = e.optional()
        lines = ["@final", f"class {e.name}:"]
        if opt:
            doc += ". Read with ``opt`` (not in every version): " + ", ".join(
                f"{f} ({spans(e.fields[f])})" for f in opt)
        lines += [textwrap.fill(f'"""{doc}."""', 100, initial_indent="    ", subsequent_indent="    ")]
        for f in e.common():
            lines += ["", "    @property", f"    def {f}(self) -> {e.type(f)}: ..."]
        classes.append("\n".join(lines))
    doc = f"Typed views of {request.name} ({spans(request.versions)}: the versions hightide serves)."
    return (EMPTY_BODIES + HEADER.format(doc=doc) + "\n" + "\n".join(imports) + "\n\n\n" + "\n\n\n".join(classes) + "\n")


def overloads(all_ents: dict[str, dict[str, Entity]]) -> list[tuple[str, str, list[Entity]]]:
    """(field, type text, entities): one ``opt`` overload each."""
    groups: dict[tuple[str, str], list[Entity]] = defaultdict(list)
    for ents in all_ents.values():
        for e in ents.values():
            for f in e.optional():
                groups[f, e.type(f)].append(e)
    return [(f, t, es) for (f, t), es in sorted(groups.items())]


def render_opt(all_ents: dict[str, dict[str, Entity]]) -> str:
    def qualified(text: str, api: str) -> str:
        text = re.sub(r"\b[A-Z]\w*\b", lambda m: f"{api}.{m[0]}" if m[0] in all_ents[api] else m[0], text)
        return re.sub(r"\b(UUID|timedelta|datetime)\b",
                      lambda m: "uuid.UUID" if m[0] == "UUID" else f"datetime.{m[0]}", text)

    lines = []
    for f, t, es in overloads(all_ents):
        entity = " | ".join(f"{e.api}.{e.name}" for e in es)
        if t.endswith(" | None"):  # default None: its own overload (mypy fails to solve _D = None in comprehensions)
            lines += ["", "@overload", f'def opt(entity: {entity}, name: Literal["{f}"], default: None, /) -> '
                      f"{qualified(t, es[0].api)}: ..."]
        lines += ["", "@overload", f'def opt(entity: {entity}, name: Literal["{f}"], default: _D, /) -> '
                  f"{qualified(t, es[0].api)} | _D: ..."]
    doc = ("The types of :func:`opt` (``getattr`` at run time): one overload per field that is not in\n"
           "every served version of its entity.")
    return "\n".join([HEADER.format(doc=doc), "import datetime", "import uuid",
                      "from collections.abc import Sequence", "from typing import Literal, TypeVar, overload", "",
                      "from . import (", *(f"    {api}," for api in all_ents), ")", "", '_D = TypeVar("_D")'] + lines) + "\n"


INIT = '''"""Typed views of the decoded requests: what a handler may read of a request.

A module per API (``<api>.py``, kio's module name) holds a final class per entity (the
request and its nested entities, kio's class names) whose read-only properties are the
fields present in every version hightide serves, typed with the builtin type behind
kio's field type. A field present only in some versions is read with :func:`opt`
(``opt(p, "current_leader_epoch", -1)``): ``getattr`` at run time (no cost), and for mypy
an overload per such field (``__init__.pyi``) checking the entity, the field's name and
type. So mypy rejects a misspelt field, another API's field, and a field the oldest
served version lacks read as an attribute.

The views exist for mypy only (never instantiated; their properties have no body): a
handler imports them under ``TYPE_CHECKING`` and annotates the request it is given
(decoded as ``Any``) with one. ``tests/unit/test_views.py`` checks them against kio's classes of every served version
and against the hand decoders.

Generated by ``tools/gen_views.py`` from kio's request classes and the route tables —
do not edit; the test fails while a file is out of date.
"""

opt = getattr
'''


def render_all() -> dict[Path, str]:
    all_ents = entities()
    out = {OUT / "__init__.py": INIT, OUT / "__init__.pyi": render_opt(all_ents)}
    for api, ents in all_ents.items():
        out[OUT / f"{api}.py"] = render_api(ents)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is out of date")
    args = ap.parse_args()
    rendered = render_all()
    stale = [p for p, text in rendered.items() if not p.exists() or p.read_text() != text]
    extra = sorted(set(OUT.glob("*.py*")) - set(rendered))  # an API no longer served
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rendered[path])
    for path in extra:
        print(f"{'not generated' if args.check else 'removed'}: {path.relative_to(ROOT)}")
        if not args.check:
            path.unlink()
    return 1 if (stale or extra) and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
