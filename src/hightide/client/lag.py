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
from typing import TYPE_CHECKING, Any

from ..protocol.offset_fetch_response import INCLUDE_LOG_OFFSETS
from ..protocol.offset_fetch_rows import GroupRows, decode_offset_fetch_rows
from .errors import COORDINATOR_ERRORS, ErrorCode, KafkaError, error_for
from .types import ListOffsetsResult, OffsetAndMetadata, PartitionLag, TopicPartition

if TYPE_CHECKING:
    from .admin import AdminClient
    from .connection import BrokerConnection

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
                          isolation_level: str = "read_uncommitted", batch: int = 100
                          ) -> dict[str, list[LagRow] | KafkaError]:
    """:func:`groups_lag` as :data:`LagRow` tuples, sorted by partition within a group:
    the same values without an object per partition (a scrape of 500 groups x 100
    partitions spends its time here; the lag monitor reads these rows). The OffsetFetch
    answers (``batch`` groups per request on v8+) are decoded straight into rows
    (:func:`hightide.protocol.offset_fetch_rows.decode_offset_fetch_rows`); partitions
    without the extension's end offsets get them from one ListOffsets pass, and every
    group's row of such a partition uses that pass's answer."""
    read_committed = isolation_level in ("read_committed", 1)
    use_ext = getattr(client, "use_extensions", True)
    partial: set[str] = set()  # groups with a partition lacking the extension's end offsets
    fetched = await _offset_fetch_rows(client, group_ids, read_committed, use_ext, batch, partial)
    missing = sorted({row[0] for g in partial for rows in (fetched.get(g),) if isinstance(rows, list)
                      for row in rows if len(row) == 7})
    latest, earliest = await _end_offsets(client, missing, isolation_level)
    out: dict[str, list[LagRow] | KafkaError] = {}
    for g in group_ids:
        rows = fetched.get(g)
        if rows is None:
            out[g] = KafkaError(ErrorCode.unknown_server_error, f"no answer for group {g!r}")
        elif isinstance(rows, KafkaError) or not latest:
            out[g] = rows  # without ListOffsets every row is a LagRow
        else:
            out[g] = [_listed_row(row, read_committed, latest, earliest) if len(row) == 7 or row[0] in latest
                      else row for row in rows]  # 9 items: a LagRow
    return out


def _listed_row(row: tuple, read_committed: bool, latest: dict[TopicPartition, ListOffsetsResult | KafkaError],
                earliest: dict[TopicPartition, ListOffsetsResult | KafkaError]) -> LagRow:
    """A decoded row (committed row or lag row) measured against the ListOffsets answers."""
    tp = row[0]
    om = OffsetAndMetadata(row[1], row[2], row[3]) if len(row) == 7 else OffsetAndMetadata(row[1], row[6])
    return lag_row(tp, partition_lag(om, read_committed, latest.get(tp), earliest.get(tp)))


_RETRY_GROUP = COORDINATOR_ERRORS | {ErrorCode.unstable_offset_commit}


async def _offset_fetch_rows(client: AdminClient, group_ids: list[str], read_committed: bool, use_ext: bool,
                             batch: int, partial: set[str]) -> dict[str, list[tuple] | KafkaError]:
    """Every group's committed partitions as decoded rows (lag rows, or committed rows
    where the end offsets must be listed), sorted by partition; group-level errors (and
    a partition error other than UNKNOWN_TOPIC_OR_PARTITION, so a coordinator error is
    retried) as the group's :class:`KafkaError`. The groups with committed rows are
    added to ``partial``."""
    keys: dict[str, dict[int, TopicPartition]] = {}  # one TopicPartition per partition

    async def send(conn: BrokerConnection, gs: list[str]) -> dict[str, Any]:
        v = conn.pick_version(9, 9, 2)
        chunks = [gs[i:i + batch] for i in range(0, len(gs), batch)] if v >= 8 else [[g] for g in gs]
        outs = await asyncio.gather(*(one(conn, v, c) for c in chunks))
        return {g: r for o in outs for g, r in o.items()}

    async def one(conn: BrokerConnection, v: int, gs: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"group_id": gs[0], "topics": None, "require_stable": False,
                                "groups": [{"group_id": g, "topics": None} for g in gs]}

        def decode(frame: bytes | memoryview) -> list[GroupRows]:
            return decode_offset_fetch_rows(v, frame, keys, TopicPartition, read_committed=read_committed,
                                            use_extensions=use_ext, source="extension", none=ErrorCode.none)[1]
        groups = await conn.request(9, v, body, decoder=decode,
                                    request_tags=INCLUDE_LOG_OFFSETS if use_ext and v >= 6 else None)
        answers = {g.group_id: g for g in groups} if v >= 8 else {gs[0]: groups[0]}
        out = {}
        for g in gs:
            got = answers.get(g)
            if got is not None and got.committed_rows:
                partial.add(g)
            out[g] = _group_rows(g, got)
        return out
    return await client._per_coordinator(list(group_ids), send)


def _group_rows(group_id: str, got: GroupRows | None) -> list[tuple] | KafkaError:
    if got is None:
        return KafkaError(ErrorCode.unknown_server_error, f"OffsetFetch: no answer for {group_id!r}")
    if got.error_code:
        return error_for(got.error_code, f"OffsetFetch {group_id!r}")
    if got.partition_error is not None:
        topic, partition, code = got.partition_error
        if code in _RETRY_GROUP:
            return error_for(code, f"{group_id} {topic}-{partition}")
        return error_for(code, f"OffsetFetch {group_id!r} {topic}-{partition}")
    rows = got.rows
    if not got.ordered:
        rows.sort(key=_by_partition)
    return rows


_by_partition = itemgetter(0)


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
