"""The fenced blocks of README.md and docs/*.md, classified, for the tests that run them
(tests/integration/test_docs_run.py) and check that every block is classified
(tests/unit/test_docs_blocks.py).

The convention:

* ```` ```console ```` and ```` ```sh ````: shell commands a user can run. A block with
  ``$ `` prompts is a transcript: each ``$ `` line (with its ``\\`` continuation lines) is
  a command and the lines up to the next prompt are the output it shows, compared after
  normalising (:func:`normalise`; blanks and line breaks are not compared, so a long
  line may be shown wrapped; a line ``...`` stands for any number of lines, ``...`` in
  a line for any text). A block
  without prompts is a list of commands (``\\`` continues a line; ``#`` lines are
  comments) whose output is not shown.
* ```` ```python ````: a program a user can run (each block in its own interpreter).
* ```` ```toml ````: a file's contents; it must parse. One whose first line is a comment
  naming the file (``# hightide.toml ...``) is written there for the commands after it.
* ```` ```text ````, ```` ```properties ```` and ```` ```yaml ````: not commands (output,
  synopses, layouts, properties files, manifests). A ``$ `` prompt line in one is an error (a transcript is ``console``).
* Any other tag, or none, is an error: a new block must say what it is.
* A runnable block that cannot run in the test suite (a Spark or Kubernetes cluster,
  minutes of benchmark, files under /etc) is preceded by ``<!-- not-run: REASON -->`` on
  the line before its fence; the tests count and list them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL = frozenset({"console", "sh"})
PYTHON = frozenset({"python"})
PARSED = frozenset({"toml"})
TEXT = frozenset({"text", "properties", "yaml"})
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")


class Unclassified(ValueError):
    """A block the convention does not cover (the message says which and why)."""


@dataclass(frozen=True)
class Block:
    doc: str
    """The Markdown file, relative to the repository root."""
    line: int
    """The line number of the opening fence (1-based)."""
    lang: str
    text: str
    not_run: str | None = None
    """The reason of a ``<!-- not-run: ... -->`` marker before the fence, or None."""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def kind(self) -> str:
        """``shell``, ``python``, ``toml``, ``text`` or ``not-run``; raises
        :class:`Unclassified` for a block outside the convention."""
        if not self.lang:
            raise Unclassified(f"{self.where}: a fenced block without a language: tag it console/sh (commands), "
                               f"python, toml, or text (output, synopsis, layout)")
        if self.lang not in SHELL | PYTHON | PARSED | TEXT:
            raise Unclassified(f"{self.where}: unknown block language {self.lang!r}")
        if self.not_run is not None:
            if self.lang not in SHELL | PYTHON:
                raise Unclassified(f"{self.where}: a not-run marker on a {self.lang} block (only commands and "
                                   f"programs are run)")
            if not self.not_run:
                raise Unclassified(f"{self.where}: a not-run marker without a reason")
            return "not-run"
        if self.lang in TEXT:
            if any(line.startswith("$ ") for line in self.text.splitlines()):
                raise Unclassified(f"{self.where}: a {self.lang} block with a `$ ` prompt: a transcript is "
                                   f"```console")
            return "text"
        return {"console": "shell", "sh": "shell", "python": "python", "toml": "toml"}[self.lang]


def toml_file_name(block: Block) -> str | None:
    """The file a TOML block says it is (its first line ``# NAME.toml ...``), or None."""
    m = re.match(r"#\s*([\w.-]+\.toml)\b", block.text)
    return m.group(1) if m else None


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text().split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(```+)\s*([\w-]*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != fence.group(1):
            end += 1
        marker = NOT_RUN.match(lines[i - 1]) if i else None
        out.append(Block(str(path.relative_to(ROOT)), i + 1, fence.group(2), "\n".join(lines[i + 1:end]),
                         marker.group("reason") if marker else None))
        i = end + 1
    return out


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks(path)]


@dataclass(frozen=True)
class Step:
    """One shell command of a block and the output the doc shows for it (None: not
    shown)."""

    command: str
    expected: tuple[str, ...] | None


def steps(block: Block) -> list[Step]:
    """The commands of a shell block (see the module docstring)."""
    lines = block.text.split("\n")
    prompted = any(line.startswith("$ ") for line in lines)
    out: list[Step] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if prompted and not line.startswith("$ "):
            raise Unclassified(f"{block.where}: output before the first `$ ` prompt: {line!r}")
        if not prompted and (not line.strip() or line.lstrip().startswith("#")):
            i += 1
            continue
        command = line[2:] if prompted else line
        while command.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command.rstrip()[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        expected: list[str] | None = None
        if prompted:
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            while expected and not expected[-1].strip():
                expected.pop()
        out.append(Step(command.strip(), None if expected is None else tuple(expected)))
    return out


_NORMAL = [
    (re.compile(r"\b[A-Za-z0-9_-]{22}\b(?=[\s,:)]|$)"), "<ID>"),  # cluster and topic ids (base64 UUIDs)
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<TIME>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}T[\d:.]+Z?"), "<DATETIME>"),
    (re.compile(r"\bpid \d+"), "pid <N>"),
    (re.compile(r"\bSize: \d+"), "Size: <N>"),  # bytes of a log: how a client batched its records
    (re.compile(r"\b(127\.0\.0\.1|localhost):\d+"), r"\1:<PORT>"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s)\b"), "<DURATION>"),
]


def normalise(line: str) -> str:
    """A line of output with what differs from run to run replaced (ids, times, pids,
    ports, durations, log sizes) and runs of blanks made one space."""
    for pattern, repl in _NORMAL:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """Whether the actual output matches the shown one, both normalised and compared
    blank-insensitively, line breaks included (a doc may show a long line wrapped): a
    shown line ``...`` matches any number of lines, ``...`` inside a line any text."""
    want = [w for w in (normalise(x) for x in expected) if w]
    got = " ".join(g for g in (normalise(x) for x in actual) if g)
    pattern = r"\s*".join(".*?" if w == "..." else ".*?".join(map(re.escape, w.split("..."))) for w in want)
    return re.fullmatch(pattern, got, re.S) is not None
