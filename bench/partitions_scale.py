"""Partitions on one node (issue 33): how cost grows with the number of partitions.

For each target N (``--partitions 10000,25000,...``) a fresh ``hightide serve`` (its own
data directory, ``--fd-limit`` as its RLIMIT_NOFILE, soft = hard) gets topics of
``--per-topic`` partitions, ``--topics-per-request`` topics per CreateTopics, until it
holds N partitions. Measured at N:

* ``create_s`` / ``partitions_per_s``: wall time of the creates (and the first error, if any);
* ``metadata_all_s``: a Metadata request for all topics, to its answer received (median
  of 3; ``metadata_all_first_s`` the first, ``metadata_all_decoded_s`` with this Python
  client's decoding, which costs more than the broker at 100,000 partitions);
* ``rss_mb`` / ``fds``: the broker's VmRSS and open descriptors (/proc);
* ``produce_s``: one record to every partition (one Produce per topic, acks=-1);
* then ``kill -9`` and a restart on the same directory: ``restart_listen_s`` (exec to
  accepting connections), ``restart_first_served_s`` (exec to a Produce to the first
  topic's every partition answered without error: from 2,000 partitions the logs load in
  the background once listening, the first topic's first), ``restart_serving_s`` (exec
  to a Metadata answer listing all N partitions and a Produce to the last topic's every
  partition answered without error: every log loaded), and RSS/fds after the restart.

``--src`` chooses the code measured (default: this tree's ``src``), so a before/after
pair runs in one sitting. Prints JSON on stdout and writes it to
``bench/results/<date>-partitions_scale-<label>.json``. Not a test: nothing is asserted.

    python bench/partitions_scale.py --partitions 10000,25000 --label after
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kio.index import load_request_schema  # noqa: E402

from hightide.protocol.build import materialize  # noqa: E402
from hightide.protocol.codec import encode_request  # noqa: E402
from hightide.protocol.records import build_batch  # noqa: E402
from tests.rawkafka import RawClient  # noqa: E402

from _limits import git_revision, log, machine  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


class Server:
    def __init__(self, src: str, data_dir: str, fd_limit: int, extra: list[str]) -> None:
        self.src, self.data_dir, self.fd_limit, self.extra = src, data_dir, fd_limit, extra
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir + f"-{self.port}.log"

    def start(self, timeout: float = 600) -> float:
        """Exec and wait until the port accepts; returns the seconds it took."""
        limit = self.fd_limit

        def preexec() -> None:
            if limit > 0:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        env = dict(os.environ, PYTHONPATH=self.src)
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "hightide", "serve", "--data-dir", self.data_dir,
                                      "--listen", f"127.0.0.1:{self.port}", *self.extra], env=env,
                                     stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, preexec_fn=preexec)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: {self.tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return time.monotonic() - t0
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("serve did not listen")

    def tail(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _create(c: RawClient, names: list[str], per_topic: int) -> list[int]:
    r = c.request(19, 5, {"topics": [{"name": n, "num_partitions": per_topic, "replication_factor": 1,
                                     "assignments": [], "configs": []} for n in names],
                          "timeout": 600_000, "validate_only": False})
    return [t.error_code for t in r.topics]


_METADATA_ALL = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def _metadata_partitions(c: RawClient) -> int:
    r = c.request(3, 12, _METADATA_ALL)
    return sum(len(t.partitions) for t in r.topics if t.error_code == 0)


def _metadata_timed(c: RawClient) -> tuple[float, float, int]:
    """(seconds to the whole answer received, seconds with the client's decoding, partitions)."""
    req = materialize(load_request_schema(3, 12), _METADATA_ALL)
    c.corr += 1
    t = time.monotonic()
    c.send_bytes(encode_request(3, 12, c.corr, "rawkafka", req))
    frame = c.recv_frame()
    received = time.monotonic() - t
    r = c.decode_response(3, 12, frame)
    decoded = time.monotonic() - t
    return received, decoded, sum(len(x.partitions) for x in r.topics if x.error_code == 0)


def _produce_topic(c: RawClient, topic: str, per_topic: int) -> list[int]:
    batch = build_batch([(None, b"v", [], 1_700_000_000_000)])
    r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 60_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": batch} for p in range(per_topic)]}]})
    return [p.error_code for p in r.responses[0].partition_responses]


def run_one(n: int, args: argparse.Namespace, workdir: str) -> dict:
    data = os.path.join(workdir, f"data-{n}")
    srv = Server(args.src, data, args.fd_limit, args.set)
    res: dict = {"partitions_target": n, "per_topic": args.per_topic, "topics_per_request": args.topics_per_request}
    res["listen_empty_s"] = round(srv.start(), 3)
    topics = [f"scale-{i:06d}" for i in range(n // args.per_topic)]
    created = 0
    errors: dict[int, int] = {}
    try:
        with RawClient(srv.bootstrap, timeout=900) as c:
            t0 = time.monotonic()
            for i in range(0, len(topics), args.topics_per_request):
                chunk = topics[i:i + args.topics_per_request]
                for code in _create(c, chunk, args.per_topic):
                    if code == 0:
                        created += args.per_topic
                    else:
                        errors[code] = errors.get(code, 0) + 1
                if (i // args.topics_per_request) % 20 == 0:
                    log(f"N={n}: {created} partitions created, {time.monotonic() - t0:.1f} s")
            res["create_s"] = round(time.monotonic() - t0, 2)
            res["partitions_created"] = created
            res["partitions_per_s"] = round(created / res["create_s"], 1)
            res["create_errors"] = errors
            res.update({f"after_create_{k}": v for k, v in _proc_status(srv.proc.pid).items()})
            lat, dec = [], []
            for _ in range(3):
                received, decoded, seen = _metadata_timed(c)
                lat.append(received)
                dec.append(decoded)
            res["metadata_all_s"] = round(statistics.median(lat), 3)  # the answer received
            res["metadata_all_first_s"] = round(lat[0], 3)  # (the first: every topic encoded afresh)
            res["metadata_all_decoded_s"] = round(statistics.median(dec), 3)  # with the client's decoding
            res["metadata_all_partitions"] = seen
            if args.produce:
                t = time.monotonic()
                bad = 0
                for name in topics:
                    bad += sum(1 for e in _produce_topic(c, name, args.per_topic) if e)
                res["produce_s"] = round(time.monotonic() - t, 2)
                res["produce_errors"] = bad
            res.update({f"after_produce_{k}": v for k, v in _proc_status(srv.proc.pid).items()})
        srv.kill9()
        log(f"N={n}: killed; restarting")
        srv2 = Server(args.src, data, args.fd_limit, args.set)
        t0 = time.monotonic()
        res["restart_listen_s"] = round(srv2.start(), 3)
        try:
            with RawClient(srv2.bootstrap, timeout=900) as c:
                while topics:  # the first topic's partitions (loaded first) take a Produce
                    if not any(_produce_topic(c, topics[0], args.per_topic)):
                        res["restart_first_served_s"] = round(time.monotonic() - t0, 3)
                        break
                    if time.monotonic() - t0 > 900:
                        break
                    time.sleep(0.05)
                while True:  # (polled gently: a Metadata for every topic costs the loop)
                    if (not topics or not any(_produce_topic(c, topics[-1], args.per_topic))) and (
                            _metadata_partitions(c) >= created):
                        break
                    if time.monotonic() - t0 > 900:
                        res["restart_serving_s"] = None
                        break
                    time.sleep(0.2)
                res.setdefault("restart_serving_s", round(time.monotonic() - t0, 3))
                res["restart_metadata_all_s"] = round(_metadata_timed(c)[0], 3)
            res.update({f"after_restart_{k}": v for k, v in _proc_status(srv2.proc.pid).items()})
            res["log_tail"] = srv2.tail()[-600:] if args.keep_log else None
        finally:
            srv2.stop()
    finally:
        srv.stop()
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="10000", help="comma-separated targets")
    ap.add_argument("--per-topic", type=int, default=10)
    ap.add_argument("--topics-per-request", type=int, default=1)
    ap.add_argument("--fd-limit", type=int, default=20000, help="the broker's RLIMIT_NOFILE (0: inherit)")
    ap.add_argument("--src", default=str(ROOT / "src"))
    ap.add_argument("--set", action="append", default=[], help="extra serve args, e.g. --set=--set --set=x=y")
    ap.add_argument("--no-produce", dest="produce", action="store_false")
    ap.add_argument("--label", default="run")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--keep-log", action="store_true")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="partitions-scale-")
    results = []
    for n in (int(x) for x in args.partitions.split(",")):
        log(f"N={n} ({args.label})")
        results.append(run_one(n, args, workdir))
        log(json.dumps(results[-1]))
    out = {"bench": "partitions_scale", "label": args.label, "src": args.src, "commit": git_revision(),
           "machine": machine(), "loadavg": os.getloadavg(), "fd_limit": args.fd_limit, "results": results}
    text = json.dumps(out, indent=1)
    print(text)
    dest = ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-partitions_scale-{args.label}.json"
    dest.write_text(text + "\n")


if __name__ == "__main__":
    main()
