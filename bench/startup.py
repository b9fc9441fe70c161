"""Start-up time of ``hightide serve``: exec -> accepting connections, on an empty data
directory, imports included (the README promises "well under a second").

Each run starts ``python -m hightide serve --data-dir <fresh dir> --listen 127.0.0.1:<free>``
as a new process and polls the port with a TCP connect every 2 ms; the time from just
before the exec to the first accepted connection is one sample. The broker is then
stopped with SIGTERM. Also measured, in the same run, for scale: a bare interpreter
(``python -c pass``, the floor no Python program starts under) and the import of the
modules serving needs (wall time of the imports only). The broker's CPU time (user +
system, from /proc) up to accepting is reported too: on a shared, loaded machine it is
the load-independent part of the wall time.

Prints JSON: median/min/max of ``--runs`` (default 10) samples of each, the machine's
load average, and the commit measured. Not a test: nothing is asserted.

    python bench/startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _limits import git_revision, log, machine  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    """The children's environment: this tree's ``src`` first, and bytecode writing on
    (PYTHONDONTWRITEBYTECODE, set in some shells and CI images, would make every start
    recompile every module: ~0.4 s more CPU here, which is not what a second start of an
    installed hightide costs). The warm-up run writes the ``.pyc`` files."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (Linux /proc), else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


CPU: list[float] = []
"""CPU seconds of each serve_once run up to accepting (load-independent, unlike wall time)."""


def serve_once(timeout: float = 30.0) -> float:
    """Seconds from exec to the first accepted TCP connection of a fresh broker; its CPU
    seconds up to that moment are appended to :data:`CPU`."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="startup-") as d:
        cmd = [sys.executable, "-m", "hightide", "serve", "--data-dir", os.path.join(d, "data"),
               "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
        try:
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        took = time.perf_counter() - t0
                        cpu = _cpu_s(proc.pid)
                        if cpu is not None:
                            CPU.append(cpu)
                        break
                except OSError:
                    if proc.poll() is not None:
                        raise RuntimeError(f"serve exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
                    if time.perf_counter() - t0 > timeout:
                        raise RuntimeError("serve did not accept connections in time") from None
                    time.sleep(0.002)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return took


def python_once(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=_env())
    return time.perf_counter() - t0


def stats(xs: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(xs), 4), "min_s": round(min(xs), 4), "max_s": round(max(xs), 4),
            "runs": len(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    serve_once()  # warm the page cache (the .pyc files), as a second start on a machine is
    results = {}
    for name, fn in (("serve_exec_to_accepting", serve_once),
                     ("python_bare", lambda: python_once("pass")),
                     ("import_for_serving", lambda: python_once(
                         "import sys; sys.modules['hypothesis'] = None; import hightide.cli; "
                         "import hightide.server.broker"))):
        xs = []
        for i in range(args.runs):
            xs.append(fn())
            log(f"{name} {i + 1}/{args.runs}: {xs[-1] * 1000:.0f} ms")
        results[name] = stats(xs)
    if CPU:
        results["serve_cpu_to_accepting"] = stats(CPU[1:])  # (the warm-up run excluded)
    print(json.dumps({"benchmark": "startup", "results": results, "loadavg": os.getloadavg(),
                      "machine": machine(), "git_revision": git_revision()}, indent=2))


if __name__ == "__main__":
    main()
