"""Per-partition log configuration, named after Kafka's topic-level configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LogConfig"]

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# compression.type -> batch codec (None: keep the producer's).
_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log. Defaults are Kafka's broker defaults."""

    #: log.segment.bytes / topic ``segment.bytes``: roll when the active segment would exceed it.
    segment_bytes: int = 1024 * 1024 * 1024
    #: log.roll.ms / ``segment.ms``: roll when the active segment's first append is older.
    segment_ms: int = 7 * 24 * 3600 * 1000
    #: log.retention.ms / ``retention.ms``; -1 = unlimited.
    retention_ms: int = 7 * 24 * 3600 * 1000
    #: log.retention.bytes / ``retention.bytes``; -1 = unlimited.
    retention_bytes: int = -1
    #: log.index.interval.bytes / ``index.interval.bytes``.
    index_interval_bytes: int = 4096
    #: message.max.bytes / ``max.message.bytes``: the largest batch accepted.
    max_message_bytes: int = 1048588
    #: log.flush.interval.messages / ``flush.messages``; None = never by count (Kafka: Long.MAX).
    flush_interval_messages: int | None = None
    #: log.flush.interval.ms / ``flush.ms``; hightide flushes every second by default.
    flush_interval_ms: int | None = 1000
    #: log.message.timestamp.type / ``message.timestamp.type``.
    message_timestamp_type: str = "CreateTime"
    #: ``message.timestamp.before.max.ms``: oldest CreateTime accepted, relative to now; None = any.
    timestamp_before_max_ms: int | None = None
    #: ``message.timestamp.after.max.ms``: furthest future CreateTime accepted; None = any.
    timestamp_after_max_ms: int | None = None
    #: ``min.insync.replicas``: acks=all produces need this many in-sync replicas.
    min_insync_replicas: int = 1
    #: ``cleanup.policy`` contains ``compact``: the cleaner compacts the log, keys are required.
    compact: bool = False
    #: ``delete.retention.ms``: how long tombstones survive compaction.
    delete_retention_ms: int = 86_400_000
    #: ``min.compaction.lag.ms``: records younger than this are not compacted.
    min_compaction_lag_ms: int = 0
    #: ``min.cleanable.dirty.ratio``: compact when dirty bytes / cleanable bytes reach it.
    min_cleanable_ratio: float = 0.5
    #: ``compression.type`` as a batch codec (0 none .. 4 zstd) produced batches are
    #: recompressed to; None = ``producer`` (stored as sent).
    compression_codec: int | None = None
    #: ``compression.<codec>.level`` of that codec (None: snappy/none, or the default).
    compression_level: int | None = None

    def __post_init__(self) -> None:
        if self.segment_bytes < 14:
            raise ValueError(f"segment.bytes must be at least 14, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ValueError(f"segment.ms must be at least 1, got {self.segment_ms}")
        if self.retention_ms < -1:
            raise ValueError(f"retention.ms must be -1 (unlimited) or >= 0, got {self.retention_ms}")
        if self.retention_bytes < -1:
            raise ValueError(f"retention.bytes must be -1 (unlimited) or >= 0, got {self.retention_bytes}")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must be >= 0, got {self.index_interval_bytes}")
        if self.max_message_bytes < 0:
            raise ValueError(f"max.message.bytes must be >= 0, got {self.max_message_bytes}")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise ValueError(f"flush.messages must be >= 1, got {self.flush_interval_messages}")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError(f"flush.ms must be >= 0, got {self.flush_interval_ms}")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(
                f"message.timestamp.type must be CreateTime or LogAppendTime, got {self.message_timestamp_type!r}"
            )

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    def replace(self, **changes: object) -> LogConfig:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_kafka(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka topic-level names, starting from ``base`` (defaults).

        Unknown keys are ignored (topic configs also hold cleanup.policy etc.). Raises
        ValueError naming the config when a value is not a number or is out of range.
        ``flush.messages`` / ``flush.ms`` at Long.MAX_VALUE mean "never".
        """
        base = base or cls()
        out: dict[str, object] = {}

        def num(name: str, lo: int, hi: int) -> int:
            raw = props[name]
            try:
                v = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"Invalid value {raw!r} for configuration {name}: not a number") from None
            if not lo <= v <= hi:
                raise ValueError(f"Invalid value {v} for configuration {name}: must be in [{lo}, {hi}]")
            return v

        if "segment.bytes" in props:
            out["segment_bytes"] = num("segment.bytes", 14, _INT32_MAX)
        if "segment.ms" in props:
            out["segment_ms"] = num("segment.ms", 1, _INT64_MAX)
        if "retention.ms" in props:
            out["retention_ms"] = num("retention.ms", -1, _INT64_MAX)
        if "retention.bytes" in props:
            out["retention_bytes"] = num("retention.bytes", -1, _INT64_MAX)
        if "index.interval.bytes" in props:
            out["index_interval_bytes"] = num("index.interval.bytes", 0, _INT32_MAX)
        if "max.message.bytes" in props:
            out["max_message_bytes"] = num("max.message.bytes", 0, _INT32_MAX)
        if "flush.messages" in props:
            v = num("flush.messages", 1, _INT64_MAX)
            out["flush_interval_messages"] = None if v == _INT64_MAX else v
        if "flush.ms" in props:
            v = num("flush.ms", 0, _INT64_MAX)
            out["flush_interval_ms"] = None if v == _INT64_MAX else v
        for name, attr in (("message.timestamp.before.max.ms", "timestamp_before_max_ms"),
                           ("message.timestamp.after.max.ms", "timestamp_after_max_ms")):
            if name in props:
                v = num(name, 0, _INT64_MAX)
                out[attr] = None if v == _INT64_MAX else v
        if "cleanup.policy" in props:
            out["compact"] = "compact" in [x.strip() for x in str(props["cleanup.policy"]).split(",")]
        if "delete.retention.ms" in props:
            out["delete_retention_ms"] = num("delete.retention.ms", 0, _INT64_MAX)
        if "min.compaction.lag.ms" in props:
            out["min_compaction_lag_ms"] = num("min.compaction.lag.ms", 0, _INT64_MAX)
        if "min.cleanable.dirty.ratio" in props:
            try:
                ratio = float(props["min.cleanable.dirty.ratio"])
            except ValueError:
                raise ValueError("Invalid value for configuration min.cleanable.dirty.ratio: not a number") from None
            if not 0 <= ratio <= 1:
                raise ValueError(f"Invalid value {ratio} for configuration min.cleanable.dirty.ratio: must be in [0, 1]")
            out["min_cleanable_ratio"] = ratio
        if "min.insync.replicas" in props:
            out["min_insync_replicas"] = num("min.insync.replicas", 1, _INT32_MAX)
        if "compression.type" in props:
            kind = str(props["compression.type"]).strip()
            if kind not in _CODECS:
                raise ValueError(f"Invalid value {kind!r} for configuration compression.type")
            out["compression_codec"] = _CODECS[kind]
            level_name = f"compression.{kind}.level"
            if level_name in props:
                out["compression_level"] = num(level_name, -131072, _INT32_MAX)
        if "message.timestamp.type" in props:
            ts_type = str(props["message.timestamp.type"]).strip()
            if ts_type not in ("CreateTime", "LogAppendTime"):
                raise ValueError(
                    f"Invalid value {ts_type!r} for configuration message.timestamp.type: "
                    "must be CreateTime or LogAppendTime"
                )
            out["message_timestamp_type"] = ts_type
        return dataclasses.replace(base, **out)  # type: ignore[arg-type]
