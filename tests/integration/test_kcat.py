"""kcat (Debian) smoke test: metadata, produce, consume."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (make test installs it)")]


def test_kcat_metadata_produce_consume(server, topic_name):
    b = server.bootstrap
    lines = "\n".join(f"key{i}:value{i}" for i in range(100)) + "\n"
    subprocess.run(["kcat", "-b", b, "-P", "-t", topic_name, "-K:", "-z", "snappy"], input=lines.encode(),
                   check=True, timeout=30)
    meta = subprocess.run(["kcat", "-b", b, "-L", "-t", topic_name, "-J"], capture_output=True, check=True, timeout=30)
    assert topic_name.encode() in meta.stdout and b'"partitions"' in meta.stdout
    out = subprocess.run(["kcat", "-b", b, "-C", "-t", topic_name, "-e", "-o", "beginning", "-f", "%o %k=%s\\n"],
                         capture_output=True, check=True, timeout=30).stdout.decode().splitlines()
    assert out == [f"{i} key{i}=value{i}" for i in range(100)]
    # Query offsets by timestamp via kcat's -Q
    q = subprocess.run(["kcat", "-b", b, "-Q", "-t", f"{topic_name}:0:0"], capture_output=True, check=True,
                       timeout=30).stdout.decode()
    assert "offset 0" in q


def _kcat_group(bootstrap: str, group: str, topic: str) -> list[str]:
    """Consume ``topic`` in ``group`` with kcat's balanced consumer (-G) to the end (-e),
    committing as librdkafka does (auto commit, and on close); the values read."""
    r = subprocess.run(["kcat", "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
                        "-f", "%s\\n", "-e", topic], capture_output=True, timeout=60)
    assert r.returncode == 0 and b"ERROR" not in r.stderr, r.stderr.decode(errors="replace")
    return r.stdout.decode().splitlines()


def test_kcat_group_consume_commit_resume(server, topic_name):
    """Issue 29 item 1: Debian's kcat (librdkafka 2.0, which cannot skip tagged fields
    in OffsetFetch responses) consumes with a group, commits, and resumes where it was:
    the broker sends hightide's OffsetFetch tags only to clients that ask for them."""
    b = server.bootstrap

    def produce(values: list[str]) -> None:
        subprocess.run(["kcat", "-b", b, "-P", "-t", topic_name], input=("\n".join(values) + "\n").encode(),
                       check=True, timeout=30)
    produce([f"a{i}" for i in range(5)])
    assert _kcat_group(b, "kcat-g", topic_name) == [f"a{i}" for i in range(5)]
    produce(["b0", "b1"])
    assert _kcat_group(b, "kcat-g", topic_name) == ["b0", "b1"]  # resumed from the commit
    assert _kcat_group(b, "kcat-g", topic_name) == []
