"""Physical limits of the machine a benchmark runs on, measured in the same run, and
the small helpers every benchmark shares (progress log, the commit measured).

Every benchmark in ``bench/`` reports these next to its own numbers so the results read
as ratios ("produce reached 0.4x of what the page cache takes") rather than as absolute
numbers that mean something else on the next machine. All throughputs are MB/s with
MB = 10**6 bytes.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MiB = 1 << 20
MB = 1_000_000


def loopback_tcp(seconds: float = 1.0, chunk: int = MiB) -> float:
    """Push ``chunk``-sized buffers through one TCP loopback connection for ``seconds``."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    received = [0]

    def reader() -> None:
        conn, _ = srv.accept()
        buf = bytearray(chunk)
        view = memoryview(buf)
        with conn:
            while True:
                n = conn.recv_into(view)
                if not n:
                    break
                received[0] += n

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    data = os.urandom(chunk)
    with socket.create_connection(("127.0.0.1", port)) as c:
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            c.sendall(data)
    th.join()
    elapsed = time.perf_counter() - t0
    srv.close()
    return received[0] / elapsed / MB


def page_cache_write(directory: str, seconds: float = 1.0, chunk: int = MiB, cap: int = 3 << 30) -> float:
    """``os.write`` of ``chunk``-sized buffers to a fresh file (no fsync)."""
    data = os.urandom(chunk)
    fd, path = tempfile.mkstemp(dir=directory, prefix="limits-pc-")
    try:
        written = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline and written < cap:
            written += os.write(fd, data)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return written / elapsed / MB


def page_cache_read(directory: str, size: int = 512 * MiB, chunk: int = MiB, seconds: float = 1.0) -> float:
    """``os.pread`` of ``chunk``-sized ranges of a file that sits in the page cache."""
    data = os.urandom(chunk)
    fd, path = tempfile.mkstemp(dir=directory, prefix="limits-pr-")
    try:
        for _ in range(size // chunk):
            os.write(fd, data)
        buf = bytearray(chunk)
        read = 0
        pos = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            n = os.preadv(fd, [buf], pos)
            read += n
            pos = pos + n if pos + n < size else 0
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return read / elapsed / MB


def fdatasync_write(directory: str, seconds: float = 1.0, chunk: int = MiB) -> dict:
    """``os.write`` + ``os.fdatasync`` per ``chunk``: the durable-ack ceiling."""
    data = os.urandom(chunk)
    fd, path = tempfile.mkstemp(dir=directory, prefix="limits-sync-")
    try:
        written = 0
        syncs = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            written += os.write(fd, data)
            os.fdatasync(fd)
            syncs += 1
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"mb_per_s": written / elapsed / MB, "fdatasyncs_per_s": syncs / elapsed}


def measure(directory: str, seconds: float = 1.0) -> dict:
    """All limits, in MB/s.

    Appending to a fresh file is noisy on VMs: the first touch of guest memory that the
    host has not backed yet is slow, so three runs are reported and the median is used.
    """
    sync = fdatasync_write(directory, seconds)
    pc = [round(page_cache_write(directory, seconds / 2), 1) for _ in range(3)]
    return {
        "loopback_tcp_mb_per_s": round(loopback_tcp(seconds), 1),
        "page_cache_write_mb_per_s": sorted(pc)[1],
        "page_cache_write_runs_mb_per_s": pc,
        "page_cache_pread_mb_per_s": round(page_cache_read(directory, seconds=seconds), 1),
        "fdatasync_write_mb_per_s": round(sync["mb_per_s"], 1),
        "fdatasyncs_per_s_1mib": round(sync["fdatasyncs_per_s"], 1),
        "chunk_bytes": MiB,
        "seconds_each": seconds,
    }


def machine() -> dict:
    """What the numbers were measured on."""
    info: dict = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total_kb"] = int(f.readline().split()[1])
    except OSError:
        pass
    try:
        import confluent_kafka
        info["confluent_kafka"] = getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version())
        info["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    try:
        import uvloop
        info["uvloop"] = uvloop.__version__
    except ImportError:
        info["uvloop"] = None
    if shutil.which("kcat"):
        try:
            out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=5).stdout
            info["kcat"] = next((ln.split()[1] for ln in out.splitlines() if ln.startswith("Version")), "unknown")
        except (OSError, subprocess.TimeoutExpired, IndexError):
            info["kcat"] = "unknown"
    info["executable"] = sys.executable
    return info


if __name__ == "__main__":
    import json
    d = tempfile.mkdtemp(prefix="limits-")
    try:
        print(json.dumps({"machine": machine(), "physical_limits": measure(d)}, indent=2))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def log(msg: str) -> None:
    """A progress line on stderr (stdout carries the JSON result)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def git_revision() -> str | None:
    """The commit the broker code was measured at (``+dirty`` with local changes)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, timeout=5).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def emit(out: dict, path: str | None) -> None:
    """Print a bench's JSON result and, with ``--out``, write it to ``path`` too."""
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        Path(path).write_text(text + "\n")


def process_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system, all threads) the processes ``pids`` used so far (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick
