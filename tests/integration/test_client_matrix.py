"""The client-age matrix (issue 29 item 2): every client, old and new, produces, consumes
with a group, commits, resumes from its commit, reads its committed offsets, uses its admin
client and runs transactions against hightide (docs/compatibility.md, "Client matrix").

Clients: librdkafka from Debian (kcat 1.7.1 on librdkafka 2.0.2; admin and transactions
are not kcat's) and from PyPI (confluent-kafka), kafka-python 2.0.2 and the newest,
aiokafka 0.8.1 and the newest, kafkajs (tests/js's lock file), and the Java client
(kafka-clients 3.9.1, compiled and run with the machine's JDK). ``make test`` installs the
old Python clients and the Java jars under .venv-clients/ (``make clients``); a client whose
environment is missing is skipped with the command that installs it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .kafkajs import JS_DIR, run_kafkajs

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_DIR = ROOT / "tests" / "clients"
OLD_PY = ROOT / ".venv-clients" / "old" / "bin" / "python"
JAVA_JARS = ROOT / ".venv-clients" / "java"
CHECKS = ["admin", "produce", "group consume + commit", "resume", "committed offsets", "transactions"]


def _names(client: str) -> tuple[str, str]:
    tag = f"{client}-{uuid.uuid4().hex[:6]}"
    return f"matrix-{tag}", f"matrix-g-{tag}"


def _json_line(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _python(interpreter: Path | str, client: str, bootstrap: str) -> dict:
    topic, group = _names(client)
    out = subprocess.run([str(interpreter), str(CLIENTS_DIR / "matrix_py.py"), client, bootstrap, topic, group],
                         capture_output=True, text=True, timeout=150)
    return _json_line(out)


def _java(bootstrap: str, tmp_path: Path) -> dict:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (javac, java)")
    jars = sorted(JAVA_JARS.glob("*.jar"))
    if not any(j.name == "kafka-clients.jar" for j in jars):
        pytest.skip("the Java client's jars are missing: run `make clients` (make test does)")
    cp = ":".join(map(str, jars))
    subprocess.run(["javac", "-d", str(tmp_path), "-cp", cp, str(CLIENTS_DIR / "Matrix.java")], check=True,
                   capture_output=True, timeout=120)
    topic, group = _names("java")
    out = subprocess.run(["java", "-cp", f"{tmp_path}:{cp}", "Matrix", bootstrap, topic, group],
                         capture_output=True, text=True, timeout=150)
    return _json_line(out)


def _kcat(bootstrap: str) -> dict:
    """Debian's librdkafka through kcat: produce, group consume with commit, resume
    (the balanced consumer commits as librdkafka does, and on close), metadata."""
    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed (make test installs it)")
    topic, group = _names("kcat")
    checks: dict[str, str] = {}

    def produce(values: list[str]) -> None:
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic], input="\n".join(values) + "\n", text=True,
                       check=True, timeout=30)

    def consume() -> list[str]:
        r = subprocess.run(["kcat", "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", "-f", "%s\\n",
                            "-e", topic], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "ERROR" not in r.stderr, r.stderr
        return r.stdout.splitlines()
    produce([f"a{i}" for i in range(5)])
    checks["produce"] = "ok"
    got = consume()
    checks["group consume + commit"] = "ok" if got == [f"a{i}" for i in range(5)] else f"got {got}"
    produce(["b0", "b1"])
    got = consume()
    checks["resume"] = "ok" if got == ["b0", "b1"] else f"got {got}"
    got = consume()
    checks["committed offsets"] = "ok" if got == [] else f"got {got}"
    meta = subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", topic, "-J"], capture_output=True, text=True,
                          check=True, timeout=30)
    checks["admin"] = "ok" if topic in meta.stdout else meta.stdout[:200]  # metadata only
    checks["transactions"] = "n/a"
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"Version (\S+) .*librdkafka (\S+)", version)
    return {"version": f"kcat {m[1]}, librdkafka {m[2]}" if m else version, "checks": checks}


def _kafkajs(bootstrap: str) -> dict:
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("kafkajs is not installed: run `npm ci --prefix tests/js` (make test does)")
    topic, group = _names("kafkajs")
    return run_kafkajs({"brokers": [bootstrap], "action": "matrix", "topic": topic, "group": group}, timeout=150)


def _old(client: str, bootstrap: str) -> dict:
    if not OLD_PY.exists():
        pytest.skip("the old clients' venv is missing: run `make clients` (make test does)")
    return _python(OLD_PY, client, bootstrap)


# client -> (run, expected version prefix, checks that are not the client's: "n/a")
MATRIX = {
    "librdkafka-debian": (lambda b, _: _kcat(b), "kcat 1.7.1, librdkafka 2.0", {"transactions"}),
    "confluent-kafka": (lambda b, _: _python(sys.executable, "confluent-kafka", b), "", set()),
    "kafka-python-2.0": (lambda b, _: _old("kafka-python", b), "2.0.", {"transactions"}),
    "kafka-python-newest": (lambda b, _: _python(sys.executable, "kafka-python", b), "", set()),
    "aiokafka-0.8": (lambda b, _: _old("aiokafka", b), "0.8.", set()),
    "aiokafka-newest": (lambda b, _: _python(sys.executable, "aiokafka", b), "", set()),
    "kafkajs": (lambda b, _: _kafkajs(b), "2.", set()),
    "java-kafka-clients": (_java, "3.9.1", set()),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("client", list(MATRIX))
def test_client_matrix(server, client, tmp_path):
    run, version, not_applicable = MATRIX[client]
    result = run(server.bootstrap, tmp_path)
    assert result["version"].startswith(version), result
    expected = {c: "n/a" if c in not_applicable else "ok" for c in CHECKS}
    assert result["checks"] == expected, (client, result)
