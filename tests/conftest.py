"""Shared fixtures: a real ``hightide serve`` subprocess on a free loopback port."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SHARED_RETENTION_CHECK_MS = 86_400_000


class ServerProcess:
    """A `hightide serve` child process. ``bootstrap`` is its HOST:PORT."""

    def __init__(self, data_dir: Path, port: int | None = None, args: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-{uuid.uuid4().hex[:6]}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> "ServerProcess":
        self._log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "hightide", "serve", "--data-dir", str(self.data_dir),
               "--listen", self.bootstrap, *self.args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hightide serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"hightide serve did not start:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> ServerProcess:
    """One broker shared by the tests that only need *a* broker (unique topic names).

    Its retention check runs once a day: many tests write records with fixed 2023
    timestamps, which the default 7-day retention deletes — with the default 5-minute
    check, a tick landing between a test's produce and its consume emptied the partition
    (a flake seen once in a full run). Retention itself is tested on fresh servers."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared") / "data",
                        args=("--set", f"log.retention.check.interval.ms={SHARED_RETENTION_CHECK_MS}")).start()
    yield srv
    code = srv.stop()
    assert code == 0, f"broker did not shut down cleanly ({code}):\n{srv.output()[-4000:]}"
    assert "Traceback" not in srv.output(), srv.output()[-6000:]


@pytest.fixture
def fresh_server(tmp_path):
    """A broker of its own (restart / crash tests). Yields a factory taking extra args."""
    started: list[ServerProcess] = []

    def make(*args: str, data_dir: Path | None = None, port: int | None = None) -> ServerProcess:
        srv = ServerProcess(data_dir or tmp_path / "data", port, args).start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        if srv.proc and srv.proc.poll() is None:
            srv.stop()


@pytest.fixture
def topic_name(request) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:60]
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


os.environ.setdefault("PYTHONUNBUFFERED", "1")
