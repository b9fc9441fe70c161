"""`hightide serve` start-up failures (issue 12, item 7): one clear line on stderr, a
non-zero exit, no traceback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from ..conftest import free_port

pytestmark = pytest.mark.integration


def serve(*args: str, unprivileged: bool = False) -> subprocess.CompletedProcess:
    """``hightide serve ARGS``; ``unprivileged``: as root, without any capability (root
    bypasses permission bits through CAP_DAC_OVERRIDE), via util-linux's setpriv."""
    cmd = [sys.executable, "-m", "hightide", "serve", *args]
    if unprivileged and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "util-linux setpriv is needed to drop root's capabilities"
        cmd = [setpriv, "--inh-caps=-all", "--bounding-set=-all", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if " INFO " not in line]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_port_in_use(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = one_line_error(serve("--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}"))
    assert line == (f"Error: cannot listen on 127.0.0.1:{port}: address already in use (another broker or Kafka "
                    f"is running there; choose another with --listen HOST:PORT).")


def test_data_dir_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    line = one_line_error(serve("--data-dir", str(f), "--listen", f"127.0.0.1:{free_port()}"))
    assert line == f"Error: --data-dir {f} is a file, not a directory."
    line = one_line_error(serve("--data-dir", str(f / "sub"), "--listen", f"127.0.0.1:{free_port()}"))
    assert line == f"Error: cannot create data directory {f / 'sub'}: Not a directory ({f / 'sub'} is not a directory)."


def test_data_dir_not_writable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    line = one_line_error(serve("--data-dir", str(d), "--listen", f"127.0.0.1:{free_port()}", unprivileged=True))
    assert line == f"Error: data directory {d} is not writable by this user (uid {os.getuid()})."


def test_bad_toml_names_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("num.partitions = \n")
    line = one_line_error(serve("--data-dir", str(tmp_path / "d"), "--config", str(bad)))
    assert line.startswith(f"Error: {bad}: invalid TOML: ")


def test_unknown_config_names_suggest(tmp_path):
    typo = tmp_path / "typo.toml"
    typo.write_text("num.partitons = 3\n")
    line = one_line_error(serve("--data-dir", str(tmp_path / "d"), "--config", str(typo)))
    assert line == f"Error: {typo}: Unknown broker configuration 'num.partitons' (did you mean 'num.partitions'?)"
    line = one_line_error(serve("--data-dir", str(tmp_path / "d"), "--set", "log.retention.hour=1"))
    assert line == "Error: Unknown broker configuration 'log.retention.hour' (did you mean 'log.retention.hours' or 'log.retention.ms'?)"
