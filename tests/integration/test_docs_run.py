"""README.md and docs/*.md run as written (issue 32): every runnable block — by the
convention of tests/docs_blocks.py — is run in order, per document, against a fresh
broker (``hightide dev-cluster`` for docs/cluster.md), in a fresh directory, in an
80-column terminal (``COLUMNS=80``, and ``HIGHTIDE_WIDTH=80``: the width the tables take
in a terminal; a pipe is never squeezed):

* a transcript's commands must show the output the doc shows (stdout, then stderr,
  normalised: ids, times, pids, ports, durations; ``...`` for any text) and exit 0, or
  non-zero where the doc shows an ``Error:``;
* a command list (no prompts) and a Python block must exit 0;
* a command that serves until Ctrl-C (``hightide serve|console|exporter|dev-cluster``,
  ``lag watch`` without ``--iterations``) runs in the background until the output the
  doc shows has appeared (or for a few seconds when none is shown), then gets Ctrl-C
  (SIGINT) when its block ends and must stop within a bound, with exit 0 and no
  traceback;
* every line a ``hightide`` command prints fits in 80 columns (tabs at 8), except a line
  of one token, which cannot be cut (tests/integration/test_cli_width.py says which),
  an ``Error:`` line (an error is one line; the terminal wraps a long one), a log record
  of a served process (Kafka's are as long) and JSON output (``-o json``: for programs).

What the doc says runs against ``127.0.0.1:9092`` runs against the test's broker: the
commands' ``127.0.0.1:909N`` are rewritten to the broker's (or the dev cluster's) ports
(909[3-9] and the console's 8080 to free ones, for what a doc starts itself),
and ``HIGHTIDE_BOOTSTRAP_SERVER`` points the operator commands' default ``-b`` at it.
``.venv/bin/...`` and ``source .venv/bin/activate`` find this interpreter's hightide. A
TOML block that names its file (``# NAME.toml``) is written there first.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ServerProcess
from tests.docs_blocks import Block, Step, Unclassified, all_blocks, matches, steps, toml_file_name

pytestmark = pytest.mark.integration

WIDTH = 80
COMMAND_TIMEOUT_S = 120.0
PYTHON_TIMEOUT_S = 240.0  # the Spark example starts a JVM
SERVICE_START_S = 90.0
SERVICE_STOP_S = 60.0  # a dev cluster stops its brokers one by one, then its controller
SERVICE = re.compile(r"^(\S*/)?hightide (serve|console|exporter|dev-cluster)\b|^(\S*/)?hightide lag watch\b(?!.*--iterations)")
HIGHTIDE = re.compile(r"^(\S*/)?hightide\b")
JSON = re.compile(r"(-o|--output)[ =]json\b|--json\b")  # output for programs, not a terminal
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")  # a served process's log line

# What a doc needs besides a plain broker: the broker's settings the doc's own set-up
# gives it, and paths its commands use that the test puts in its directory instead.
BROKER_ARGS = {
    "docs/security.md": ("--set", "authorizer.class.name=standard", "--set", "super.users=User:ANONYMOUS"),
}
PATHS = {"docs/security.md": {"/etc/hightide/tls": "tls"}}
CLUSTER_DOCS = {"docs/cluster.md"}  # run against `hightide dev-cluster` (its own blocks start it)


def runnable_docs() -> list[str]:
    """The docs with a block to run, or with a block outside the convention (whose test
    then fails on it: tests/unit/test_docs_blocks.py lists them all)."""
    docs: dict[str, None] = {}
    for b in all_blocks():
        try:
            runnable = b.kind in ("shell", "python")
        except Unclassified:
            runnable = True
        if runnable:
            docs.setdefault(b.doc)
    return list(docs)


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports after it."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports")


@dataclass
class Service:
    command: str
    proc: subprocess.Popen
    out: Path
    err: Path

    def output(self) -> tuple[str, str]:
        return self.out.read_text(errors="replace"), self.err.read_text(errors="replace")


@dataclass
class DocRun:
    """One document's run: its directory, environment and the ports it maps."""

    doc: str
    dir: Path
    env: dict[str, str]
    ports: dict[int, int]
    paths: dict[str, str]
    cwd: Path = field(init=False)
    too_wide: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cwd = self.dir

    def rewrite(self, text: str) -> str:
        text = re.sub(r"\b(127\.0\.0\.1|localhost):(\d{4,5})\b",
                      lambda m: f"{m[1]}:{self.ports.get(int(m[2]), int(m[2]))}", text)
        for old, new in self.paths.items():
            text = text.replace(old, new)
        return text

    def check_width(self, command: str, *outputs: str) -> None:
        if not HIGHTIDE.match(command) or JSON.search(command):
            return
        for text in outputs:
            for line in text.splitlines():
                if line.startswith("Error: ") or LOG_RECORD.match(line):  # one line each: the terminal wraps it
                    continue
                if len(line.expandtabs(8)) > WIDTH and len(line.split()) > 1:  # one token cannot be cut
                    self.too_wide.append(f"{command!r}: {len(line.expandtabs(8))} columns: {line!r}")

    # -- shell ---------------------------------------------------------------------------
    def shell(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
        cwd_file = self.dir / ".cwd"
        script = (f"set -o pipefail\ncd {shlex.quote(str(self.cwd))} || exit 97\n{command}\n"
                  f"rc=$?\npwd > {shlex.quote(str(cwd_file))}\nexit $rc\n")
        done = subprocess.run(["bash", "-c", script], env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if cwd_file.exists():
            self.cwd = Path(cwd_file.read_text().strip())
        return done

    def start_service(self, command: str) -> Service:
        n = len(list(self.dir.glob(".service-*.out")))
        out, err = self.dir / f".service-{n}.out", self.dir / f".service-{n}.err"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(["bash", "-c", f"cd {shlex.quote(str(self.cwd))} && exec {command}"],
                                    env=self.env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        return Service(command, proc, out, err)

    def stop_service(self, svc: Service) -> None:
        if svc.proc.poll() is None:
            os.killpg(svc.proc.pid, signal.SIGINT)  # Ctrl-C: the whole process group, as a terminal does
            try:
                svc.proc.wait(SERVICE_STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(svc.proc.pid, signal.SIGKILL)
                svc.proc.wait()
                pytest.fail(f"{self.doc}: {svc.command!r} did not stop within {SERVICE_STOP_S} s of Ctrl-C")
        out, err = svc.output()
        assert svc.proc.returncode == 0 and "Traceback" not in out + err, \
            f"{self.doc}: {svc.command!r} stopped by Ctrl-C with exit {svc.proc.returncode}:\n{out}{err}"
        self.check_width(svc.command, out, err)


def _run_shell_block(run: DocRun, block: Block) -> None:
    services: list[Service] = []
    try:
        for step in steps(block):
            command = run.rewrite(step.command)
            error_shown = bool(step.expected) and step.expected[0].startswith("Error:")
            if SERVICE.match(command) and not error_shown:  # (a refusal to start is a plain command)
                assert step.expected is not None, \
                    f"{block.where}: {step.command!r} serves until Ctrl-C: show it in a ```console transcript"
                services.append(_service_step(run, block, step, command))
                continue
            done = run.shell(command)
            shown = (done.stdout + done.stderr).splitlines()
            context = f"{block.where}: {step.command!r} (exit {done.returncode}):\n{done.stdout}{done.stderr}"
            if error_shown:
                assert done.returncode != 0, context
            else:
                assert done.returncode == 0, context
            if step.expected is not None:
                assert matches(step.expected, shown), context + "\nthe doc shows:\n" + "\n".join(step.expected)
            run.check_width(command, done.stdout, done.stderr)
    finally:
        for svc in reversed(services):
            run.stop_service(svc)


def _service_step(run: DocRun, block: Block, step: Step, command: str) -> Service:
    svc = run.start_service(command)
    deadline = time.monotonic() + (SERVICE_START_S if step.expected else 3.0)
    expected = tuple(run.rewrite(line) for line in step.expected or ())
    while time.monotonic() < deadline:
        out, err = svc.output()
        if expected and matches((*expected, "..."), (out + err).splitlines()):  # it goes on printing
            return svc
        if svc.proc.poll() is not None:
            pytest.fail(f"{block.where}: {step.command!r} exited {svc.proc.returncode}:\n{out}{err}")
        time.sleep(0.2)
    out, err = svc.output()
    if expected:
        run.stop_service(svc)
        pytest.fail(f"{block.where}: {step.command!r} did not show within {SERVICE_START_S} s:\n"
                    + "\n".join(step.expected or ()) + f"\nit printed:\n{out}{err}")
    return svc


def _run_python_block(run: DocRun, block: Block) -> None:
    path = run.dir / f".block-{block.line}.py"
    path.write_text(run.rewrite(block.text))
    done = subprocess.run([sys.executable, str(path)], cwd=run.dir, env=run.env, capture_output=True, text=True,
                          timeout=PYTHON_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}:\n{done.stdout}{done.stderr}"


def _environment(tmp: Path, bootstrap: str) -> dict[str, str]:
    """This interpreter's hightide as ``.venv/bin/hightide`` (and ``python``) of the run's
    directory, first on PATH."""
    venv_bin = tmp / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name, target in (("hightide", f'{shlex.quote(sys.executable)} -m hightide'),
                         ("python", shlex.quote(sys.executable)), ("python3", shlex.quote(sys.executable))):
        script = venv_bin / name
        script.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        script.chmod(0o755)
    (venv_bin / "activate").write_text(f'PATH={shlex.quote(str(venv_bin))}:"$PATH"; export PATH\n')
    env = dict(os.environ)
    env.update(PATH=f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}", COLUMNS=str(WIDTH), LINES="24",
               HIGHTIDE_WIDTH=str(WIDTH),  # what a terminal of WIDTH columns makes of the tables
               HIGHTIDE_BOOTSTRAP_SERVER=bootstrap, PYTHONUNBUFFERED="1")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


@pytest.mark.timeout(900)
@pytest.mark.parametrize("doc", runnable_docs())
def test_doc_runs_as_written(doc, tmp_path):
    blocks = [b for b in all_blocks() if b.doc == doc]
    server = None
    if doc in CLUSTER_DOCS:
        base = free_ports(8)
        ports = {9092 + k: base + k for k in range(8)}
        bootstrap = f"127.0.0.1:{base}"
    else:
        server = ServerProcess(tmp_path / "broker-data", args=BROKER_ARGS.get(doc, ())).start()
        ports = {9092: server.port, **{p: free_ports(1) for p in range(9093, 9100)}}  # others a doc starts
        bootstrap = server.bootstrap
    ports[8080] = free_ports(1)  # the console's --listen
    work = tmp_path / "work"
    work.mkdir()
    env = _environment(work, bootstrap)
    if doc in CLUSTER_DOCS:
        env["HIGHTIDE_DEV_CLUSTER_BASE_PORT"] = str(base)
    paths = {old: str(work / new) for old, new in PATHS.get(doc, {}).items()}
    run = DocRun(doc, work, env, ports, paths)
    ran = 0
    try:
        for block in blocks:
            if block.kind == "shell":
                _run_shell_block(run, block)
            elif block.kind == "python":
                _run_python_block(run, block)
            else:
                if block.kind == "toml" and (name := toml_file_name(block)):
                    (run.cwd / name).write_text(run.rewrite(block.text))  # for the commands after it
                continue
            ran += 1
    finally:
        if server is not None:
            code = server.stop()
            assert code == 0, server.output()[-4000:]
            assert "Traceback" not in server.output(), server.output()[-6000:]
    assert ran
    assert not run.too_wide, f"{doc}: lines wider than {WIDTH} columns:\n" + "\n".join(run.too_wide)
