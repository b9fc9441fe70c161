"""The controller side of replication (issue 15) with real processes and real clients:
an RF=3 topic on 3 brokers shows its replicas and ISR in Metadata (confluent-kafka and
kafka-python); a killed leader is fenced after the session timeout and a new leader is
elected from the ISR (leader epoch bumped, the dead broker out of the ISR); once it is
back and in sync again, ElectLeaders PREFERRED gives it its partitions back, or the
controller does by itself after leader.imbalance.check.interval.seconds; a move
(AlterPartitionReassignments) of a partition to other brokers completes once they are
in sync; a partition whose last ISR member died stays leaderless until an ElectLeaders
UNCLEAN elects the replica that came back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from confluent_kafka import TopicPartition
from confluent_kafka._model import ElectionType
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient

from hightide.client import BrokerConnection

TOPIC = "replicated"
PARTITIONS = 3


@dataclass(frozen=True)
class PartitionState:
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def metadata(address: str, topic: str = TOPIC) -> dict[int, PartitionState]:
    """Each partition of ``topic`` as the broker at ``address`` describes it (Metadata v12)."""
    async def ask() -> dict[int, PartitionState]:
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test")
        await conn.connect()
        try:
            resp = await conn.request(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
        finally:
            await conn.close()
        return {p.partition_index: PartitionState(int(p.error_code), int(p.leader_id), int(p.leader_epoch),
                                                  tuple(p.replica_nodes), tuple(p.isr_nodes))
                for p in resp.topics[0].partitions}
    return asyncio.run(ask())


def test_rf3_replicas_isr_failover_and_preferred_election(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    first = c.wait_until(lambda: (m := metadata(c.address(0))) and len(m) == PARTITIONS and m, 30,
                         what="the topic in Metadata")
    for p in first.values():
        assert p.error_code == 0 and sorted(p.replicas) == [0, 1, 2] and p.leader == p.replicas[0]
        assert sorted(p.isr) == [0, 1, 2]
    assert sorted(p.leader for p in first.values()) == [0, 1, 2]  # leaders striped
    described = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    assert {i: (sorted(d.replicas), sorted(d.isrs)) for i, d in described.items()} == \
        {i: ([0, 1, 2], [0, 1, 2]) for i in range(PARTITIONS)}

    victim = first[0].leader
    survivor = next(b for b in c.broker_ids if b != victim)
    c.kill(victim)

    def failed_over() -> dict[int, PartitionState] | None:
        m = metadata(c.address(survivor))
        ok = m[0].leader not in (victim, -1) and victim not in m[0].isr
        return m if ok else None
    after = c.wait_until(failed_over, 30, what=f"partition 0 led by another ISR member than {victim}")
    p0 = after[0]
    assert p0.leader in first[0].isr and p0.leader_epoch > first[0].leader_epoch
    assert p0.replicas == first[0].replicas  # the replicas stay; only the ISR shrinks
    assert p0.leader == next(r for r in first[0].replicas if r != victim)  # next in replica order
    for i, p in after.items():  # every partition: the victim is out of the ISR and leads nothing
        assert victim not in p.isr and p.leader != victim and p.error_code == 0, (i, p)

    # Back, and in sync again (the follower fetches and the leader's AlterPartition add it)
    c.node(victim).start().wait_listening(30)
    c.wait_unfenced([victim], 60)
    c.wait_until(lambda: victim in metadata(c.address(survivor))[0].isr, 60,
                 what=f"broker {victim} back in the ISR of partition 0")
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(30)
    assert list(result.values()) == [None]
    back = c.wait_until(lambda: (m := metadata(c.address(survivor))) and m[0].leader == victim and m, 30,
                        what=f"broker {victim} leading partition 0 again")
    assert back[0].leader_epoch > p0.leader_epoch
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(30)
    assert [e.code() for e in result.values()] == [84]  # ELECTION_NOT_NEEDED


def test_reassignment_moves_a_partition_and_completes_once_in_sync(cluster):
    c = cluster(3)
    creator = AdminClient({"bootstrap.servers": c.bootstrap})
    creator.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    start = c.wait_until(lambda: metadata(c.address(1)).get(0), 30, what="the topic in Metadata")
    target = [b for b in c.broker_ids if b != start.leader]
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        tp = KTopicPartition(TOPIC, 0)
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        done = c.wait_until(lambda: (m := metadata(c.address(target[1]))[0]).replicas == tuple(target) and m, 60,
                            what=f"the move of partition 0 to brokers {target} completed")
        assert sorted(done.isr) == target and done.leader == target[0]
        assert done.leader_epoch > start.leader_epoch
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()


def test_the_preferred_leader_comes_back_by_itself_after_the_imbalance_interval(cluster):
    c = cluster(3, leader_imbalance_check_interval_seconds=1)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
    start = c.wait_until(lambda: metadata(c.address(0)).get(0), 30, what="the topic in Metadata")
    victim = start.leader
    other = next(b for b in c.broker_ids if b != victim)
    c.kill(victim)
    c.wait_until(lambda: metadata(c.address(other))[0].leader not in (victim, -1), 30, what="a new leader")
    c.node(victim).start().wait_listening(30)
    back = c.wait_until(lambda: (m := metadata(c.address(other))[0]).leader == victim and m, 60,
                        what=f"broker {victim} leading again without an ElectLeaders")
    assert victim in back.isr and back.leader_epoch == start.leader_epoch + 2


def test_unclean_election_only_when_asked(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(30)
    start = c.wait_until(lambda: metadata(c.address(0)).get(0), 30, what="the topic in Metadata")
    leader, follower = start.replicas
    watcher = next(b for b in c.broker_ids if b not in start.replicas)
    c.kill(follower)
    c.wait_until(lambda: metadata(c.address(watcher))[0].isr == (leader,), 30, what=f"{follower} out of the ISR")
    c.kill(leader)
    gone = c.wait_until(lambda: (m := metadata(c.address(watcher))[0]).leader == -1 and m, 30,
                        what="partition 0 without a leader")
    assert gone.isr == (leader,) and gone.error_code == 5  # LEADER_NOT_AVAILABLE; the last ISR member stays
    c.node(follower).start().wait_listening(30)
    c.wait_unfenced([follower], 60)
    assert metadata(c.address(watcher))[0].leader == -1  # not in the ISR: no clean election brings it in
    tp = [TopicPartition(TOPIC, 0)]
    admin = AdminClient({"bootstrap.servers": c.address(watcher)})  # the first one knows dead brokers
    assert [e.code() for e in admin.elect_leaders(ElectionType.PREFERRED, tp).result(30).values()] == [80]
    assert list(admin.elect_leaders(ElectionType.UNCLEAN, tp).result(30).values()) == [None]
    now = c.wait_until(lambda: (m := metadata(c.address(watcher))[0]).leader == follower and m, 30,
                       what=f"{follower} elected uncleanly")
    assert now.isr == (follower,) and now.leader_epoch > gone.leader_epoch
