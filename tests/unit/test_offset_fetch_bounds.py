"""Which high watermark the OffsetFetch extension (seed 000) carries (issue 15, item 3):
the log's for a partition led here, nothing for a new leader whose HW is not known yet
(it may be below the old leader's), and the leader's (asked later) for a partition
another broker leads — never a follower's own HW."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hightide.server.handlers.group_offsets import _Bounds

NODE = 1


def ctx(leaders: dict[int, int], unavailable: frozenset[int] = frozenset(), replicas: bool = True) -> Any:
    """A request context whose image has topic ``t`` with partitions led by ``leaders``
    (partition -> leader id, epoch 7) and a log for each (HW 100, log start 3, LSO 90)."""
    parts = {p: SimpleNamespace(partition=p, leader=leader, leader_epoch=7) for p, leader in leaders.items()}
    image = SimpleNamespace(topics={"t": SimpleNamespace(partitions=parts)})
    plog = SimpleNamespace(high_watermark=100, log_start_offset=3, last_stable_offset=90)
    manager = SimpleNamespace(offsets_available=lambda topic, p: p not in unavailable)
    services = SimpleNamespace(identity=SimpleNamespace(node_id=NODE), replicas=manager if replicas else None)
    logs = SimpleNamespace(partition_log=lambda topic, p: plog if topic == "t" and p in leaders else None)
    return SimpleNamespace(image=image, services=services, logs=logs)


def test_a_partition_led_here_carries_its_log_bounds() -> None:
    b = _Bounds()
    assert b.read(ctx({0: NODE}), "t", 0) == (100, 3, 90)
    assert b.read(ctx({0: NODE}, replicas=False), "t", 0) == (100, 3, 90)  # a broker without replication
    assert b.elsewhere == {}


def test_a_new_leader_whose_high_watermark_is_not_known_yet_sends_no_bounds() -> None:
    b = _Bounds()
    assert b.read(ctx({0: NODE}, unavailable={0}), "t", 0) is None
    assert b.elsewhere == {}  # nobody else to ask: the tags are not sent (clients then see OFFSET_NOT_AVAILABLE)


def test_a_partition_led_elsewhere_is_asked_of_its_leader_even_if_a_replica_is_here() -> None:
    b = _Bounds()
    c = ctx({0: 2, 1: -1})  # a log exists here for both (a follower's): its HW is not used
    assert b.read(c, "t", 0) is None and b.read(c, "t", 1) is None
    assert b.elsewhere == {("t", 0): (2, 7)}  # leaderless partition 1: no tags
    assert b.read(c, "nope", 0) is None and b.read(c, "t", 9) is None
    assert b.elsewhere == {("t", 0): (2, 7)}
