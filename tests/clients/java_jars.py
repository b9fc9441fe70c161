"""Put the Java Kafka client's jars in a folder (``python java_jars.py DIR``), for the
client matrix (tests/integration/test_client_matrix.py): kafka-clients 3.9.1 and its
compression codecs, as shipped inside the PyPI wheel ``shigawire-apache-flink-libraries``
(pyflink/lib/). The wheel is fetched with pip (its cache makes a second run cheap) and
only the five jars are kept."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "shigawire-apache-flink-libraries==2.0.0.post1"
JARS = ("kafka-clients", "lz4-java", "snappy-java", "zstd-jni", "slf4j-api")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, WHEEL], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            for name in JARS:
                (out / f"{name}.jar").write_bytes(z.read(f"pyflink/lib/{name}.jar"))


if __name__ == "__main__":
    main()
