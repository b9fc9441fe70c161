"""docs/compatibility.md must list exactly what the broker advertises."""

import re
from pathlib import Path

import pytest

from hightide.server import registry
from hightide.server.handlers import routes

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def test_table_matches_routes():
    rows = re.findall(r"^\| [A-Za-z]+ \| (\d+) \| (\d+)–(\d+) \|", DOC.read_text(), re.M)
    documented = {int(k): (int(lo), int(hi)) for k, lo, hi in rows}
    advertised = {k: (r.min_version, r.max_version) for k, r in routes().items()}
    assert documented == advertised


def test_importing_the_handlers_registers_nothing_global():
    # The table is built from the handler modules on demand and cannot be changed.
    table = routes()
    assert routes() == table and routes() is not table
    with pytest.raises(TypeError):
        table[9999] = table[18]  # type: ignore[index]
    assert not [name for name, v in vars(registry).items() if isinstance(v, dict) and v and name.isupper()]
