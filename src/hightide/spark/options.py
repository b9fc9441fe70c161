"""Options of the ``hightide`` Spark source, named as Spark's Kafka connector names them,
and the pure offset arithmetic behind them (no Spark, no network: unit-testable).

Offsets are plain dicts in the JSON shape Spark's Kafka source uses,
``{"topic": {"0": 23, "1": 5}}``, always with topics sorted by name and partitions in
numeric order, so the same offsets always serialise to the same JSON (Spark compares
and stores offsets as JSON strings). A streaming source whose progress is committed as
group offsets adds one more entry, :data:`PROGRESS_KEY` (``"@hightide"``, never a Kafka
topic name), naming where to commit (see :func:`progress_entry`): the progress event of
every micro-batch then carries all the listener needs, on classic Spark and on Spark
Connect alike, without looking into the query's JVM plan.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client import TopicPartition
from ..client.properties import ClientConfigError, ClientSecurity

__all__ = ["EARLIEST", "LATEST", "PROGRESS_KEY", "OffsetSpec", "ProgressTarget", "SourceOptions", "SinkOptions",
           "from_offsets_dict", "progress_target", "rate_limit", "split_ranges", "to_offsets_dict"]

EARLIEST, LATEST = -2, -1
Offsets = dict[TopicPartition, int]


class OptionError(ValueError):
    """An option is missing, malformed or not allowed in this mode (batch/streaming)."""


PROGRESS_KEY = "@hightide"
"""The offsets entry naming where a streaming source's progress is committed. Kafka topic
names are ``[a-zA-Z0-9._-]+``, so it never collides with a topic."""


def to_offsets_dict(offsets: Mapping[TopicPartition, int],
                    progress: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{tp: offset}`` → Spark's offset JSON shape, in a stable key order, with
    ``progress`` (from :func:`progress_entry`) as the last entry when given."""
    out: dict[str, Any] = {}
    for tp in sorted(offsets, key=lambda tp: (tp[0], tp[1])):
        out.setdefault(tp[0], {})[str(tp[1])] = int(offsets[tp])
    if progress is not None:
        out[PROGRESS_KEY] = dict(progress)
    return out


def from_offsets_dict(d: Mapping[str, Any] | None) -> Offsets:
    """The inverse of :func:`to_offsets_dict` (the :data:`PROGRESS_KEY` entry is not an
    offset and is skipped; offsets written before it existed have none)."""
    return {TopicPartition(t, int(p)): int(o) for t, ps in (d or {}).items() if t != PROGRESS_KEY
            for p, o in ps.items()}


@dataclass(frozen=True, slots=True)
class ProgressTarget:
    """Where a streaming source's progress is committed: the cluster, and ``group`` (the
    ``groupId`` option) or, without it, ``<prefix>-<query id>``."""

    bootstrap_servers: str
    group: str | None
    prefix: str

    def group_for(self, query_id: str) -> str:
        return self.group or f"{self.prefix}-{query_id}"


def progress_target(offsets_json: str | None) -> tuple[ProgressTarget, Offsets] | None:
    """Parse a source's end offset as a progress event shows it (a JSON string). Returns
    the commit target and the offsets, or None when it is not a ``hightide`` source's
    offset with progress commits on (another source's offset, which may not even be a
    JSON object, or a source with ``commitOffsets=false``)."""
    if not offsets_json:
        return None
    try:
        doc = json.loads(offsets_json)
    except ValueError:
        return None
    entry = doc.get(PROGRESS_KEY) if isinstance(doc, dict) else None
    if not isinstance(entry, dict) or not entry.get("servers"):
        return None
    target = ProgressTarget(str(entry["servers"]), entry.get("group") or None,
                            str(entry.get("prefix") or "spark-hightide"))
    return target, from_offsets_dict(doc)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is ``"earliest"``, ``"latest"``, ``"offsets"``
    (``per_partition`` offsets, -2 earliest, -1 latest), ``"timestamp"`` (one
    ``timestamp`` for every partition) or ``"timestamps"`` (``per_partition``)."""

    kind: str
    per_partition: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


def _json_offsets(name: str, text: str) -> dict[TopicPartition, int]:
    try:
        doc = json.loads(text)
        return {TopicPartition(str(t), int(p)): int(o) for t, ps in doc.items() for p, o in ps.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise OptionError(f'{name}: expected JSON like {{"topicA":{{"0":23,"1":-1}}}}, got {text!r}') from exc


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    v = opts.get(name)
    if v is None:
        return default
    if v.strip().lower() not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, got {v!r}")
    return v.strip().lower() == "true"


def _int(opts: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    v = opts.get(name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise OptionError(f"{name} must be an integer, got {v!r}") from None
    if n < minimum:
        raise OptionError(f"{name} must be >= {minimum}, got {n}")
    return n


def _lower(opts: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in opts.items()}


def client_security(o: Mapping[str, str]) -> ClientSecurity | None:
    """The connection security of Spark's Kafka options (lower-cased names), as Spark's
    Kafka connector takes them: ``kafka.security.protocol``, ``kafka.sasl.*`` and
    ``kafka.ssl.*`` are Kafka client properties (PEM files for ``ssl.*`` locations). None
    for PLAINTEXT. The security is also remembered for the bootstrap servers in this
    process (:func:`hightide.spark.kafkaio.remember_security`), so the driver's progress
    commits to the same cluster use it. Raises OptionError for settings the client
    cannot honour."""
    props = {k[len("kafka."):]: v for k, v in o.items()
             if k.startswith(("kafka.security.", "kafka.sasl.", "kafka.ssl."))}
    if not props:
        return None
    try:
        security = ClientSecurity.from_properties(props)
    except ClientConfigError as exc:
        raise OptionError(f"kafka.{exc}") from None
    if security.protocol == "PLAINTEXT":
        return None
    from .kafkaio import remember_security
    remember_security(o.get("kafka.bootstrap.servers", ""), security)
    return security


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The parsed options of one ``spark.read/readStream.format("hightide")``."""

    bootstrap_servers: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    group_id: str | None = None
    group_id_prefix: str = "spark-hightide"
    commit_offsets: bool = True
    fetch_max_bytes: int = 8 * 1024 * 1024
    isolation_level: int = 0
    request_timeout_s: float = 30.0
    security: ClientSecurity | None = None  # kafka.security.protocol, kafka.sasl.*, kafka.ssl.*

    @classmethod
    def parse(cls, options: Mapping[str, Any], streaming: bool) -> SourceOptions:
        """Validate ``options`` (names are case-insensitive, as in Spark) for a batch or
        streaming read. Raises :class:`OptionError` with the reason."""
        o = _lower(options)
        servers = o.get("kafka.bootstrap.servers")
        if not servers:
            raise OptionError("option 'kafka.bootstrap.servers' must be specified")
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if o.get(k)]
        if len(strategies) != 1:
            raise OptionError("exactly one of the options 'assign', 'subscribe', 'subscribePattern' "
                              f"must be specified, got {len(strategies)}")
        subscribe: tuple[str, ...] = ()
        pattern = None
        assign: tuple[TopicPartition, ...] = ()
        if "subscribe" in strategies:
            subscribe = tuple(t.strip() for t in o["subscribe"].split(",") if t.strip())
            if not subscribe:
                raise OptionError("no topics to subscribe to in option 'subscribe'")
        elif "subscribepattern" in strategies:
            pattern = o["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"subscribePattern {pattern!r} is not a valid pattern: {exc}") from exc
        else:
            try:
                doc = json.loads(o["assign"])
                assign = tuple(sorted(TopicPartition(str(t), int(p)) for t, ps in doc.items() for p in ps))
            except (ValueError, AttributeError, TypeError) as exc:
                raise OptionError(f'assign: expected JSON like {{"topicA":[0,1]}}, got {o["assign"]!r}') from exc
        starting = cls._spec(o, "starting", LATEST if streaming else EARLIEST)
        if not streaming and starting.kind == "latest":
            raise OptionError("startingOffsets 'latest' is not allowed for batch queries")
        if not streaming and starting.kind == "offsets" and LATEST in starting.per_partition.values():
            raise OptionError("startingOffsets: latest (-1) is not allowed for batch queries")
        ending = OffsetSpec("latest")
        if streaming:
            for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
                if k in o:
                    raise OptionError(f"option '{k}' is for batch queries only")
        else:
            ending = cls._spec(o, "ending", LATEST)
            if ending.kind == "earliest" or (ending.kind == "offsets" and EARLIEST in ending.per_partition.values()):
                raise OptionError("endingOffsets: earliest (-2) is not allowed for batch queries")
            if "maxoffsetspertrigger" in o:
                raise OptionError("option 'maxOffsetsPerTrigger' is for streaming queries only")
        strategy = o.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise OptionError(f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}")
        iso = o.get("kafka.isolation.level", "read_uncommitted").lower()
        if iso not in ("read_uncommitted", "read_committed"):
            raise OptionError(f"kafka.isolation.level must be read_uncommitted or read_committed, got {iso!r}")
        for unsupported in ("minoffsetspertrigger", "maxtriggerdelay"):
            if unsupported in o:
                raise OptionError(f"option '{unsupported}' is not supported by the hightide source "
                                  "(see docs/spark.md)")
        return cls(
            bootstrap_servers=servers, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
            starting=starting, ending=ending, timestamp_strategy=strategy,
            fail_on_data_loss=_bool(o, "failondataloss", True),
            include_headers=_bool(o, "includeheaders", False),
            max_offsets_per_trigger=_int(o, "maxoffsetspertrigger", None),
            min_partitions=_int(o, "minpartitions", None),
            max_records_per_partition=_int(o, "maxrecordsperpartition", None),
            group_id=o.get("groupid") or None,
            group_id_prefix=o.get("groupidprefix", "spark-hightide"),
            commit_offsets=_bool(o, "commitoffsets", True),
            fetch_max_bytes=_int(o, "kafka.max.partition.fetch.bytes", 8 * 1024 * 1024) or 0,
            isolation_level=1 if iso == "read_committed" else 0,
            request_timeout_s=(_int(o, "kafka.request.timeout.ms", 30000) or 30000) / 1000.0,
            security=client_security(o),
        )

    @staticmethod
    def _spec(o: dict[str, str], which: str, default: int) -> OffsetSpec:
        """``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets``
        (Spark's precedence; likewise for ``ending*``)."""
        if f"{which}timestamp" in o:
            ts = _int(o, f"{which}timestamp", None, minimum=0)
            return OffsetSpec("timestamp", timestamp=ts)
        if f"{which}offsetsbytimestamp" in o:
            return OffsetSpec("timestamps", _json_offsets(f"{which}OffsetsByTimestamp",
                                                          o[f"{which}offsetsbytimestamp"]))
        text = o.get(f"{which}offsets")
        if text is None:
            return OffsetSpec("earliest" if default == EARLIEST else "latest")
        if text.strip().lower() in ("earliest", "latest"):
            return OffsetSpec(text.strip().lower())
        return OffsetSpec("offsets", _json_offsets(f"{which}Offsets", text))

    def topic_filter(self, topic: str) -> bool:
        """True if ``topic`` is subscribed (``subscribe``/``subscribePattern``; Java's
        ``Pattern.matcher().matches()`` is a full match)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return topic in {tp.topic for tp in self.assign}

    def commit_group(self, query_id: str) -> str:
        """The consumer group the progress listener commits to."""
        return self.group_id or f"{self.group_id_prefix}-{query_id}"

    def progress_entry(self) -> dict[str, Any] | None:
        """The :data:`PROGRESS_KEY` entry a streaming reader adds to its offsets (None
        with ``commitOffsets=false``): ``{"servers": …, "group": groupId or null,
        "prefix": groupIdPrefix}``; :func:`progress_target` reads it back."""
        if not self.commit_offsets:
            return None
        return {"servers": self.bootstrap_servers, "group": self.group_id, "prefix": self.group_id_prefix}


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The parsed options of one ``df.write/writeStream.format("hightide")``."""

    bootstrap_servers: str
    topic: str | None = None
    sink_group_id: str | None = None
    exactly_once: bool = True
    compression: int = 0
    max_batch_records: int = 10000
    max_batch_bytes: int = 512 * 1024
    request_timeout_s: float = 30.0
    transactional: bool = False
    """Write in Kafka transactions (option ``transactional`` = ``true`` or ``per-task``, or
    Kafka's ``kafka.transactional.id``, which then is the transactional id prefix)."""
    per_task_transactions: bool = False
    """``transactional=per-task``: one transaction per task, committed by the driver one
    after another (NOT atomic across tasks). Otherwise (``true``) one transaction per
    micro-batch (or job), written by its one task: atomic for read_committed readers."""
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = 60_000
    security: ClientSecurity | None = None  # kafka.security.protocol, kafka.sasl.*, kafka.ssl.*

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SinkOptions:
        o = _lower(options)
        servers = o.get("kafka.bootstrap.servers")
        if not servers:
            raise OptionError("option 'kafka.bootstrap.servers' must be specified")
        codecs = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
        codec = o.get("kafka.compression.type", "none").lower()
        if codec not in codecs:
            raise OptionError(f"kafka.compression.type must be one of {sorted(codecs)}, got {codec!r}")
        prefix = o.get("transactionalidprefix") or o.get("kafka.transactional.id") or None
        mode = o.pop("transactional", "true" if prefix is not None else "false").strip().lower()
        if mode not in ("true", "false", "per-task"):
            raise OptionError(f"transactional must be true, false or per-task, got {mode!r}")
        return cls(bootstrap_servers=servers, topic=o.get("topic") or None,
                   transactional=mode != "false", per_task_transactions=mode == "per-task",
                   transactional_id_prefix=prefix,
                   transaction_timeout_ms=_int(o, "kafka.transaction.timeout.ms", 60_000) or 60_000,
                   sink_group_id=o.get("sinkgroupid") or None,
                   exactly_once=_bool(o, "exactlyonce", True), compression=codecs[codec],
                   max_batch_records=_int(o, "kafka.batch.records", 10000) or 10000,
                   max_batch_bytes=_int(o, "kafka.batch.size", 512 * 1024) or 512 * 1024,
                   request_timeout_s=(_int(o, "kafka.request.timeout.ms", 30000) or 30000) / 1000.0,
                   security=client_security(o))


def rate_limit(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """End offsets that admit at most about ``limit`` records, split across partitions in
    proportion to their backlog (Spark's Kafka source rule: a partition's share is
    ``limit * backlog / total``, rounded down, but a share below one record is rounded up
    so small partitions are never starved). Partitions without backlog keep ``latest``."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + share)
    return out


def split_ranges(ranges: list[tuple[TopicPartition, int, int]], min_partitions: int | None,
                 max_records: int | None) -> list[tuple[TopicPartition, int, int]]:
    """Cut ``(tp, start, end)`` ranges into more, smaller ranges of the same partitions:
    with ``max_records``, none longer than that; with ``min_partitions``, at least that
    many in total where the ranges are long enough, pieces in proportion to each range's
    size (Spark's ``KafkaOffsetRangeCalculator``). Empty ranges are dropped."""
    ranges = [r for r in ranges if r[2] > r[1]]
    if max_records:
        ranges = [(tp, s, min(s + max_records, e)) for tp, start, e in ranges
                  for s in range(start, e, max_records)]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(e - s for _, s, e in ranges)
    out = []
    for tp, s, e in ranges:
        parts = max(1, min(e - s, math.ceil((e - s) / total * min_partitions)))
        step = (e - s) / parts
        cuts = [s + round(i * step) for i in range(parts)] + [e]
        out.extend((tp, a, b) for a, b in zip(cuts, cuts[1:]) if b > a)
    return out
