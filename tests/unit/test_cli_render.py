"""The CLI's plain table renderer and the --samples progress line (no broker needed)."""

from __future__ import annotations

import io

from hightide.cli import groups as groups_cmd
from hightide.cli._common import Col, render_table

COLS = [Col("GROUP", "g"), Col("LAG", "lag"), Col("CONSUMER-ID", "c", drop=3), Col("HOST", "h", drop=4),
        Col("NOTE", "n", drop=1)]
ROWS = [{"g": "orders-readers", "lag": 12, "c": "rdkafka-" + "f" * 36, "h": "/10.0.0.1", "n": None}]


def test_everything_fits_or_no_limit():
    text, hidden = render_table(COLS, ROWS, None)
    assert hidden == []
    assert text.splitlines() == [
        "GROUP           LAG  CONSUMER-ID                                   HOST       NOTE",
        "orders-readers  12   rdkafka-ffffffffffffffffffffffffffffffffffff  /10.0.0.1  -",
    ]


def test_optional_columns_go_highest_drop_first_until_it_fits():
    text, hidden = render_table(COLS, ROWS, 75)
    assert hidden == ["HOST"]
    assert max(map(len, text.splitlines())) <= 75
    text, hidden = render_table(COLS, ROWS, 30)
    assert hidden == ["HOST", "CONSUMER-ID"]
    assert text.splitlines()[1] == "orders-readers  12   -"


def test_key_columns_overflow_rather_than_being_cut():
    text, hidden = render_table(COLS, ROWS, 10)
    assert hidden == ["HOST", "CONSUMER-ID", "NOTE"]
    assert text.splitlines()[1] == "orders-readers  12"


def test_progress_only_on_a_terminal(monkeypatch):
    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(groups_cmd.sys, "stderr", err)
    p = groups_cmd.Progress(3)
    p.show(1, 2.0)
    p.done()
    assert err.getvalue() == "\rsample 1/3 taken, 4s left ... \r\033[K"
    quiet = io.StringIO()
    monkeypatch.setattr(groups_cmd.sys, "stderr", quiet)
    p = groups_cmd.Progress(3)
    p.show(1, 2.0)
    p.done()
    assert quiet.getvalue() == ""
