"""Produce/consume throughput over TLS vs plaintext, in one run (issue 17).

Run:  .venv/bin/python bench/tls.py [--seconds S] [--rounds N] [--record-bytes B]

Starts one ``hightide serve`` (free loopback ports, temporary data dir, certificates made
with ``openssl``) with three listeners: PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), and
measures, interleaved over ``--rounds`` rounds so machine noise hits every listener alike:

1. this run's physical limits: loopback TCP, and Python ``ssl`` over loopback (one TLS
   1.3 connection, AES-GCM as negotiated: the crypto ceiling of one broker connection);
2. produce throughput, one confluent-kafka producer (linger.ms=10, batch.size=1 MiB,
   acks=all, 10 KB records) into a 1-partition topic per listener and round;
3. consume throughput, one confluent-kafka consumer reading that topic back (assign, no
   group) on the same listener.

Prints one JSON document on stdout (progress on stderr) and writes it to
``bench/results/<date>-tls.json``. MB = 10**6 bytes. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402

MB = 1_000_000
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (PEM)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=bench CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj",
            "/CN=localhost", cwd=d)
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days",
            "2", "-extfile", "ext", "-out", "server.crt", cwd=d)
    (d / "server.pem").write_text((d / "server.crt").read_text() + (d / "server.key").read_text())
    return {"ca": d / "ca.crt", "server": d / "server.pem", "cert": d / "server.crt", "key": d / "server.key"}


def tls_loopback(certs: dict[str, Path], seconds: float = 1.0, chunk: int = 1 << 20) -> dict:
    """MB/s through one TLS connection over loopback (Python's ssl, both ends here)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(certs["server"]))
    client_ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    received = [0]

    def serve() -> None:
        conn, _ = lsock.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            while True:
                data = tls.recv(chunk)
                if not data:
                    break
                received[0] += len(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    payload = os.urandom(chunk)
    with client_ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1") as c:
        cipher = c.cipher()
        start = time.perf_counter()
        sent = 0
        while time.perf_counter() - start < seconds:
            c.sendall(payload)
            sent += chunk
        elapsed = time.perf_counter() - start
    t.join(10)
    lsock.close()
    return {"mb_per_s": round(sent / elapsed / MB, 1), "cipher": cipher[0] if cipher else None,
            "version": cipher[1] if cipher else None}


def client_conf(listener: str, port: int, certs: dict[str, Path]) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}"}
    if listener in ("SSL", "SASL_SSL"):
        conf.update({"security.protocol": listener, "ssl.ca.location": str(certs["ca"])})
    if listener == "SASL_SSL":
        conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": "bench-secret"})
    return conf


def produce(conf: dict, topic: str, size: int, seconds: float) -> dict:
    from confluent_kafka import Producer
    failed = [0]

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed[0] += 1

    p = Producer({**conf, "linger.ms": 10, "batch.size": 1 << 20, "acks": "all", "compression.type": "none",
                  "queue.buffering.max.kbytes": 64 * 1024, "delivery.report.only.error": True,
                  "on_delivery": on_delivery})
    payload = os.urandom(size)
    p.produce(topic, payload)
    p.flush(30)
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            try:
                p.produce(topic, payload)
                n += 1
            except BufferError:
                p.poll(0.002)
        p.poll(0)
    left = p.flush(60)
    elapsed = time.perf_counter() - start
    ok = n - failed[0] - left
    return {"records": ok, "failed": failed[0] + left, "seconds": round(elapsed, 2),
            "mb_per_s": round(ok * size / elapsed / MB, 1)}


def consume(conf: dict, topic: str, expected: int, timeout: float = 120.0) -> dict:
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({**conf, "group.id": "bench-unused", "enable.partition.eof": True, "fetch.max.bytes": 50 << 20,
                  "max.partition.fetch.bytes": 10 << 20, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    n = nbytes = 0
    start = time.perf_counter()
    last = start
    while n < expected and time.perf_counter() - start < timeout:
        for m in c.consume(10_000, 0.5):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and n >= expected:
                    break
                continue
            n += 1
            nbytes += len(m.value())
            last = time.perf_counter()
    c.close()
    elapsed = max(last - start, 1e-9)
    return {"records": n, "expected": expected, "seconds": round(elapsed, 2), "mb_per_s": round(nbytes / elapsed / MB, 1)}


def start_broker(data: Path, ports: dict[str, int], certs: dict[str, Path]) -> subprocess.Popen:
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "ssl.keystore.location": str(certs["server"]),
    }
    args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "serve", "--data-dir", str(data), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", ports["PLAINTEXT"]), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("hightide serve did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="produce duration per run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--record-bytes", type=int, default=10_000)
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, \
        UserScramCredentialUpsertion
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        d = Path(tmp)
        (d / "certs").mkdir()
        certs = make_certs(d / "certs")
        _limits.log("physical limits")
        limits = {"loopback_tcp_mb_per_s": round(_limits.loopback_tcp(), 1),
                  "tls_loopback": tls_loopback(certs)}
        ports = {n: free_port() for n in LISTENERS}
        proc = start_broker(d / "data", ports, certs)
        runs: dict[str, list[dict]] = {n: [] for n in LISTENERS}
        try:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
            up = UserScramCredentialUpsertion("bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              b"bench-secret")
            for fut in admin.alter_user_scram_credentials([up]).values():
                fut.result(15)
            for r in range(args.rounds):
                for listener in LISTENERS:
                    topic = f"tls-{listener.lower()}-{r}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
                    conf = client_conf(listener, ports[listener], certs)
                    _limits.log(f"round {r + 1}: {listener} produce")
                    p = produce(conf, topic, args.record_bytes, args.seconds)
                    _limits.log(f"round {r + 1}: {listener} consume ({p['mb_per_s']} MB/s produced)")
                    c = consume(conf, topic, p["records"])
                    runs[listener].append({"produce": p, "consume": c})
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    summary = {}
    for listener, rs in runs.items():
        summary[listener] = {
            "produce_mb_per_s": statistics.median(x["produce"]["mb_per_s"] for x in rs),
            "consume_mb_per_s": statistics.median(x["consume"]["mb_per_s"] for x in rs)}
    base = summary["PLAINTEXT"]
    for listener in ("SSL", "SASL_SSL"):
        s = summary[listener]
        s["produce_vs_plaintext"] = round(s["produce_mb_per_s"] / base["produce_mb_per_s"], 2)
        s["consume_vs_plaintext"] = round(s["consume_mb_per_s"] / base["consume_mb_per_s"], 2)
    doc = {"benchmark": "tls", "date": datetime.date.today().isoformat(), "revision": _limits.git_revision(),
           "machine": _limits.machine(), "record_bytes": args.record_bytes, "seconds_per_run": args.seconds,
           "rounds": args.rounds, "limits": limits, "summary": summary, "runs": runs}
    text = json.dumps(doc, indent=2)
    print(text)
    out = Path(__file__).resolve().parent / "results" / f"{doc['date']}-tls.json"
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
