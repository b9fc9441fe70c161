"""docs/configuration.md carries the config tables generated from hightide.config."""

import os
from pathlib import Path

from hightide.config import config_doc_tables

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
BEGIN, END = "<!-- config-tables:begin -->\n", "<!-- config-tables:end -->"


def test_config_tables_match_the_definitions():
    """Set HIGHTIDE_WRITE_DOCS=1 to rewrite the section from the definitions."""
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    documented, tail = rest.split(END, 1)
    if os.environ.get("HIGHTIDE_WRITE_DOCS") == "1":
        DOC.write_text(head + BEGIN + config_doc_tables() + END + tail)
        return
    assert documented == config_doc_tables(), \
        "docs/configuration.md is out of date: HIGHTIDE_WRITE_DOCS=1 pytest tests/unit/test_configuration_doc.py"
