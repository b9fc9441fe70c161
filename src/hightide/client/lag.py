"""Consumer-group lag from committed offsets and partition end offsets.

Two paths, chosen per partition:

* **one call** (hightide): the OffsetFetch response carries, per partition, the tagged
  fields 10000 HighWatermark, 10001 LogStartOffset and 10002 LastStableOffset (see
  ``docs/protocol-extensions.md``); no ListOffsets is needed for those partitions.
* **two calls** (any Kafka broker): OffsetFetch, *then* ListOffsets ``latest`` (high
  watermark, or LSO for read_committed) and ``earliest`` (log start offset).

Why OffsetFetch first. Both the committed offset ``C`` and the end offset ``E`` only
grow. Reading ``C`` at time t1 and ``E`` at a later t2 gives
``E(t2) - C(t1) >= E(t) - C(t)`` for every t in [t1, t2]: the reported lag is never
smaller than the true lag at any instant of the measurement, and never negative while
consumers commit at most the end offset. The opposite order, ``E(t1) - C(t2)``, lets a
commit made between the two reads exceed the stale end offset, so it under-reports
lag — a consumer can look caught up, or even ahead (negative lag), while it is not.
For monitoring, an occasional over-estimate by the records produced during one round
trip is harmless; a false "no lag" is not.
"""

from __future__ import annotations

import asyncio
from operator import itemgetter
from typing import TYPE_CHECKING

from .errors import ErrorCode, KafkaError
from .types import ListOffsetsResult, OffsetAndMetadata, PartitionLag, TopicPartition

if TYPE_CHECKING:
    from .admin import AdminClient

__all__ = ["LagRow", "group_lag", "groups_lag", "groups_lag_rows", "lag_row", "partition_lag", "uncommitted_lag"]


async def group_lag(client: AdminClient, group_id: str, *,
                    isolation_level: str = "read_uncommitted") -> dict[TopicPartition, PartitionLag]:
    """Lag of every partition ``group_id`` has committed offsets for.

    Reads committed offsets first, then end offsets (see the module docstring for why this
    order never under-reports). Partitions whose end offsets cannot be read (deleted
    topic, no leader) are reported with ``high_watermark=None``, ``lag=None`` and the
    error code, never dropped. Raises :class:`KafkaError` for group-level failures.
    """
    committed = await client.list_consumer_group_offsets(group_id)
    read_committed = isolation_level in ("read_committed", 1)
    use_ext = getattr(client, "use_extensions", True)
    missing = [tp for tp, om in committed.items()
               if not (use_ext and _has_extension(om, read_committed))]
    latest, earliest = await _end_offsets(client, missing, isolation_level)
    return {tp: partition_lag(om if use_ext else OffsetAndMetadata(om.offset, om.metadata, om.leader_epoch),
                              read_committed, latest.get(tp), earliest.get(tp))
            for tp, om in sorted(committed.items())}



async def uncommitted_lag(client: AdminClient, partitions: list[TopicPartition], *,
                          isolation_level: str = "read_uncommitted") -> dict[TopicPartition, PartitionLag]:
    """:class:`PartitionLag` of partitions a group consumes (a member owns them) but has
    never committed: ``committed`` and ``lag`` are None, the end offsets are the real ones
    (one ListOffsets pass, latest and earliest), as kafka-consumer-groups.sh prints
    LOG-END-OFFSET next to CURRENT-OFFSET '-'. A partition whose end offsets cannot be
    read keeps them None and carries the error code. Never raises for partition errors.
    """
    latest, earliest = await _end_offsets(client, sorted(set(partitions)), isolation_level)
    read_committed = isolation_level in ("read_committed", 1)
    none = OffsetAndMetadata(-1)
    return {tp: partition_lag(none, read_committed, latest.get(tp), earliest.get(tp)) for tp in sorted(latest)}


async def _end_offsets(client: AdminClient, partitions: list[TopicPartition], isolation_level: str
                       ) -> tuple[dict[TopicPartition, ListOffsetsResult | KafkaError],
                                  dict[TopicPartition, ListOffsetsResult | KafkaError]]:
    """(latest, earliest) for ``partitions`` — the second call of the two-call path."""
    if not partitions:
        return {}, {}
    return await asyncio.gather(
        client.list_offsets({tp: "latest" for tp in partitions}, isolation_level=isolation_level,
                            raise_on_error=False),
        client.list_offsets({tp: "earliest" for tp in partitions}, raise_on_error=False))


LagRow = tuple[TopicPartition, "int | None", "int | None", "int | None", "int | None", "int | None",
               "str | None", str, ErrorCode]
"""One partition's lag as a plain tuple: the partition, then :class:`PartitionLag`'s
fields in order up to ``error`` (committed, high watermark, log start offset, lag, last
stable offset, metadata, source, error); ``PartitionLag(*row[1:], read_committed)``."""


async def groups_lag(client: AdminClient, group_ids: list[str], *,
                     isolation_level: str = "read_uncommitted"
                     ) -> dict[str, dict[TopicPartition, PartitionLag] | KafkaError]:
    """:func:`group_lag` of many groups at once: committed offsets of all groups first
    (batched OffsetFetch per coordinator), then one ListOffsets pass (latest, earliest)
    for the union of partitions the extension did not cover. Group-level failures are
    returned as the group's :class:`KafkaError`."""
    rows = await groups_lag_rows(client, group_ids, isolation_level=isolation_level)
    read_committed = isolation_level in ("read_committed", 1)
    return {g: r if isinstance(r, KafkaError) else {row[0]: PartitionLag(*row[1:], read_committed) for row in r}
            for g, r in rows.items()}


async def groups_lag_rows(client: AdminClient, group_ids: list[str], *,
                          isolation_level: str = "read_uncommitted"
                          ) -> dict[str, list[LagRow] | KafkaError]:
    """:func:`groups_lag` as :data:`LagRow` tuples, sorted by partition within a group:
    the same values without an object per partition (a scrape of 500 groups x 100
    partitions spends its time here; the lag monitor reads these rows)."""
    committed = await client._committed_offset_rows(group_ids)
    read_committed = isolation_level in ("read_committed", 1)
    use_ext = getattr(client, "use_extensions", True)

    def covered(row: tuple) -> bool:  # _has_extension on a row
        return use_ext and row[4] is not None and row[5] is not None and (not read_committed or row[6] is not None)
    missing = sorted({row[0] for rows in committed.values() if not isinstance(rows, KafkaError)
                      for row in rows if not covered(row)})
    latest, earliest = await _end_offsets(client, missing, isolation_level)
    none = ErrorCode.none
    by_tp = itemgetter(0)
    out: dict[str, list[LagRow] | KafkaError] = {}
    for g in group_ids:
        rows = committed.get(g)
        if rows is None:
            out[g] = KafkaError(ErrorCode.unknown_server_error, f"no answer for group {g!r}")
            continue
        if isinstance(rows, KafkaError):
            out[g] = rows
            continue
        lags: list[LagRow] = []
        append = lags.append
        for row in sorted(rows, key=by_tp):
            tp, offset, metadata, epoch, hw, lso, lst = row
            if tp in latest or not covered(row):
                pl = partition_lag(OffsetAndMetadata(offset, metadata, epoch), read_committed,
                                   latest.get(tp), earliest.get(tp))
                append(lag_row(tp, pl))
                continue
            c = offset if offset >= 0 else None  # the extension path of partition_lag, inlined
            end = lst if read_committed else hw
            append((tp, c, hw, lso, None if c is None else end - c, lst, metadata, "extension", none))
        out[g] = lags
    return out


def lag_row(tp: TopicPartition, pl: PartitionLag) -> LagRow:
    """``pl`` as a :data:`LagRow`."""
    return (tp, pl.committed, pl.high_watermark, pl.log_start_offset, pl.lag, pl.last_stable_offset,
            pl.metadata, pl.source, pl.error)


def _has_extension(om: OffsetAndMetadata, read_committed: bool) -> bool:
    if om.high_watermark is None or om.log_start_offset is None:
        return False
    return not read_committed or om.last_stable_offset is not None


def partition_lag(om: OffsetAndMetadata, read_committed: bool,
                  latest: ListOffsetsResult | KafkaError | None = None,
                  earliest: ListOffsetsResult | KafkaError | None = None) -> PartitionLag:
    """One partition's :class:`PartitionLag` from its commit and either the extension
    fields in ``om`` (preferred when complete) or the ListOffsets answers."""
    committed = om.offset if om.offset >= 0 else None
    if latest is None and _has_extension(om, read_committed):
        end = om.last_stable_offset if read_committed else om.high_watermark
        return PartitionLag(committed, om.high_watermark, om.log_start_offset,
                            None if committed is None or end is None else end - committed,
                            om.last_stable_offset, om.metadata, "extension",
                            read_committed=read_committed)
    error = ErrorCode.none
    end = start = None
    if isinstance(latest, KafkaError):
        error = latest.code
    elif latest is not None and latest.offset >= 0:
        end = latest.offset
    if isinstance(earliest, ListOffsetsResult) and earliest.offset >= 0:
        start = earliest.offset
    elif isinstance(earliest, KafkaError) and error == ErrorCode.none:
        error = earliest.code
    return PartitionLag(committed, None if read_committed else end, start,
                        None if committed is None or end is None else end - committed,
                        end if read_committed else None, om.metadata, "list_offsets", error,
                        read_committed)
