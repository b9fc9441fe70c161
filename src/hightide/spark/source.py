"""The ``hightide`` Spark data source: batch and streaming reads (this module) and
writes (:mod:`.sink`), with the option names and schema of Spark's Kafka connector.

Where the pieces run:

* ``DataSource``, the batch reader's ``partitions()`` and the whole streaming reader
  (``initialOffset``, ``latestOffset``, ``partitions``) run in Python worker processes
  on the driver; they resolve topic-partitions and offsets with ListOffsets/Metadata.
* ``read(partition)`` runs on executors, one task per input partition; an input
  partition is one ``[start, end)`` range of one topic-partition (several ranges of a
  partition with ``minPartitions``/``maxRecordsPerPartition``). It fetches the range
  and yields Arrow record batches (see :mod:`.columnar`), so no per-row objects are
  made in Python.

Nothing here commits consumer-group offsets: Spark calls a source's ``commit()`` one
batch late, so progress is committed by :class:`.progress.GroupOffsetCommitter`, a
streaming-query listener, after each micro-batch. The streaming reader's offsets carry
where to commit (cluster and group), so the listener needs nothing but the progress
event (it runs in the client on Spark Connect, with no access to the query's plan).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..client import KafkaError, TopicPartition
from .columnar import decode_to_arrow
from .kafkaio import KafkaIO, OffsetOutOfRange
from .options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    SourceOptions,
    from_offsets_dict,
    rate_limit,
    split_ranges,
    to_offsets_dict,
)

__all__ = ["DataLossError", "HightideDataSource", "KafkaRange", "SCHEMA", "SCHEMA_WITH_HEADERS"]

NAME = "hightide"
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
SCHEMA_WITH_HEADERS = SCHEMA + ", headers array<struct<key: string, value: binary>>"


class DataLossError(RuntimeError):
    """Records the query should read are gone (deleted by retention, topic deleted,
    log truncated) and ``failOnDataLoss`` is true."""


def _data_loss(opts: SourceOptions, message: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(message + ". Some data may have been lost because they are not available in "
                            "Kafka any more; set the option failOnDataLoss to false to ignore this.")


class KafkaRange(InputPartition):
    """One ``[start, end)`` offset range of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def read_range(opts: SourceOptions, r: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Fetch ``r`` and yield it as Arrow record batches (the executor side of a read).
    Deleted records (OFFSET_OUT_OF_RANGE) and a log that ends before ``r.end`` raise
    :class:`DataLossError`, or are skipped when ``failOnDataLoss`` is false."""
    tp = TopicPartition(r.topic, r.partition)
    offset, stalls = r.start, 0
    with KafkaIO(opts.bootstrap_servers, request_timeout_s=opts.request_timeout_s, security=opts.security) as io:
        while offset < r.end:
            try:
                last = None
                with closing(io.fetch_range(tp, offset, r.end, max_bytes=opts.fetch_max_bytes,
                                            isolation_level=opts.isolation_level)) as chunks:
                    for chunk in chunks:
                        d = decode_to_arrow(chunk.records, r.topic, r.partition, chunk.offset, r.end,
                                            opts.include_headers, chunk.aborted)
                        if d.batch is not None:
                            yield d.batch
                        offset, last = chunk.next_offset, chunk
            except OffsetOutOfRange:
                earliest = io.offsets({tp: "earliest"})[tp]
                if offset < earliest:
                    _data_loss(opts, f"offsets [{offset}, {min(earliest, r.end)}) of {tp.topic}-{tp.partition} "
                                     f"were deleted (log start offset is now {earliest})")
                    offset = earliest
                    continue
                _data_loss(opts, f"{tp.topic}-{tp.partition} ends before offset {offset} "
                                 f"(the range to read ends at {r.end})")
                return
            if offset >= r.end or last is None:
                continue
            if last.high_watermark <= offset:
                _data_loss(opts, f"{tp.topic}-{tp.partition} ends at {last.high_watermark}, before the end "
                                 f"of the range to read ({r.end})")
                return
            stalls += 1  # no complete batch came back although the data exists: retry
            if stalls > 100:
                raise KafkaError(-1, f"fetching {tp.topic}-{tp.partition} at {offset} makes no progress")
            time.sleep(0.05)


class _Planner:
    """Driver-side offset resolution shared by the batch and the streaming reader. The
    Kafka connection is opened lazily and never pickled (readers are pickled to
    executors)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._io: KafkaIO | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_io": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def io(self) -> KafkaIO:
        if self._io is None:
            self._io = KafkaIO(self.opts.bootstrap_servers, request_timeout_s=self.opts.request_timeout_s,
                               security=self.opts.security)
        return self._io

    def close(self) -> None:
        if self._io is not None:
            self._io.close()
            self._io = None

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions the options subscribe to, as the cluster has them now.
        ``assign``: exactly the assigned ones (a missing partition is data loss)."""
        o = self.opts
        if o.assign:
            have = self.io.partitions(sorted({tp.topic for tp in o.assign}))
            missing = [tp for tp in o.assign if tp.partition not in have.get(tp.topic, [])]
            if missing:
                _data_loss(o, f"assigned partitions {missing} do not exist")
            return [tp for tp in o.assign if tp not in missing]
        parts = self.io.partitions(list(o.subscribe) if o.subscribe else None)
        return sorted(TopicPartition(t, p) for t, ps in parts.items() if o.topic_filter(t) for p in ps)

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(tps, "latest")

    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(tps, "earliest")

    def _list(self, tps: list[TopicPartition], spec: Any) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        got = self.io.run(self.io.admin.list_offsets({tp: spec for tp in tps},
                                                     isolation_level=self.opts.isolation_level))
        return {tp: int(r.offset) for tp, r in got.items()}

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], what: str) -> dict[TopicPartition, int]:
        """Offsets for ``spec`` on ``tps``. ``what`` is "starting" or "ending" (for
        messages and for the by-timestamp rule: no match at the start is an error unless
        ``startingOffsetsByTimestampStrategy`` is "latest"; at the end it means latest)."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            given = spec.per_partition
            if set(given) != set(tps):
                raise OptionError(f"{what}Offsets must name exactly the subscribed partitions: "
                                  f"specified {sorted(given)}, assigned {sorted(tps)}")
            early = self.earliest([tp for tp in tps if given[tp] == EARLIEST])
            late = self.latest([tp for tp in tps if given[tp] == LATEST])
            return {tp: early.get(tp, late.get(tp, given[tp])) for tp in tps}
        stamps = ({tp: spec.timestamp for tp in tps} if spec.kind == "timestamp" else spec.per_partition)
        if spec.kind == "timestamps" and set(stamps) != set(tps):
            raise OptionError(f"{what}OffsetsByTimestamp must name exactly the subscribed partitions: "
                              f"specified {sorted(stamps)}, assigned {sorted(tps)}")
        special = {tp: ts for tp, ts in stamps.items() if ts in (EARLIEST, LATEST)}
        by_ts = self._list_each({tp: ts for tp, ts in stamps.items() if tp not in special})
        out = {**self.earliest([tp for tp, ts in special.items() if ts == EARLIEST]),
               **self.latest([tp for tp, ts in special.items() if ts == LATEST])}
        unmatched = [tp for tp, off in by_ts.items() if off < 0]
        if unmatched and what == "starting" and self.opts.timestamp_strategy == "error":
            raise OptionError(f"no offset matched the starting timestamp for {sorted(unmatched)} "
                              "(startingOffsetsByTimestampStrategy=error)")
        late = self.latest(unmatched)
        out.update({tp: late[tp] if off < 0 else off for tp, off in by_ts.items()})
        return out

    def _list_each(self, stamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not stamps:
            return {}
        got = self.io.run(self.io.admin.list_offsets(stamps, isolation_level=self.opts.isolation_level))
        return {tp: int(r.offset) for tp, r in got.items()}

    def check_starts(self, starts: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Starting offsets below the log start offset: data loss (fail, or start at the
        log start offset)."""
        earliest = self.earliest(list(starts))
        out = dict(starts)
        for tp, off in starts.items():
            if off < earliest[tp]:
                _data_loss(self.opts, f"starting offset {off} of {tp.topic}-{tp.partition} was deleted "
                                      f"(log start offset {earliest[tp]})")
                out[tp] = earliest[tp]
        return out


class HightideBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[KafkaRange]:
        planner = _Planner(self.opts)
        try:
            tps = planner.topic_partitions()
            starts = planner.check_starts(planner.resolve(self.opts.starting, tps, "starting"))
            ends = planner.resolve(self.opts.ending, tps, "ending")
        finally:
            planner.close()
        for tp in tps:
            if starts[tp] > ends[tp]:
                raise OptionError(f"{tp.topic}-{tp.partition}: starting offset {starts[tp]} is after the "
                                  f"ending offset {ends[tp]}")
        ranges = split_ranges([(tp, starts[tp], ends[tp]) for tp in tps], self.opts.min_partitions,
                              self.opts.max_records_per_partition)
        return [KafkaRange(tp.topic, tp.partition, s, e) for tp, s, e in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaRange):
            return iter(())  # no partition had data (Spark plans one empty partition)
        return read_range(self.opts, partition)


class HightideStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets: ``{"topic": {"partition": next offset}}``, plus the
    ``"@hightide"`` entry naming the group to commit progress to (unless
    ``commitOffsets=false``; see :func:`.options.progress_target`).

    * Partitions that appear while the query runs are picked up by ``latestOffset`` and
      read from their log start offset (as Spark's Kafka source does).
    * ``maxOffsetsPerTrigger`` becomes Spark's ``ReadMaxRows`` limit, split across
      partitions by backlog (:func:`.options.rate_limit`); the engine may pass
      ``ReadAllAvailable`` instead (e.g. for ``Trigger.Once``), which is obeyed.
    * ``Trigger.AvailableNow``: the latest offsets at ``prepareForTriggerAvailableNow``
      are the target; no later offset or partition is ever returned.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.planner = _Planner(opts)
        self._target: dict[TopicPartition, int] | None = None
        self._progress = opts.progress_entry()  # where the listener commits: carried in the offsets

    def initialOffset(self) -> dict:
        tps = self.planner.topic_partitions()
        return to_offsets_dict(self.planner.resolve(self.opts.starting, tps, "starting"), self._progress)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.latest(self.planner.topic_partitions())

    def reportLatestOffset(self) -> dict | None:
        return to_offsets_dict(self.planner.latest(self.planner.topic_partitions()))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_offsets_dict(start)
        tps = self.planner.topic_partitions()
        gone = [tp for tp in begin if tp not in set(tps)]
        if gone:
            _data_loss(self.opts, f"partitions {sorted(gone)} were deleted")
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target]
        new = [tp for tp in tps if tp not in begin]
        latest = self.planner.latest(tps)
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()}
        frm = {**{tp: begin[tp] for tp in tps if tp in begin}, **self.planner.earliest(new)}
        for tp in tps:
            if latest[tp] < frm[tp]:
                _data_loss(self.opts, f"{tp.topic}-{tp.partition} ends at {latest[tp]}, before the offset "
                                      f"already read ({frm[tp]})")
                latest[tp] = frm[tp]
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(frm, latest, limit.max_rows)
        return to_offsets_dict(latest, self._progress)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        begin, until = from_offsets_dict(start), from_offsets_dict(end)
        new = [tp for tp in until if tp not in begin]
        begin.update(self.planner.earliest(new))
        return [KafkaRange(tp.topic, tp.partition, begin[tp], until[tp])
                for tp in sorted(until) if until[tp] > begin[tp]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: group offsets are committed by the progress listener."""

    def stop(self) -> None:
        self.planner.close()


class HightideDataSource(DataSource):
    """``format("hightide")``; see ``docs/spark.md`` for the options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType | str:
        o = {k.lower(): v for k, v in self.options.items()}
        return SCHEMA_WITH_HEADERS if str(o.get("includeheaders", "false")).lower() == "true" else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return HightideBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HightideStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import HightideBatchWriter
        if overwrite:
            raise OptionError("save mode 'overwrite' is not allowed: a topic cannot be overwritten; "
                              "use mode('append')")
        return HightideBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import HightideStreamWriter
        return HightideStreamWriter(dict(self.options), schema)
