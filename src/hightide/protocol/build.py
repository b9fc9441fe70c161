"""Build version-specific kio entities from plain dicts.

Handlers describe a response once, as nested dicts and lists using kio's field names;
:func:`materialize` turns that into the entity class of the negotiated version, dropping
keys the version does not have and filling fields the dict omits from their schema
defaults. One description serves every version.
"""

from __future__ import annotations

import datetime
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


@cache
def _plan(cls: type) -> tuple[tuple[str, str, Any, Any], ...]:
    plan = []
    for f in fields(cls):
        kind = classify_field(f)
        ktype = get_schema_field_type(f) if not isinstance(kind, (EntityField, EntityTupleField)) else ""
        sub = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        mode = "tuple" if isinstance(kind, EntityTupleField) else ("entity" if sub else ktype)
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        plan.append((f.name, mode, sub, default))
    return tuple(plan)


def materialize(cls: type, data: dict[str, Any]) -> Any:
    """Instantiate ``cls`` from ``data``. Raises KeyError naming a required field missing."""
    kwargs: dict[str, Any] = {}
    for name, mode, sub, default in _plan(cls):
        if name not in data:
            if default is MISSING:
                raise KeyError(f"{cls.__qualname__}.{name} is required")
            continue
        v = data[name]
        if mode == "tuple":
            v = None if v is None else tuple(materialize(sub, x) for x in v)
        elif mode == "entity":
            v = None if v is None else (v if isinstance(v, sub) else materialize(sub, v))
        elif mode == "error_code":
            v = ErrorCode(int(v))
        elif mode == "timedelta_i32" or mode == "timedelta_i64":
            v = v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=int(v))
        elif mode == "datetime_i64":
            if isinstance(v, int):
                v = None if v < 0 else _EPOCH + datetime.timedelta(milliseconds=v)
        elif isinstance(v, list):
            v = tuple(v)
        kwargs[name] = v
    return cls(**kwargs)


def field_names(cls: type) -> frozenset[str]:
    return frozenset(p[0] for p in _plan(cls))
