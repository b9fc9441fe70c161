"""Defect 3 of issue 11: a hostile length inside peer bytes must never abort the process.

kio's native entity reader pre-allocates arrays from the declared length. Before the fix
the broker decoded JoinGroup protocol metadata (the consumer subscription) with it, so a
JoinGroup whose metadata declared 2^31-1 topics followed by an OffsetDelete aborted the
broker under a memory limit ("memory allocation of 17179869176 bytes failed"); our admin
client did the same with a broker's responses. These tests run the broker, and the
client, in processes limited by ``RLIMIT_AS``, as a deployment with a memory limit would.
"""

from __future__ import annotations

import resource
import signal
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import free_port
from ..rawkafka import RawClient
from ..waiting import wait_until

MEMORY_LIMIT = 2 << 30  # the broker idles at ~150 MB of address space; 2 GiB leaves room for threads
HOSTILE_COUNT = 0x7FFF_FFFF  # the largest int32 array length (2^31 - 1)


def limit_address_space() -> None:
    """preexec_fn: cap this child's virtual address space at MEMORY_LIMIT."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


class LimitedServer:
    """A ``hightide serve`` child process under ``RLIMIT_AS``; use as a context manager."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hightide", "serve", "--data-dir", str(data_dir),
             "--listen", self.bootstrap, "--set", "group.initial.rebalance.delay.ms=0", *args],
            stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limit_address_space)
        try:
            wait_until(lambda: self.proc.poll() is not None or self._listening(), 30,
                       what="the memory-limited broker to listen")
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
        except BaseException:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def alive(self) -> bool:
        """The process runs and answers ApiVersions on a new connection."""
        if self.proc.poll() is not None:
            return False
        with RawClient(self.bootstrap) as c:
            return c.request(18, 0, {}).error_code == 0

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> "LimitedServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hostile_subscription(topics: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0 whose topic array declares HOSTILE_COUNT elements."""
    return struct.pack(">hi", 0, HOSTILE_COUNT) + topics


def test_join_group_metadata_declaring_2_31_topics_does_not_abort_the_broker(tmp_path):
    with LimitedServer(tmp_path / "data") as srv, RawClient(srv.bootstrap) as c:
        c.request(19, 2, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout": 10_000, "validate_only": False})
        joined = c.request(11, 3, {"group_id": "g-hostile", "session_timeout": 30_000,
                                   "rebalance_timeout": 30_000, "member_id": "", "protocol_type": "consumer",
                                   "protocols": [{"name": "range", "metadata": hostile_subscription(b"\x00\x01t")}]})
        assert joined.error_code == 0 and joined.member_id
        # OffsetDelete asks which topics the group subscribes to: that decodes the metadata.
        deleted = c.request(47, 0, {"group_id": "g-hostile", "topics": [{"name": "t", "partitions": [
            {"partition_index": 0}]}]})
        assert deleted.error_code == 0
        # The undecodable subscription counts as no subscription (Kafka: the topic is not
        # subscribed), so the offset (there is none) may be deleted.
        assert [(t.name, [p.error_code for p in t.partitions]) for t in deleted.topics] == [("t", [0])]
        described = c.request(15, 0, {"groups": ["g-hostile"]})
        assert [(g.group_id, g.error_code, g.protocol_type, len(g.members)) for g in described.groups] == [
            ("g-hostile", 0, "consumer", 1)]
        assert srv.alive()
        assert "Traceback" not in srv.output()


CLIENT_SCRIPT = textwrap.dedent("""
    import asyncio, struct, sys
    from hightide.client import AdminClient, KafkaError
    from hightide.client.testing import FakeBroker

    def hostile_metadata(header, request):
        # Metadata v1 body: the brokers array declares 2^31 - 1 entries, then 16 bytes.
        body = struct.pack(">ii", header.correlation_id, 0x7FFFFFFF) + bytes(16)
        return struct.pack(">i", len(body)) + body

    async def main():
        async with FakeBroker({3: (1, 1)}) as broker:
            broker.on(3, hostile_metadata)
            admin = AdminClient(broker.bootstrap, request_timeout_s=1.5, retry_backoff_s=0.05)
            try:
                await admin.start()
            except KafkaError as exc:
                print("refused", exc.code.name, str(exc).splitlines()[0][:200])
            else:
                print("accepted")
            finally:
                await admin.close()

    asyncio.run(main())
""")


def test_admin_client_refuses_a_hostile_broker_response_cleanly(tmp_path):
    out = subprocess.run([sys.executable, "-c", CLIENT_SCRIPT], capture_output=True, text=True, timeout=60,
                         preexec_fn=limit_address_space, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    line = out.stdout.strip()
    assert line.startswith("refused corrupt_message ") and "MetadataResponse" in line, (line, out.stderr[-3000:])


DECODE_SCRIPT = textwrap.dedent("""
    import struct
    from hightide.group.subscriptions import decode_subscription
    from hightide.lag.assignment import decode_assignment
    hostile = struct.pack(">hi", 0, 0x7FFFFFFF) + b"\\x00\\x01t" * 4
    print(decode_subscription(hostile), decode_assignment(hostile))
""")


@pytest.mark.parametrize("version", [0, 1, 3])
def test_decoding_a_hostile_subscription_or_assignment_returns_nothing(tmp_path, version):
    script = DECODE_SCRIPT.replace('">hi", 0,', f'">hi", {version},')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         preexec_fn=limit_address_space, cwd=tmp_path)
    assert (out.returncode, out.stdout.strip()) == (0, "[] []"), out.stderr[-3000:]
