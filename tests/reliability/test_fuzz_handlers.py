"""Hostile input, per API key: random (but decodable) requests of every routed API and
version go through the real handlers of an in-process broker, and random byte mutations
of valid requests go through the decoder. Any exception other than the protocol's own
refusals is a broker bug. Both run under an ``RLIMIT_AS`` cap; huge declared lengths are
also sent over the wire to a ``hightide serve`` process whose address space is capped.
Bounded here; raise FUZZ_EXAMPLES to run longer by hand."""

from __future__ import annotations

import asyncio
import os
import random
import resource
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide import Broker, BrokerConfig
from hightide.protocol.codec import decode_request, encode_request, encode_response, parse_header, request_schema
from hightide.protocol.errors import PeerProtocolError
from hightide.server.context import RequestContext
from hightide.server.handlers import routes
from hightide.server.registry import CloseConnection, RawResponse

from ..unit.test_codec import minimal

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "5"))
PARK_S = 0.2  # a parked answer (long poll, rebalance) counts as served once it has waited this long

# Record bytes: valid batches (the produce path must append them) or arbitrary bytes.
from kio.static.primitive import Records  # noqa: E402

from hightide.protocol.records import build_batch  # noqa: E402

st.register_type_strategy(Records, st.one_of(
    st.binary(max_size=200),
    st.builds(lambda k, v, ts, codec: build_batch([(k, v, [], ts)], compression=codec),
              st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=50),
              st.integers(0, 2**41), st.sampled_from([0, 1, 2, 3, 4]))))
# The broker's route table (what Broker builds at start), for the parametrisation.
ROUTED = [(k, v) for k, r in sorted(routes().items()) for v in range(r.min_version, r.max_version + 1)]


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


@pytest.fixture(scope="module")
def memory_limit():
    """Cap this process's address space at its current size + 2 GiB while the in-process
    fuzz runs, so an allocation sized from a hostile length fails here as it would in a
    deployment with a memory limit (the bounded decoder never makes one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space_bytes() + (2 << 30)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, memory_limit):
    loop = asyncio.new_event_loop()
    cfg = BrokerConfig.load(overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3})
    b = Broker(cfg, data_dir=str(tmp_path_factory.mktemp("fuzz")), listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    loop.run_until_complete(_seed(b))
    yield loop, b
    loop.run_until_complete(b.stop())
    loop.close()


async def _seed(b: Broker) -> None:
    from hightide.cluster.controller import NewTopic
    _, records = b.controller.create_topics(b.image, [NewTopic("fuzz", 3)])
    await b.metadata_writer.commit_metadata(records)


def run_handler(loop, b, api_key: int, version: int, request) -> None:
    from hightide.protocol.codec import RequestHeader
    header = RequestHeader(api_key, version, 7, "fuzz")
    ctx = RequestContext(b.services, header, "fuzz", {})
    try:
        result = b.routes[api_key].fn(ctx, request)
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = loop.run_until_complete(asyncio.wait_for(result, PARK_S))
    except (CloseConnection, asyncio.TimeoutError):
        return
    if result is None or isinstance(result, (RawResponse, bytes)):
        return
    encode_response(api_key, version, 7, result)  # the answer must encode


@pytest.mark.parametrize("api_key,version", ROUTED, ids=[f"{k}v{v}" for k, v in ROUTED])
def test_random_requests_never_crash_handlers(broker, api_key, version):
    loop, b = broker
    cls = request_schema(api_key, version)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def check(request):
        if api_key in (19, 37):  # keep admin fuzz cheap: cap what a random request may create
            request = _cap_admin(api_key, request)
        run_handler(loop, b, api_key, version, request)

    check()


def _cap_admin(api_key, request):
    import dataclasses
    if api_key == 19:
        topics = tuple(dataclasses.replace(t, num_partitions=min(t.num_partitions, 4)) for t in request.topics[:3])
        return dataclasses.replace(request, topics=topics)
    topics = tuple(dataclasses.replace(t, count=min(t.count, 4)) for t in request.topics[:3])
    return dataclasses.replace(request, topics=topics)


@pytest.mark.parametrize("api_key,version", ROUTED, ids=[f"{k}v{v}" for k, v in ROUTED])
def test_mutated_bytes_are_refused_or_served(broker, api_key, version):
    loop, b = broker
    valid = encode_request(api_key, version, 7, "fuzz", minimal(request_schema(api_key, version)))[4:]
    rnd = random.Random(api_key * 100 + version)
    for _ in range(EXAMPLES * 6):
        frame = bytearray(valid)
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            pos = rnd.randrange(len(frame))
            if op < 0.6:
                frame[pos] = rnd.randrange(256)
            elif op < 0.8:
                del frame[pos:pos + rnd.randint(1, 8)]
            else:
                frame[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        if len(frame) < 10:
            continue
        frame[0:4] = valid[0:4]  # keep the API key/version so the handler is reached
        try:
            header, offset = parse_header(memoryview(bytes(frame)))
            request = decode_request(header, memoryview(bytes(frame)), offset, {})
        except PeerProtocolError:
            continue
        if api_key in (19, 37):
            request = _cap_admin(api_key, request)
        run_handler(loop, b, api_key, version, request)


# -- over the wire, to a broker process under RLIMIT_AS ---------------------------------------
# A hostile length must never abort the process (issue 11, defect 3): under a memory limit
# an allocation sized from a declared length fails and kio's native code aborts, taking
# every client with it. These frames go to a real ``hightide serve`` whose address space is
# capped; after each API the broker must still answer, and it must never log a traceback.
from .test_hostile_lengths import LimitedServer  # noqa: E402

BOMB_INT32 = b"\x7f\xff\xff\xff"  # legacy array/bytes/string length 2^31 - 1
BOMB_UVARINT = b"\xff\xff\xff\xff\x07"  # uvarint 2^31 - 1: compact length N + 1, so 2^31 - 2 elements


@pytest.fixture(scope="module")
def limited_broker(tmp_path_factory):
    srv = LimitedServer(tmp_path_factory.mktemp("fuzz-wire") / "data", "--set", "offsets.topic.num.partitions=3")
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as s:  # a topic for the requests to name
            s.sendall(encode_request(19, 2, 1, "fuzz", _create_topic_request()))
            _await_answer(s, 10.0)
        yield srv
    finally:
        code = srv.close()
    assert code == 0, srv.output()[-4000:]
    assert "Traceback" not in srv.output(), srv.output()[-6000:]


def _create_topic_request():
    from hightide.protocol.build import materialize
    return materialize(request_schema(19, 2), {"topics": [{"name": "fuzz", "num_partitions": 3,
                       "replication_factor": 1, "assignments": [], "configs": []}],
                       "timeout": 10_000, "validate_only": False})


def _await_answer(sock: socket.socket, timeout: float) -> None:
    """Wait until the broker answers, closes, or ``timeout`` passes (a parked request)."""
    sock.settimeout(timeout)
    try:
        sock.recv(1 << 16)
    except (TimeoutError, ConnectionError):
        pass


def _bombs(valid: bytes, body_offset: int, rnd: random.Random) -> list[bytes]:
    """Frames (no size prefix) with a huge length written at random body positions."""
    out = []
    positions = list(range(body_offset, len(valid)))
    for pos in rnd.sample(positions, min(6, len(positions))):
        out.append(valid[:pos] + BOMB_INT32 + valid[pos + 4:])  # overwrite: legacy int32 lengths
        out.append(valid[:pos] + BOMB_UVARINT + valid[pos + 1:])  # replace one byte: compact lengths
    return out


@pytest.mark.parametrize("api_key,version", ROUTED, ids=[f"{k}v{v}" for k, v in ROUTED])
def test_hostile_lengths_over_the_wire_never_abort(limited_broker, api_key, version):
    srv = limited_broker
    valid = encode_request(api_key, version, 7, "fuzz", minimal(request_schema(api_key, version)))[4:]
    _, body_offset = parse_header(memoryview(valid))
    for frame in _bombs(valid, body_offset, random.Random(api_key * 1000 + version)):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(len(frame).to_bytes(4, "big") + frame)
            _await_answer(s, PARK_S)
    assert srv.alive(), f"the broker died on a hostile length in api {api_key} v{version}:\n{srv.output()[-4000:]}"
