"""No ``asyncio.wait_for`` in src/ (issue 26 item 3).

On Python 3.11 ``asyncio.wait_for`` returns the awaited result and swallows a
cancellation that arrives in the same loop step as that result: a loop stopped by
cancellation then never stops (the metadata follower's fetch loop did, and the broker
never exited). Use ``asyncio.timeout()``, ``asyncio.wait((task,), timeout=...)`` or the
helpers in ``hightide.aio.tasks``. Comments and strings (docstrings that explain why)
are not code and are ignored: the source is tokenized.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
#: The one module that uses it on purpose: the simulator's variant that puts the defect
#: back into the code to show the simulator finds it (never run by the product).
DEFECT_ON_PURPOSE = {SRC / "hightide" / "sim" / "regressions.py"}


def wait_for_uses(source: str) -> list[int]:
    """Line numbers where code (not a comment or string) names ``asyncio.wait_for`` or
    imports ``wait_for`` from asyncio."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type in (tokenize.NAME, tokenize.OP)]
    lines = []
    for i, tok in enumerate(toks):
        if tok.type != tokenize.NAME or tok.string != "wait_for":
            continue
        dotted = i >= 2 and toks[i - 1].string == "." and toks[i - 2].string == "asyncio"
        imported = any(t.string == "import" for t in toks[max(0, i - 8):i]) and any(
            t.string == "asyncio" for t in toks[max(0, i - 8):i])
        if dotted or imported:
            lines.append(tok.start[0])
    return lines


def test_the_checker_finds_code_and_ignores_comments_and_strings():
    code = ("import asyncio\n"
            "# asyncio.wait_for(x, 1) in a comment\n"
            "'''``asyncio.wait_for(...)`` in a docstring'''\n"
            "async def f(x):\n"
            "    return await asyncio.wait_for(x, 1)\n"
            "from asyncio import wait_for\n"
            "def wait_for_x(): pass\n")
    assert wait_for_uses(code) == [5, 6]


def test_src_never_uses_asyncio_wait_for():
    found = [f"{path.relative_to(SRC.parent)}:{line}"
             for path in sorted(SRC.rglob("*.py")) if path not in DEFECT_ON_PURPOSE
             for line in wait_for_uses(path.read_text(encoding="utf-8"))]
    assert not found, ("asyncio.wait_for swallows a cancellation on Python 3.11; use asyncio.timeout() "
                       "or asyncio.wait((task,), timeout=...): " + ", ".join(found))
