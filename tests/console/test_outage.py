"""Issue 30 item 4: the console under an outage. A broker that stops answering in the
middle of a sample (here: the sampler's client failing at one step with the error a
refused or lost connection raises) makes that sample an outage: nothing of it is stored
(the groups, the share groups and the "as of" time stay those of the last whole sample),
share groups are never "not supported" because of a network error, and the banner shows
within two sampling intervals even when a sample hangs."""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from typing import Any

import pytest

from hightide.client import AdminClient, KafkaConnectionError, KafkaTimeoutError, NewTopic, TopicPartition
from hightide.console.sampler import Sampler

from ..integration.clients import Rec, confluent_produce
from ..integration.test_share_group_offsets import join_and_leave
from ..rawkafka import RawClient
from .conftest import commit

pytestmark = pytest.mark.integration

STEPS = ["list_groups", "list_share_groups", "describe_groups", "describe_share_group",
         "list_share_group_offsets", "find_coordinators"]


@pytest.fixture(scope="module")
def cluster(server):
    tag = uuid.uuid4().hex[:6]
    topic, share_topic, group, share = f"out-{tag}", f"outs-{tag}", f"g-out-{tag}", f"s-out-{tag}"

    async def topics() -> None:
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(topic, 1, 1), NewTopic(share_topic, 1, 1)])
    asyncio.run(topics())
    confluent_produce(server.bootstrap, topic, [Rec(0, None, b"x", (), 0) for _ in range(5)])
    confluent_produce(server.bootstrap, share_topic, [Rec(0, None, b"s", (), 0) for _ in range(3)])
    commit(server.bootstrap, group, {TopicPartition(topic, 0): 2})
    with RawClient(server.bootstrap) as c:
        join_and_leave(c, share, share_topic)
    return server.bootstrap, group, share


@pytest.mark.parametrize("error", [KafkaConnectionError, KafkaTimeoutError])
@pytest.mark.parametrize("step", STEPS)
def test_a_network_error_mid_sample_is_an_outage_not_data(cluster, step, error):
    bootstrap, group, share = cluster

    async def go() -> None:
        s = Sampler(bootstrap, interval_s=0.3, client_options={"request_timeout_s": 2.0})
        try:
            assert await s.sample(), s.error
            snap, shares, as_of = s.snapshot, s.share, s.last_ok_ms
            assert snap is not None and group in snap.groups and shares is not None and share in shares.groups
            admin = s._admin
            assert admin is not None

            async def broken(*args: Any, **kwargs: Any) -> Any:
                raise error("connection to 127.0.0.1 lost")
            setattr(admin, step, broken)
            await asyncio.sleep(0.01)
            assert not await s.sample(), f"a sample failing at {step} was stored"
            assert s.snapshot is snap and s.share is shares and s.last_ok_ms == as_of
            assert s.error is not None and s.error.startswith(error.__name__), s.error
            assert s.share is not None  # never "this cluster does not serve share groups"
        finally:
            await s.stop()
    asyncio.run(go())


def test_banner_within_two_intervals_when_a_sample_hangs(cluster):
    """A broker that stops answering without closing connections (a paused process):
    the sample hangs in a request. The pages' banner shows once no whole sample came for
    two intervals, and the hanging sample is abandoned at its deadline."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from hightide.console.app import ConsoleConfig, create_app
    bootstrap, group, _ = cluster
    interval = 0.5
    sampler = Sampler(bootstrap, interval_s=interval, client_options={"request_timeout_s": 30.0})
    with TestClient(create_app(sampler, ConsoleConfig(bootstrap, refresh_s=1)), raise_server_exceptions=False) as web:
        deadline = time.monotonic() + 20
        while sampler.samples < 2:
            assert time.monotonic() < deadline, sampler.error
            time.sleep(0.05)
        assert 'class="banner"' not in web.get("/groups").text

        async def hang(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(3600)
        admin = sampler._admin
        assert admin is not None
        admin.list_groups = hang  # type: ignore[method-assign]
        hung_at = time.monotonic()
        while 'class="banner"' not in (page := web.get(f"/groups/{group}")).text:
            assert time.monotonic() - hung_at < 2 * interval + (sampler.last_duration_s or 0) + 0.5, \
                "no banner within two sampling intervals"
            time.sleep(0.05)
        assert page.status_code == 200 and "Showing the last data, from" in page.text
