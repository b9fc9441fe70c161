"""The replica manager shell (replica/manager.py) over real partition logs, a
hand-made metadata image, a fake follower fetcher and a fake controller channel: roles from
the image, the HW on the log, acks=all waits, AlterPartition round trips."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from hightide.cluster.broker_image import BrokerRegistration
from hightide.cluster.image import MetadataImage, PartitionImage, TopicImage
from hightide.config import BrokerConfig
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch, validate_batches
from hightide.replica.manager import ReplicaManager
from hightide.aio.clock import ManualClock
from hightide.aio.waiters import AppendWaiters
from tests.counting import CountingDict

TOPIC_ID = uuid.UUID(int=7)
ME = 0


class FakeFetchers:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def follow(self, tp: tuple[str, int], leader_id: int, leader_epoch: int) -> None:
        self.calls.append(("follow", tp, leader_id, leader_epoch))

    def stop_following(self, tp: tuple[str, int]) -> None:
        self.calls.append(("stop", tp))


class FakeChannel:
    """Answers AlterPartition as a controller accepting the proposal would."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.error = ErrorCode.none

    async def request(self, api_key: int, version: Any, body: dict) -> Any:
        assert api_key == 56
        self.sent.append(body)
        p = body["topics"][0]["partitions"][0]
        part = SimpleNamespace(partition_index=p["partition_index"], error_code=int(self.error), leader_id=ME,
                               leader_epoch=p["leader_epoch"], isr=tuple(p["new_isr"]),
                               partition_epoch=p["partition_epoch"] + 1)
        return SimpleNamespace(error_code=0, topics=[SimpleNamespace(topic_id=TOPIC_ID, partitions=[part])])


class Fakes:
    """What the replica manager is built from: a broker-only node (broker epoch 40, a
    controller channel) with one open log."""

    def __init__(self, tmp_path: Any, lag_ms: int = 1000) -> None:
        self.config = BrokerConfig()
        self.config.set("replica.lag.time.max.ms", lag_ms)
        self.waiters = AppendWaiters()
        self.channel = FakeChannel()
        self.log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=True)
        self.logs = {("t", 0): self.log}
        self.image = MetadataImage()
        self.metadata_ready = True  # caught up with the controller's log
        self.clock = ManualClock()  # moves only when a test advances it

    def replica_manager(self) -> ReplicaManager:
        return ReplicaManager(node_id=ME, config=self.config,
                              logs=lambda: self.logs,  # a dict stands in: only get() is used
                              waiters=self.waiters, image=lambda: self.image,
                              metadata_ready=lambda: self.metadata_ready, broker_epoch=lambda: 40,
                              controller=lambda: self.channel, clock=self.clock)


def image(leader: int, replicas: tuple[int, ...], isr: tuple[int, ...], leader_epoch: int = 3,
          partition_epoch: int = 5) -> MetadataImage:
    img = MetadataImage()
    t = TopicImage("t", TOPIC_ID, {0: PartitionImage(0, leader, leader_epoch, replicas, isr, partition_epoch)})
    img.topics["t"] = t
    img.topics_by_id[TOPIC_ID] = t
    for b in (0, 1, 2):
        img.brokers[b] = BrokerRegistration(b, uuid.uuid4(), 40 + b, (), (), None, False, False, 0)
    return img


def apply(broker: Fakes, rm: ReplicaManager, img: MetadataImage) -> None:
    """The broker applied ``img``: the replica manager puts it in force."""
    broker.image = img
    rm.apply_image(img)


def append(log: PartitionLog, n: int = 1) -> int:
    batch = build_batch([(None, b"v", [], 0)] * n)
    return log.append(batch, validate_batches(batch), 0).last_offset + 1


@pytest.fixture
def setup(tmp_path):
    broker = Fakes(tmp_path)
    rm = broker.replica_manager()
    rm.fetchers = FakeFetchers()
    yield broker, rm
    broker.log.close()


def test_a_leader_with_followers_holds_the_hw_until_the_isr_has_the_records(setup):
    broker, rm = setup

    async def run() -> None:
        apply(broker, rm, image(ME, (0, 1, 2), (0, 1, 2)))
        assert ("t", 0) in rm.leaders and broker.log.leader_epoch == 3
        end = append(broker.log, 3)
        assert broker.log.high_watermark == 0  # not replicated yet
        done = rm.wait_replicated("t", 0, end)
        assert rm.follower_fetched("t", 0, 1, 41, end, 0, 3) == ErrorCode.none
        assert not done.done() and broker.log.high_watermark == 0  # 2 has not fetched
        assert rm.follower_fetched("t", 0, 2, 42, 2, 0, 3) == ErrorCode.none
        assert broker.log.high_watermark == 2 and not done.done()
        assert rm.follower_fetched("t", 0, 2, 42, end, 0, 3) == ErrorCode.none
        assert broker.log.high_watermark == end and done.done() and done.result() == ErrorCode.none
    asyncio.run(run())


def test_refusals_of_follower_fetches(setup):
    broker, rm = setup
    apply(broker, rm, image(ME, (0, 1, 2), (0, 1, 2)))
    assert rm.follower_fetched("t", 0, 9, -1, 0, 0, 3) == ErrorCode.unknown_leader_epoch
    assert rm.follower_fetched("t", 0, 9, -1, 0, 0, -1) == ErrorCode.not_leader_or_follower
    assert rm.follower_fetched("t", 0, 1, 7, 0, 0, 3) == ErrorCode.not_leader_or_follower  # stale broker epoch
    apply(broker, rm, image(ME, (0,), (0,)))  # one replica: nobody may fetch as a follower
    assert rm.follower_fetched("t", 0, 1, 41, 0, 0, 3) == ErrorCode.unknown_leader_epoch


def test_one_replica_keeps_hw_at_the_leo_and_waits_nothing(setup):
    broker, rm = setup

    async def run() -> None:
        apply(broker, rm, image(ME, (0,), (0,)))
        assert rm.leaders == {} and broker.log.after_append is None
        end = append(broker.log)
        assert broker.log.high_watermark == end
        done = rm.wait_replicated("t", 0, end)
        assert done.done() and done.result() == ErrorCode.none
    asyncio.run(run())


def test_no_acknowledgement_without_the_controllers_leader_epoch(setup):
    """Issue 26: a broker-only node answers an acks=all / coordinator write NONE without
    leader state only for a one-replica partition it leads in the epoch the controller
    gave it: never before it caught up with the controller (a restart's stale image),
    never for a replicated partition it has no leader state of."""
    broker, rm = setup

    async def run() -> None:
        broker.metadata_ready = False
        apply(broker, rm, image(ME, (0,), (0,), leader_epoch=3))  # as the stale local copy says
        end = append(broker.log)
        assert rm.wait_replicated("t", 0, end).result() == ErrorCode.not_leader_or_follower
        broker.image = image(ME, (0, 1), (0, 1))  # replicated, led here, no leader state
        broker.metadata_ready = True
        assert rm.wait_replicated("t", 0, end).result() == ErrorCode.not_leader_or_follower
        apply(broker, rm, image(ME, (0,), (0,), leader_epoch=4))  # caught up: epoch 4 stamped
        assert rm.wait_replicated("t", 0, end).result() == ErrorCode.none
    asyncio.run(run())


def test_losing_leadership_answers_the_waits_and_follows_the_new_leader(setup):
    broker, rm = setup

    async def run() -> None:
        apply(broker, rm, image(ME, (0, 1, 2), (0, 1, 2)))
        end = append(broker.log)
        waiting = rm.wait_replicated("t", 0, end)
        apply(broker, rm, image(1, (0, 1, 2), (1, 2), leader_epoch=4, partition_epoch=6))
        assert waiting.result() == ErrorCode.not_leader_or_follower
        assert rm.leaders == {} and rm.fetchers.calls == [("follow", ("t", 0), 1, 4)]
        before = broker.log.high_watermark
        append(broker.log)  # as a follower an append never moves the HW (the fetcher sets it)
        assert broker.log.high_watermark == before
        assert rm.wait_replicated("t", 0, end).result() == ErrorCode.not_leader_or_follower
        apply(broker, rm, image(-1, (0, 1, 2), (1, 2), leader_epoch=5, partition_epoch=7))
        assert rm.fetchers.calls[-1] == ("stop", ("t", 0))
    asyncio.run(run())


def test_a_lagging_follower_is_shrunk_through_alter_partition(setup):
    broker, rm = setup

    async def run() -> None:
        apply(broker, rm, image(ME, (0, 1, 2), (0, 1, 2), partition_epoch=5))
        end = append(broker.log)
        waiting = rm.wait_replicated("t", 0, end)
        rm.follower_fetched("t", 0, 1, 41, end, 0, 3)  # 2 never fetches
        broker.clock.advance(1.001)
        rm.check_isrs()
        for _ in range(5):
            await asyncio.sleep(0)
        sent = broker.channel.sent[-1]
        assert sent["broker_id"] == ME and sent["broker_epoch"] == 40
        p = sent["topics"][0]["partitions"][0]
        assert (p["new_isr"], p["partition_epoch"], p["leader_epoch"]) == ([0, 1], 5, 3)
        assert p["new_isr_with_epochs"] == [{"broker_id": 0, "broker_epoch": 40}, {"broker_id": 1, "broker_epoch": 41}]
        state = rm.leaders[("t", 0)].state
        assert state.isr == (0, 1) and state.partition_epoch == 6 and state.pending is None
        assert broker.log.high_watermark == end and waiting.result() == ErrorCode.none
    asyncio.run(run())


def test_the_isr_expiry_timer_runs_on_the_injected_clock(setup):
    """The isr-expiration task (``run``) sleeps on the replica manager's clock: with a
    manual clock nothing is shrunk until time is advanced past replica.lag.time.max.ms,
    and the timer waits on no real time."""
    broker, rm = setup

    async def run() -> None:
        apply(broker, rm, image(ME, (0, 1, 2), (0, 1, 2), partition_epoch=5))
        end = append(broker.log)
        rm.follower_fetched("t", 0, 1, 41, end, 0, 3)  # 2 never fetches
        task = asyncio.create_task(rm.run())
        try:
            await broker.clock.advance_and_settle(0.9)  # 2 lags 0.9 s: within the lag time
            assert broker.channel.sent == [] and broker.clock.sleepers == 1  # the timer waits on the clock
            await broker.clock.advance_and_settle(0.6)  # 1.5 s: the check at 1.5 s shrinks
            sent = broker.channel.sent[-1]
            assert sent["topics"][0]["partitions"][0]["new_isr"] == [0, 1]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(run())  # a real sleep in the timer would never see the shrink: the clock moves only here


def test_min_isr_holds_the_hw_and_a_late_wait_answers_after_append(setup):
    broker, rm = setup
    broker.log.config = LogConfig(min_insync_replicas=2)

    async def run() -> None:
        apply(broker, rm, image(ME, (0, 1, 2), (0,), partition_epoch=6))  # ISR 1 < 2
        end = append(broker.log)
        waiting = rm.wait_replicated("t", 0, end)
        assert broker.log.high_watermark == 0 and not waiting.done()  # held under min ISR (KIP-966)
        rm.follower_fetched("t", 0, 1, 41, end, 0, 3)  # 1 is caught up: proposed back into the ISR
        apply(broker, rm, image(ME, (0, 1, 2), (0, 1), partition_epoch=7))
        assert broker.log.high_watermark == end and waiting.result() == ErrorCode.none
        apply(broker, rm, image(ME, (0, 1, 2), (0,), partition_epoch=8))  # shrank again after the HW passed
        late = rm.wait_replicated("t", 0, end)  # e.g. a coordinator asking after the fact
        assert late.result() == ErrorCode.not_enough_replicas_after_append
    asyncio.run(run())


def test_a_change_of_one_topic_looks_at_that_topics_roles_only(tmp_path):
    """apply_image(topics=...) after a batch that touched one topic: the work is that of
    the topic, not of every partition led or followed here (issue 33: at thousands of
    partitions each metadata batch walked them all); a topic removed from the image is
    still resigned and no longer followed."""
    broker = Fakes(tmp_path)
    rm = broker.replica_manager()
    rm.fetchers = FakeFetchers()
    img = image(ME, (0, 1, 2), (0, 1, 2))
    logs: list[PartitionLog] = []
    for i in range(60):
        tid = uuid.UUID(int=1000 + i)
        leader = ME if i % 2 == 0 else 1
        t = TopicImage(f"a{i}", tid, {0: PartitionImage(0, leader, 3, (0, 1, 2), (0, 1, 2), 5)})
        img.topics[t.name], img.topics_by_id[tid] = t, t
        lg = PartitionLog.open(str(tmp_path / f"a{i}-0"), LogConfig(), 0, clean_shutdown=True)
        broker.logs[(t.name, 0)] = lg
        logs.append(lg)

    async def run() -> None:
        apply(broker, rm, img)
        assert len(rm.leaders) == 31 and len(rm.following) == 30  # "t" and a0, a2, ...
        rm.leaders = leaders = CountingDict(rm.leaders)
        rm.following = following = CountingDict(rm.following)
        rm.apply_image(img, topics={"a4", "a5"})
        assert leaders.walked + following.walked == 0
        del img.topics["a4"], img.topics["a5"]  # deleted topics
        rm.apply_image(img, topics={"a4", "a5"})
        assert ("a4", 0) not in rm.leaders and ("a5", 0) not in rm.following
        assert ("stop", ("a5", 0)) in rm.fetchers.calls  # type: ignore[union-attr]
        assert len(rm.leaders) == 30 and len(rm.following) == 29
        assert leaders.walked + following.walked <= 2
    try:
        asyncio.run(run())
    finally:
        broker.log.close()
        for lg in logs:
            lg.close()
