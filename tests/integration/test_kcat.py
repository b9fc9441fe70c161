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
