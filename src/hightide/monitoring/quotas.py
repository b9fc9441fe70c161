"""Client quota series for the exporter: the quotas DescribeClientQuotas (48) shows.

One gauge family per quota key, named after Kafka's quota config (``producer_byte_rate``
→ ``kafka_client_quota_producer_byte_rate``, also ``consumer_byte_rate``,
``request_percentage``, ``controller_mutation_rate``), labelled ``user`` and
``client_id``: the entity's name, ``<default>`` for the default entity (Kafka's name for
it in kafka-configs.sh and ZooKeeper paths), empty when the entity has no such part.
Against a cluster that refuses DescribeClientQuotas (no DESCRIBE_CONFIGS on the cluster,
an old broker) the snapshot is None and no series are written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from ..client.errors import KafkaError

log = logging.getLogger("hightide.exporter")

__all__ = ["QuotaSnapshot", "quota_families", "quota_snapshot"]

QuotaSnapshot = dict[tuple[tuple[str, str | None], ...], dict[str, float]]
_DOCS = {"producer_byte_rate": "Producer byte-rate quota (bytes/s) of a user / client-id entity",
         "consumer_byte_rate": "Consumer byte-rate quota (bytes/s) of a user / client-id entity",
         "request_percentage": "Request-time quota (percent of one request thread) of a user / client-id entity",
         "controller_mutation_rate": "Controller mutation-rate quota (partitions/s) of a user / client-id entity"}


async def quota_snapshot(admin: Any) -> QuotaSnapshot | None:
    """Every client quota through ``admin``; None when the cluster refuses (logged)."""
    try:
        quotas: QuotaSnapshot = await admin.describe_client_quotas()
        return quotas
    except KafkaError as exc:
        log.info("DescribeClientQuotas failed, no quota series: %s", exc)
        return None


def _label(names: dict[str, str | None], entity_type: str) -> str:
    if entity_type not in names:
        return ""
    name = names[entity_type]
    return "<default>" if name is None else name


def quota_families(snap: QuotaSnapshot | None) -> Iterator[GaugeMetricFamily]:
    """The ``kafka_client_quota_*`` families of ``snap`` (nothing when None)."""
    if not snap:
        return
    families: dict[str, GaugeMetricFamily] = {}
    for entity, values in sorted(snap.items(), key=lambda kv: repr(kv[0])):
        names = dict(entity)
        labels = [_label(names, "user"), _label(names, "client-id")]
        for key, value in sorted(values.items()):
            fam = families.get(key)
            if fam is None:
                fam = families[key] = GaugeMetricFamily(
                    f"kafka_client_quota_{key}", _DOCS.get(key, f"Client quota {key}"), labels=["user", "client_id"])
            fam.add_metric(labels, value)
    yield from families.values()
