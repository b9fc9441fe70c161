"""hightide's PySpark data source and lag-history jobs (``pip install 'hightide[spark]'``).

    import hightide.spark
    hightide.spark.register(spark)
    df = (spark.readStream.format("hightide")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Works against hightide and any Kafka-compatible cluster. See ``docs/spark.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]

_REGISTERED_ATTR = "_hightide_progress_listener"


def register(spark: Any, *, commit_progress: bool = True) -> None:
    """Register ``format("hightide")`` with ``spark`` and, unless ``commit_progress`` is
    false, the streaming-query listener that commits each micro-batch's end offsets to
    the query's consumer group (:class:`.progress.GroupOffsetCommitter`). Idempotent per
    session."""
    from .source import HightideDataSource
    spark.dataSource.register(HightideDataSource)
    if commit_progress and getattr(spark, _REGISTERED_ATTR, None) is None:
        from .progress import GroupOffsetCommitter
        listener = GroupOffsetCommitter(spark)
        spark.streams.addListener(listener)
        setattr(spark, _REGISTERED_ATTR, listener)
