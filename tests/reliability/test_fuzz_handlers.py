"""Hostile input, per API key: random (but decodable) requests of every routed API and
version go through the real handlers of an in-process broker, and random byte mutations
of valid requests go through the decoder. Any exception other than the protocol's own
refusals is a broker bug. Bounded here; raise FUZZ_EXAMPLES to run longer by hand."""

from __future__ import annotations

import asyncio
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hightide import Broker, BrokerConfig
from hightide.protocol.codec import decode_request, encode_request, encode_response, parse_header, request_schema
from hightide.protocol.errors import PeerProtocolError
from hightide.server.connection import RequestContext
from hightide.server.registry import ROUTES, CloseConnection, RawResponse

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
ROUTED = [(k, v) for k, r in sorted(ROUTES.items()) for v in range(r.min_version, r.max_version + 1)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
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
    b.commit_metadata(records)


def run_handler(loop, b, api_key: int, version: int, request) -> None:
    from hightide.protocol.codec import RequestHeader
    header = RequestHeader(api_key, version, 7, "fuzz")
    ctx = RequestContext(b, header, "fuzz", {})
    try:
        result = ROUTES[api_key].fn(ctx, request)
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
