"""The metadata image's derived indexes (issue 33: no pass over every topic or
partition per create or per controller timer wake) say what a pass over the image says,
whatever records come, once built and in copies: the election candidates (leaderless
partitions with replicas; partitions not led by their first replica) and the topic-name
collisions."""

from __future__ import annotations

import random
import uuid

import pytest

from hightide.cluster.image import MetadataImage
from hightide.cluster.records import PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from hightide.cluster.replication_control import imbalanced, leaderless_unclean
from hightide.cluster.snapshot import copy_image

NAMES = ["a", "b.c", "b_c", "d_e", "d.e", "f", "g.h"]


def _walk(image: MetadataImage) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    leaderless = {(t.name, p) for t in image.topics.values() for p, pi in t.partitions.items()
                  if pi.replicas and pi.leader == -1}
    unpreferred = {(t.name, p) for t in image.topics.values() for p, pi in t.partitions.items()
                   if pi.replicas and pi.leader != pi.replicas[0]}
    return leaderless, unpreferred


def _collision_walk(image: MetadataImage, name: str) -> str | None:
    norm = name.replace(".", "_")
    return next((o for o in sorted(image.topics) if o != name and o.replace(".", "_") == norm), None)


def _step(rng: random.Random, image: MetadataImage, offset: int) -> None:
    live = list(image.topics.values())
    roll = rng.random()
    if roll < 0.2 or not live:
        name = rng.choice(NAMES)
        if name in image.topics:
            image.apply(RemoveTopicRecord(str(image.topics[name].topic_id)), offset)
            return
        tid = str(uuid.UUID(int=rng.getrandbits(128)))
        image.apply(TopicRecord(name, tid), offset)
        for p in range(rng.randint(0, 3)):
            replicas = tuple(rng.sample(range(4), rng.randint(0, 3)))
            leader = rng.choice([*replicas, -1]) if replicas else -1
            image.apply(PartitionRecord(tid, p, leader, replicas=replicas), offset)
    elif roll < 0.3:
        image.apply(RemoveTopicRecord(str(rng.choice(live).topic_id)), offset)
    else:
        t = rng.choice(live)
        if not t.partitions:
            return
        p = rng.choice(list(t.partitions))
        replicas = t.partitions[p].replicas
        new_replicas = tuple(rng.sample(range(4), rng.randint(1, 3))) if rng.random() < 0.2 else None
        choices = [*(new_replicas or replicas), -1]
        image.apply(PartitionChangeRecord(str(t.topic_id), p, leader=rng.choice(choices), replicas=new_replicas),
                    offset)


@pytest.mark.parametrize("seed", range(20))
def test_the_indexes_agree_with_a_pass_over_the_image(seed: int) -> None:
    rng = random.Random(seed)
    image = MetadataImage()
    copies: list[MetadataImage] = []
    for i in range(300):
        _step(rng, image, i)
        if i == 40:
            image.election_candidates()  # built here, kept by apply from now on
            image.colliding_topic("x.y")
        if i % 60 == 59:
            copies.append(copy_image(image))  # a copy builds its own at its first use
        if i >= 40:
            assert image.election_candidates() == _walk(image)
            assert imbalanced(image) == bool(_walk(image)[1])
            assert leaderless_unclean(image, lambda t: t.name.startswith("b")) == any(
                n.startswith("b") for n, _ in _walk(image)[0])
            for name in NAMES:
                assert image.colliding_topic(name) == _collision_walk(image, name)
    for c in copies:
        assert c.election_candidates() == _walk(c)
