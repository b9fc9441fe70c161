"""Decoding the consumer protocol's subscription metadata (ConsumerProtocolSubscription)
carried in classic JoinGroup requests and group metadata records.

These bytes come from clients, so they are decoded with the bounded reader
(:func:`~hightide.protocol.tolerant.read_tolerant`): a declared array length larger than
the bytes left is rejected before anything is allocated (kio's native entity reader
pre-allocates from it and a hostile length aborts the process).
"""

from __future__ import annotations

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as _V0

from ..protocol.tolerant import read_tolerant
from .records import GroupValue


def decode_subscription(data: bytes) -> list[str]:
    """Topic names of a ``consumer`` protocol subscription (any version: the topics come
    first after the int16 version in every version). Returns [] if undecodable, including
    a declared topic count larger than the bytes can hold; never raises."""
    if len(data) < 2:
        return []
    try:
        sub, _ = read_tolerant(_V0, data, 2)
    except Exception:
        return []
    return list(sub.topics)


def subscribed_topics(group: GroupValue) -> set[str]:
    if group.protocol_type != "consumer":
        return set()
    out: set[str] = set()
    for m in group.members:
        out.update(decode_subscription(m.subscription))
    return out
