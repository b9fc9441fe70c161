"""``hightide console``'s command line: errors are one line and exit 1, before serving."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from hightide.cli import main


def test_port_in_use_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = CliRunner().invoke(main, ["console", "-b", "127.0.0.1:1", "--listen", f"127.0.0.1:{port}"])
    assert r.exit_code == 1
    assert r.output.strip() == (f"Error: cannot listen on 127.0.0.1:{port}: address already in use (choose another "
                                f"with --listen HOST:PORT).")


def test_command_config_security_it_cannot_honour_is_refused(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    r = CliRunner().invoke(main, ["console", "--command-config", str(f), "--listen", "127.0.0.1:0"])
    assert r.exit_code == 1
    assert r.output.strip() == (f"Error: {f}: sasl.mechanism=GSSAPI is not supported by hightide's client (use one "
                                f"of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")


def test_bad_numbers_are_usage_errors():
    r = CliRunner().invoke(main, ["console", "--interval", "0", "--listen", "127.0.0.1:0"])
    assert r.exit_code == 2 and "--interval, --refresh, --history and --window must be > 0" in r.output


def test_ctrl_c_stops_the_console_with_exit_0_and_nothing_else_printed():
    """Ctrl-C (SIGINT to its process group, as a terminal sends it) right after the start
    line, and once it serves: exit 0 as ``hightide serve``, no "Aborted!", no traceback,
    no un-awaited coroutine (issue 32: the doc test caught the early case)."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time
    for settle in (0.0, 2.0):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.Popen([sys.executable, "-m", "hightide", "console", "-b", "127.0.0.1:1", "--interval", "60",
                              "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        try:
            first = p.stdout.readline()  # printed once the socket listens
            assert first.startswith(f"hightide console on http://127.0.0.1:{port}/"), first
            time.sleep(settle)
            os.killpg(p.pid, signal.SIGINT)
            rest, _ = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == 0, (settle, first + rest)
        noise = [line for line in rest.splitlines() if not re.match(r"console: cannot reach 127\.0\.0\.1:1", line)]
        assert noise == [], (settle, rest)
