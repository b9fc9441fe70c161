"""Test certificates made with the ``openssl`` command, as docs/security.md shows: a CA,
a server certificate for 127.0.0.1/localhost and client certificates, all PEM."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path  # CA certificate (the truststore)
    server: Path  # server certificate chain + key (the keystore)
    server_cert: Path
    server_key: Path
    client_cert: Path  # CN=alice,OU=eng,O=Example
    client_key: Path
    other_cert: Path  # signed by a CA the broker does not trust
    other_key: Path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _leaf(d: Path, name: str, subject: str, ca: str, ca_key: str, ext: str | None = None) -> None:
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
         cwd=d)
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
            "-out", f"{name}.crt"]
    if ext:
        (d / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _run(*args, cwd=d)


def make_certs(d: Path) -> Certs:
    """Create the certificates in ``d`` (about a second)."""
    d.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "rogue-ca"):
        _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
             "-days", "2", "-subj", f"/CN=hightide test {ca}", cwd=d)
    _leaf(d, "server", "/CN=localhost", "ca.crt", "ca.key",
          "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _leaf(d, "client", "/O=Example/OU=eng/CN=alice", "ca.crt", "ca.key", "extendedKeyUsage=clientAuth\n")
    _leaf(d, "other", "/CN=mallory", "rogue-ca.crt", "rogue-ca.key", "extendedKeyUsage=clientAuth\n")
    (d / "server.pem").write_text((d / "server.crt").read_text() + (d / "server.key").read_text())
    return Certs(d / "ca.crt", d / "server.pem", d / "server.crt", d / "server.key", d / "client.crt",
                 d / "client.key", d / "other.crt", d / "other.key")
