"""kio's native entity and array readers never decode bytes from a peer (issue 11, defect 3).

They pre-allocate arrays from the declared length, so one hostile length (2^31 - 1
elements) aborts the process with "memory allocation of 17179869176 bytes failed" under a
memory limit — no exception to catch. Everything hightide decodes from a client or a
broker goes through :func:`hightide.protocol.tolerant.read_tolerant`, which bounds every
array length by the bytes left. This test scans ``src/`` and fails on any use of those
readers; the bounded decoder itself may use kio's primitive field readers (strings, bytes
and numbers check the buffer before they allocate).
"""

from __future__ import annotations

import ast
from pathlib import Path

import hightide

SRC = Path(hightide.__file__).resolve().parent  # the package under test (also with PYTHONPATH)

FORBIDDEN = {"entity_reader", "compact_array_reader", "legacy_array_reader"}
"""Readers that allocate from a declared length: never in src/."""
FORBIDDEN_MODULES = {"kio.serial._parse"}
"""kio's Python-level entity parser (same pre-allocation contract)."""
PRIMITIVE_FACTORIES = {"get_field_reader", "get_reader"}
"""Native reader factories: only the bounded decoder may use them (for primitives)."""
ALLOWED_PRIMITIVE_USERS = {"protocol/tolerant.py"}


def violations(source: str, rel: str) -> list[str]:
    """Each forbidden use in ``source`` as ``"rel:line: what"``."""
    out = []
    banned = FORBIDDEN | (set() if rel in ALLOWED_PRIMITIVE_USERS else PRIMITIVE_FACTORIES)
    for node in ast.walk(ast.parse(source, rel)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kio"):
            if node.module in FORBIDDEN_MODULES:
                out.append(f"{rel}:{node.lineno}: imports {node.module}")
            out += [f"{rel}:{node.lineno}: imports {a.name} from {node.module}"
                    for a in node.names if a.name in banned]
        elif isinstance(node, ast.Import):
            out += [f"{rel}:{node.lineno}: imports {a.name}" for a in node.names if a.name in FORBIDDEN_MODULES]
        elif isinstance(node, ast.Attribute) and node.attr in banned:
            out.append(f"{rel}:{node.lineno}: uses .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in banned:
            out.append(f"{rel}:{node.lineno}: calls {node.func.id}()")
    return out


def test_no_native_entity_reader_in_src() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the scan really covers the package
    found = [v for f in files for v in violations(f.read_text(), f.relative_to(SRC).as_posix())]
    assert found == [], "kio's native entity/array readers on peer bytes (use protocol.tolerant.read_tolerant):\n" \
        + "\n".join(found)


def test_the_scan_catches_each_form() -> None:
    caught = {
        "from kio.serial import entity_reader\nentity_reader(X)(b, 0)": 2,
        "import kio.serial\nkio.serial.entity_reader(X)(b, 0)": 1,
        "from kio._kio_native import legacy_array_reader": 1,
        "from kio.serial._parse import anything": 1,
        "from kio._kio_native import get_field_reader": 1,
        "from kio.serial.readers import read_int32\nread_int32(b, 0)": 0,
    }
    for source, n in caught.items():
        assert len(violations(source, "group/x.py")) == n, source
    assert violations("from kio._kio_native import get_field_reader, get_reader", "protocol/tolerant.py") == []
    assert len(violations("from kio.serial import entity_reader", "protocol/tolerant.py")) == 1
