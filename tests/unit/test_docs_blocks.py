"""Every fenced block of README.md and docs/*.md is classified by the convention of
tests/docs_blocks.py (a new block that is neither run, parsed, text nor marked not-run
fails here), TOML blocks parse, and the parser's rules hold."""

from __future__ import annotations

import tomllib

import pytest

from tests.docs_blocks import Block, Step, Unclassified, all_blocks, matches, normalise, steps


def test_every_block_is_classified():
    problems = []
    for block in all_blocks():
        try:
            block.kind
        except Unclassified as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_toml_blocks_parse():
    for block in all_blocks():
        if block.kind == "toml":
            tomllib.loads(block.text)


def test_not_run_blocks_are_counted_and_listed(capsys):
    not_run = [b for b in all_blocks() if b.kind == "not-run"]
    with capsys.disabled():
        print(f"\n{len(not_run)} doc blocks not run:")
        for b in not_run:
            print(f"  {b.where}: {b.not_run}")
    assert all(b.not_run for b in not_run)


def test_shell_blocks_have_commands():
    for block in all_blocks():
        if block.kind == "shell":
            assert steps(block), block.where


@pytest.mark.parametrize("block, error", [
    (Block("d.md", 3, "", "hightide topics list"), "without a language"),
    (Block("d.md", 3, "bash", "ls"), "unknown block language"),
    (Block("d.md", 3, "text", "$ hightide brokers\nID"), "transcript is ```console"),
    (Block("d.md", 3, "toml", "a = 1", not_run="needs a cluster"), "not-run marker on a toml"),
    (Block("d.md", 3, "sh", "ls", not_run=""), "without a reason"),
])
def test_blocks_outside_the_convention_are_errors(block, error):
    with pytest.raises(Unclassified, match=error):
        block.kind


def test_steps_of_a_transcript_and_of_a_command_list():
    transcript = Block("d.md", 1, "console", "$ hightide a \\\n  --b c\nout 1\n\nout 2\n$ hightide d\n")
    assert steps(transcript) == [Step("hightide a --b c", ("out 1", "", "out 2")), Step("hightide d", ())]
    listing = Block("d.md", 1, "sh", "# a comment\nhightide x \\\n    --y\n\nhightide z   # why\n")
    assert steps(listing) == [Step("hightide x --y", None), Step("hightide z   # why", None)]
    with pytest.raises(Unclassified, match="before the first"):
        steps(Block("d.md", 1, "console", "output\n$ hightide a"))


def test_outputs_match_after_normalising():
    assert normalise("controller-3000  127.0.0.1:9095   listening (pid 41211)") == \
        "controller-3000 127.0.0.1:<PORT> listening (pid <N>)"
    assert normalise("dev cluster Ha7dVXr6Qm2bZ5aJ0f9N1w: 1 controller") == "dev cluster <ID>: 1 controller"
    assert matches(("a", "...", "z"), ["a", "b", "c", "z"])
    assert matches(("a", "...", "z"), ["a", "z"])
    assert not matches(("a", "z"), ["a", "b", "z"])
    assert not matches(("a", "...", "z"), ["a", "b"])
    assert matches(("Size: ... bytes", "x"), ["Size:   85   bytes", "x"])
    assert not matches(("Size: ... bytes",), ["Size: 85"])
    assert matches(("a (x)",), ["a  (x)"])  # regex characters are literal
