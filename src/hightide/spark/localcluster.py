"""Spark on this machine from pip's pyspark, beyond ``local[*]``: a standalone master and
worker, or a Spark Connect server, each a JVM run in the foreground in its own process
group (so stopping it also stops the executors and Python workers it started). Used by
the tests (three modes) and ``bench/spark_throughput.py``; handy to try a job the way a
cluster runs it.

    with LocalCluster(tmp) as c:
        url = c.start_connect_server()          # sc://127.0.0.1:PORT
        spark = SparkSession.builder.remote(url).getOrCreate()

pip's pyspark ships everything: ``bin/spark-class`` runs the standalone daemons, and the
Connect server (``org.apache.spark.sql.connect.service.SparkConnectServer``, what
``sbin/start-connect-server.sh`` submits) is built into Spark 4's jars.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

__all__ = ["JvmProcess", "LocalCluster", "free_port", "spark_home"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    """pyspark's installation directory (it has ``bin/``, ``sbin/``, ``jars/``)."""
    from pyspark.find_spark_home import _find_spark_home
    return Path(_find_spark_home())


class JvmProcess:
    """A Spark JVM daemon in the foreground in its own process group, output in ``log``."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.log = name, log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait_port(self, port: int, timeout: float = 90.0) -> None:
        """Return once ``port`` accepts connections; raise RuntimeError (with the log's
        tail) if the process exits or the time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not listen on {port} within {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def stop(self, timeout: float = 30.0) -> None:
        """TERM the whole process group (the JVM and what it started), wait up to
        ``timeout``, then KILL what is left of the group."""
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._out.close()


class LocalCluster:
    """Starts daemons under ``work_dir`` (logs, worker dirs) and stops all of them, last
    started first, on :meth:`stop` / leaving the ``with`` block — also after a failed
    start. Python workers run ``python`` (default: this interpreter)."""

    def __init__(self, work_dir: str | os.PathLike[str], python: str = sys.executable) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.python = python
        self.processes: list[JvmProcess] = []

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python,
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.work_dir), SPARK_PID_DIR=str(self.work_dir),
                   SPARK_WORKER_DIR=str(self.work_dir / "work"))
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        return env

    def _start(self, name: str, cmd: list[str], log: str) -> JvmProcess:
        p = JvmProcess(name, cmd, self.work_dir / log, self.env())
        self.processes.append(p)
        return p

    def start_standalone(self, cores: int = 2, memory: str = "2g") -> str:
        """A master and one worker with ``cores`` and ``memory``; returns the master URL
        ``spark://127.0.0.1:PORT`` once both listen."""
        cls = str(spark_home() / "bin" / "spark-class")
        port, worker_port = free_port(), free_port()
        master = self._start("spark master", [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                              "--port", str(port), "--webui-port", str(free_port())], "master.log")
        master.wait_port(port)
        url = f"spark://127.0.0.1:{port}"
        worker = self._start("spark worker", [cls, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                              "--port", str(worker_port), "--webui-port", str(free_port()),
                                              "--cores", str(cores), "--memory", memory,
                                              "--work-dir", str(self.work_dir / "work"), url], "worker.log")
        worker.wait_port(worker_port)
        return url

    def start_connect_server(self, master: str = "local[2]", conf: dict[str, str] | None = None,
                             timeout: float = 120.0) -> str:
        """A Spark Connect server running its queries on ``master``; returns its
        ``sc://127.0.0.1:PORT`` URL once it listens."""
        port = free_port()
        confs = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
                 "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
                 **(conf or {})}
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class",
               "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "hightide-connect",
               "--master", master]
        for k, v in confs.items():
            cmd += ["--conf", f"{k}={v}"]
        server = self._start("spark connect server", cmd, "connect.log")
        server.wait_port(port, timeout=timeout)
        return f"sc://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop every started process, last first; the first error is raised after all
        were tried."""
        first: BaseException | None = None
        while self.processes:
            try:
                self.processes.pop().stop()
            except BaseException as exc:  # noqa: BLE001
                first = first or exc
        if first is not None:
            raise first
