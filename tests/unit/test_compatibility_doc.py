"""docs/compatibility.md must list exactly what the broker advertises."""

import re
from pathlib import Path

import hightide.server.handlers  # noqa: F401  (registers routes)
from hightide.server.registry import ROUTES

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def test_table_matches_routes():
    rows = re.findall(r"^\| [A-Za-z]+ \| (\d+) \| (\d+)–(\d+) \|", DOC.read_text(), re.M)
    documented = {int(k): (int(lo), int(hi)) for k, lo, hi in rows}
    advertised = {k: (r.min_version, r.max_version) for k, r in ROUTES.items()}
    assert documented == advertised
