"""The typed request views (``src/hightide/protocol/views/``, ``tools/gen_views.py``).

* the generated files are what the generator writes today (run it after a change of the
  served versions or of kio);
* every view fits kio's request class of every served version of its API: each property
  is a field of that version with a type the property's type admits (recursively for
  nested entities), each field read with ``opt`` is absent in some served version and, where
  present, of a type the overload's type admits; and every field of every version can be
  read one way or the other;
* the hand decoders' entities (:data:`hightide.protocol.codec.FAST_DECODERS`) fit the views
  of the versions they decode the same way;
* ``opt`` is ``getattr`` at run time.

``opt``'s overloads are read from ``__init__.pyi`` with :mod:`ast`.
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import datetime
import importlib
import sys
import types
import typing
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from hightide.protocol import codec, views
from hightide.protocol.offset_commit_request import OffsetCommitRequestBody
from hightide.protocol.produce_request import ProduceRequestBody
from hightide.protocol.share_fetch_request import ShareAcknowledgeRequestBody, ShareFetchRequestBody

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ROOT / "src" / "hightide" / "protocol" / "views"
sys.path.insert(0, str(ROOT / "tools"))
import gen_views as GV  # noqa: E402

sys.path.remove(str(ROOT / "tools"))

SERVED = GV.served_versions()


def test_generated_views_are_up_to_date() -> None:
    rendered = GV.render_all()
    for path, text in rendered.items():
        assert path.exists() and path.read_text() == text, \
            f"{path.relative_to(ROOT)} is out of date: run python tools/gen_views.py"
    assert set(VIEWS.glob("*.py*")) == set(rendered), "a file in views/ is not generated: run python tools/gen_views.py"


def test_opt_is_getattr() -> None:
    assert views.opt is getattr


def api_of(key: int) -> str:
    return load_request_schema(key, SERVED[key][1]).__module__.split(".")[2]


def stub(api: str) -> types.ModuleType:
    """The views of ``api``."""
    return importlib.import_module(f"hightide.protocol.views.{api}")


@cache
def optional_fields() -> dict[tuple[str, str], dict[str, Any]]:
    """(api, entity) -> field -> the type ``opt`` returns for it (without the default's)."""
    tree = ast.parse((VIEWS / "__init__.pyi").read_text())
    namespace: dict[str, Any] = {"Sequence": collections.abc.Sequence, "uuid": uuid, "datetime": datetime}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        assert node.name == "opt"
        entity, name, default = node.args.posonlyargs
        assert entity.annotation is not None and name.annotation is not None and node.returns is not None
        field = ast.literal_eval(typing.cast(ast.Subscript, name.annotation).slice)
        returns = ast.unparse(node.returns)
        if ast.unparse(default.annotation or ast.Constant(...)) == "None":  # a nullable field's default None
            assert returns.endswith(" | None")
            continue
        assert returns.endswith(" | _D")
        entities = ast.unparse(entity.annotation).split(" | ")
        for e in entities:
            api, cls = e.split(".")
            namespace[api] = stub(api)
            out.setdefault((api, cls), {})[field] = eval(returns.removesuffix(" | _D"), namespace)  # noqa: S307
    return out


def members(t: Any) -> tuple[Any, ...]:
    if typing.get_origin(t) in (types.UnionType, typing.Union):
        return typing.get_args(t)
    return (t,)


def admits(view_t: Any, t: Any, api: str, problems: list[str], where: str) -> bool:
    """Whether every value of (kio's or a hand decoder's) type ``t`` is a ``view_t``."""
    for m in members(t):
        if not any(_admits_one(v, m, api, problems, where) for v in members(view_t)):
            return False
    return True


def _admits_one(v: Any, m: Any, api: str, problems: list[str], where: str) -> bool:
    if m is type(None) or v is type(None):
        return m is v
    if typing.get_origin(m) in (tuple, list):
        return (typing.get_origin(v) is collections.abc.Sequence
                and admits(typing.get_args(v)[0], typing.get_args(m)[0], api, problems, where))
    if isinstance(v, type) and v.__module__ == f"hightide.protocol.views.{api}":  # a nested view
        return isinstance(m, type) and fits(m, v, api, problems, where)
    return isinstance(m, type) and isinstance(v, type) and issubclass(m, v)


def fits(cls: type, view: type, api: str, problems: list[str], where: str = "") -> bool:
    """Whether entity class ``cls`` (one version's) fits ``view``; appends why not to ``problems``."""
    hints = typing.get_type_hints(cls)
    fields = set(hints) - {n for n in hints if n.startswith("__")}
    optional = optional_fields().get((api, view.__name__), {})
    ok = True
    props = {n for n, p in vars(view).items() if isinstance(p, property)}
    for name in props:
        prop = vars(view)[name]
        view_t = typing.get_type_hints(prop.fget, globalns=vars(stub(api)))["return"]
        if name not in fields:
            problems.append(f"{where}{view.__name__}.{name}: not a field of {cls.__qualname__}")
            ok = False
        elif (api, view.__name__, name) in GV.OVERRIDES and cls.__module__.startswith("kio."):
            continue  # typed after the hand decoder (see test_overrides_are_hand_decoded)
        elif not admits(view_t, hints[name], api, problems, f"{where}{view.__name__}.{name}."):
            problems.append(f"{where}{view.__name__}.{name}: {hints[name]} is not a {view_t}")
            ok = False
    for name, view_t in optional.items():
        if name in props:
            problems.append(f"{where}{view.__name__}.{name}: both a property and read with opt")
            ok = False
        elif name in fields and not admits(view_t, hints[name], api, problems, f"{where}{view.__name__}.{name}."):
            problems.append(f"{where}{view.__name__}.{name} (opt): {hints[name]} is not a {view_t}")
            ok = False
    return ok


CASES = [pytest.param(key, v, id=f"{api_of(key)}-v{v}") for key, (lo, hi) in SERVED.items() for v in range(lo, hi + 1)]


@pytest.mark.parametrize(("key", "version"), CASES)
def test_view_fits_kio(key: int, version: int) -> None:
    api = api_of(key)
    cls = load_request_schema(key, version)
    view = getattr(stub(api), cls.__name__)
    problems: list[str] = []
    assert fits(cls, view, api, problems), "\n".join(problems)
    # every field of every entity of this version can be read: a property or with opt
    todo: list[type] = [cls]
    while todo:
        c = todo.pop()
        v = getattr(stub(api), c.__name__)
        readable = {n for n, p in vars(v).items() if isinstance(p, property)} | set(
            optional_fields().get((api, c.__name__), {}))
        for f in dataclasses.fields(c):
            assert f.name in readable, f"{api}.{c.__name__}.{f.name} (v{version}) is not in the view"
        for t in typing.get_type_hints(c).values():
            todo += [a for m in members(t) for a in (typing.get_args(m) or (m,))
                     if isinstance(a, type) and dataclasses.is_dataclass(a)]


@pytest.mark.parametrize("key", sorted(SERVED), ids=api_of)
def test_opt_fields_are_absent_in_some_version(key: int) -> None:
    """A field read with ``opt`` is missing from at least one served version of its entity
    (else it would be a property)."""
    api = api_of(key)
    lo, hi = SERVED[key]
    present: dict[str, list[set[str]]] = {}
    for v in range(lo, hi + 1):
        todo: list[type] = [load_request_schema(key, v)]
        while todo:
            c = todo.pop()
            present.setdefault(c.__name__, []).append({f.name for f in dataclasses.fields(c)})
            for t in typing.get_type_hints(c).values():
                todo += [a for m in members(t) for a in (typing.get_args(m) or (m,))
                         if isinstance(a, type) and dataclasses.is_dataclass(a)]
    for (a, entity), fields in optional_fields().items():
        if a != api:
            continue
        for name in fields:
            assert not all(name in s for s in present[entity]), f"{api}.{entity}.{name} is in every served version"


def test_overrides_are_hand_decoded() -> None:
    """A view typed after a hand decoder instead of kio covers only versions it decodes."""
    for api, _, _ in GV.OVERRIDES:
        key = next(k for k in SERVED if api_of(k) == api)
        lo, hi = SERVED[key]
        assert set(range(lo, hi + 1)) <= set(codec.FAST_DECODERS[key][0])


HAND_DECODED = {0: ProduceRequestBody, 8: OffsetCommitRequestBody, 78: ShareFetchRequestBody,
                79: ShareAcknowledgeRequestBody}


@pytest.mark.parametrize("key", sorted(HAND_DECODED))
def test_hand_decoders_fit_the_views(key: int) -> None:
    assert set(HAND_DECODED) == set(codec.FAST_DECODERS)
    api = api_of(key)
    view = getattr(stub(api), load_request_schema(key, SERVED[key][1]).__name__)
    problems: list[str] = []
    assert fits(HAND_DECODED[key], view, api, problems), "\n".join(problems)
