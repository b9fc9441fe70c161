"""``hightide topics describe``: what kafka-topics.sh --describe shows, computed the same way.

:func:`describe_topics` reads Metadata (leader, replicas, ISR, offline replicas as the
answering broker knows them), DescribeConfigs (the topic's configs and its
``min.insync.replicas``) and DescribeCluster (the live brokers) and returns one dict per
topic; :func:`kafka_topics_text` prints them in kafka-topics.sh's layout. The report
flags select partitions as Kafka's ``TopicCommand`` does:

- ``under_replicated``: fewer ISR members than replicas;
- ``unavailable``: no leader, or a leader that is not a live (unfenced) broker;
- ``under_min_isr``: no leader, or fewer ISR members than ``min.insync.replicas``;
- ``at_min_isr``: exactly ``min.insync.replicas`` ISR members.

Sizes come from DescribeLogDirs asked of every broker (what ``kafka-log-dirs.sh`` and
UIs use): a partition's ``size_bytes`` is its leader's log size (the largest replica's
when the leader's is not known), a topic's the sum over its partitions; None where the
brokers do not say (no DESCRIBE on the cluster, a broker without the API).

Unlike kafka-topics.sh, a partition being reassigned counts its adding replicas in its
replication factor (Kafka subtracts them, from ListPartitionReassignments, which this
admin client does not send yet), so it shows as under-replicated until the move ends.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

__all__ = ["describe_topics", "kafka_topics_text", "selected"]

REPORTS = ("under_replicated", "unavailable", "under_min_isr", "at_min_isr")


def _kafka_uuid(u: uuid.UUID | None) -> str | None:
    """A topic id as Kafka prints a Uuid (URL-safe base64, no padding)."""
    return None if u is None else base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


async def _live_brokers(admin: Any) -> set[int]:
    """Unfenced brokers (DescribeCluster); the brokers Metadata lists if it is missing."""
    from ..client import KafkaError
    try:
        desc = await admin.describe_cluster(include_fenced=True)
        return {b.node_id for b in desc.brokers if not b.fenced}
    except KafkaError:
        return set((await admin.metadata([])).brokers)


async def describe_topics(admin: Any, names: list[str], *, include_internal: bool = True,
                          offsets: bool = False) -> list[dict[str, Any]]:
    """One dict per topic of ``names`` (empty: every topic, internal ones too unless
    ``include_internal`` is False), sorted by name: ``topic``, ``topic_id``,
    ``partition_count``, ``replication_factor`` (of the first partition, as Kafka),
    ``configs`` (name → value, those not at their default), ``min_insync_replicas`` and
    ``size_bytes`` and ``partitions`` (``partition``, ``leader`` (None: no leader),
    ``replicas``, ``isr``, ``offline_replicas``, ``size_bytes`` and the four report
    flags; with ``offsets`` also
    ``log_start_offset`` and ``log_end_offset``). Raises the Kafka error of an unknown
    topic (UnknownTopicOrPartitionError)."""
    from ..client import TopicPartition
    from ..client.configs import ConfigResource, ConfigSource, ResourceType
    wanted = sorted(names or await admin.list_topics(include_internal=include_internal))
    described = await admin.describe_topics(wanted)
    configs = await admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in wanted],
                                           include_synonyms=False, raise_on_error=False)
    live = await _live_brokers(admin)
    sizes = await _sizes(admin, described, wanted)
    bounds: dict[Any, tuple[Any, Any]] = {}
    if offsets:
        tps = [TopicPartition(t, p) for t in wanted for p in described[t].partitions]
        start = await admin.list_offsets({tp: "earliest" for tp in tps}, raise_on_error=False)
        end = await admin.list_offsets({tp: "latest" for tp in tps}, raise_on_error=False)
        bounds = {tp: (_off(start.get(tp)), _off(end.get(tp))) for tp in tps}
    out = []
    for name in wanted:
        entries = configs.get(ConfigResource(ResourceType.TOPIC, name))
        entries = entries if isinstance(entries, list) else []
        min_isr = next((int(e.value) for e in entries if e.name == "min.insync.replicas" and e.value), 1)
        parts = [described[name].partitions[p] for p in sorted(described[name].partitions)]
        rows = []
        for pm in parts:
            row = _partition(pm, live, min_isr)
            row["size_bytes"] = sizes.get((name, pm.partition))
            if offsets:
                row["log_start_offset"], row["log_end_offset"] = bounds.get(TopicPartition(name, pm.partition),
                                                                            (None, None))
            rows.append(row)
        out.append({"topic": name, "topic_id": _kafka_uuid(described[name].topic_id),
                    "partition_count": len(parts), "replication_factor": len(parts[0].replicas) if parts else 0,
                    "configs": {e.name: e.value for e in entries if e.source != ConfigSource.DEFAULT_CONFIG},
                    "min_insync_replicas": min_isr, "size_bytes": _total(r["size_bytes"] for r in rows),
                    "partitions": rows})
    return out


async def _sizes(admin: Any, described: dict[str, Any], names: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) → log size in bytes, from every broker's DescribeLogDirs;
    empty when the brokers cannot say."""
    from ..client import KafkaError
    from ..client.log_dirs import partition_sizes
    try:
        dirs = await admin.describe_log_dirs(topics={n: sorted(described[n].partitions) for n in names})
    except KafkaError:
        return {}
    leaders = {(n, p): pm.leader for n in names for p, pm in described[n].partitions.items()}
    return partition_sizes(dirs, leaders)


def _total(sizes: Any) -> int | None:
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


def _partition(pm: Any, live: set[int], min_isr: int) -> dict[str, Any]:
    leader = pm.leader if pm.leader >= 0 else None
    return {"partition": pm.partition, "leader": leader, "replicas": list(pm.replicas), "isr": list(pm.isr),
            "offline_replicas": list(pm.offline_replicas),
            "under_replicated": len(pm.isr) < len(pm.replicas),
            "unavailable": leader is None or leader not in live,
            "under_min_isr": leader is None or len(pm.isr) < min_isr,
            "at_min_isr": len(pm.isr) == min_isr}


def _off(r: Any) -> int | None:
    from ..client import ListOffsetsResult
    return r.offset if isinstance(r, ListOffsetsResult) and r.offset >= 0 else None


def selected(partition: dict[str, Any], reports: list[str]) -> bool:
    """Whether a partition is printed: always without report flags, else when any of the
    flags ``reports`` holds for it (Kafka's ``shouldPrintTopicPartition``)."""
    return not reports or any(partition[r] for r in reports)


def kafka_topics_text(topics: list[dict[str, Any]], reports: list[str], width: int | None = None) -> str:
    """kafka-topics.sh --describe's text: a topic line (only without report flags) and
    a tab-indented line per selected partition. ELR is not kept by hightide: N/A.
    hightide adds ``Size`` (bytes of the leader's log, ``-`` when unknown) at the end of
    each partition line. With a ``width`` (a terminal's), a longer line continues on
    lines indented by one more tab (:func:`~hightide.cli._common.wrap_fields`); without
    one (a pipe) each line is whole, as Kafka's tool prints it."""
    from ._common import wrap_fields
    lines = []
    for t in topics:
        if not reports:
            head = f"Topic: {t['topic']}"
            if t["topic_id"]:
                head += f"\tTopicId: {t['topic_id']}"
            configs = ",".join(f"{k}={v}" for k, v in t["configs"].items())
            lines.append(f"{head}\tPartitionCount: {t['partition_count']}\t"
                         f"ReplicationFactor: {t['replication_factor']}\tConfigs: {configs}")
        for p in t["partitions"]:
            if selected(p, reports):
                leader = "none" if p["leader"] is None else p["leader"]
                lines.append(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                             f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}"
                             f"\tElr: N/A\tLastKnownElr: N/A\tSize: {_size(p.get('size_bytes'))}")
    return "\n".join(part for line in lines for part in wrap_fields(line, width))


def _size(size: int | None) -> str:
    return "-" if size is None else str(size)
