"""Configuration: Kafka's config names, types and defaults.

Broker configs come from defaults, then a TOML file (``--config``; keys are Kafka
names, e.g. ``num.partitions = 3`` or nested tables ``[log] retention.ms = ...``),
then command-line overrides. Topic configs (``retention.ms``, ``segment.bytes``, ...)
override their broker-level synonym (``log.retention.ms``, ``log.segment.bytes``).
Values are kept as Kafka strings at the edges and parsed by :meth:`ConfigDef.parse`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster.settings import ClusterSettings

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """A config name is unknown or its value is invalid; the message says which."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the closest known config names, or ''."""
    import difflib
    close = difflib.get_close_matches(name, list(known), n=2, cutoff=0.75)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # "int" | "long" | "bool" | "string" | "list" | "double"
    default: Any
    doc: str = ""
    valid: Callable[[Any], bool] | None = None
    valid_doc: str = ""
    synonym: str | None = None  # broker-level name a topic config inherits from
    sensitive: bool = False

    def parse(self, value: Any) -> Any:
        """Parse a string (or TOML value) into this config's type; raise ConfigError."""
        try:
            v = _PARSERS[self.type](value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid value {value!r} for configuration {self.name}: "
                              f"expected {self.type}") from exc
        if self.valid is not None and v is not None and not self.valid(v):
            raise ConfigError(f"Invalid value {value!r} for configuration {self.name}: "
                              f"{self.valid_doc}")
        return v

    def render(self, value: Any) -> str | None:
        """Kafka string form of a parsed value."""
        if value is None:
            return None
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "list":
            return ",".join(value)
        return str(value)


def _parse_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(v)


def _parse_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(v)
    return int(str(v).strip())


def _parse_list(v: Any) -> tuple[str, ...]:
    if isinstance(v, (list, tuple)):
        return tuple(str(x) for x in v)
    return tuple(x.strip() for x in str(v).split(",") if x.strip())


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": _parse_int, "long": _parse_int, "bool": _parse_bool,
    "string": lambda v: None if v is None else str(v), "list": _parse_list,
    "double": lambda v: float(v),
}

#: Kafka's compression.type values (BrokerCompressionType).
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_nonneg = (lambda v: v >= 0, "must be >= 0")
_pos = (lambda v: v >= 1, "must be >= 1")
_ms_or_unlimited = (lambda v: v >= -1, "must be >= -1 (-1 = unlimited)")


def _d(name: str, type_: str, default: Any, doc: str = "", valid: tuple | None = None,
       synonym: str | None = None) -> ConfigDef:
    v, vd = valid if valid else (None, "")
    return ConfigDef(name, type_, default, doc, v, vd, synonym)


#: Kafka's KRaft authorizer class: ``authorizer.class.name`` set to it (or the alias
#: ``standard``) enables ACL authorization (hightide.server.authorization).
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_CLASS_NAMES = (AUTHORIZER_CLASS, "standard")

BROKER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    _d("node.id", "int", 1, "This broker's id.", _nonneg),
    _d("num.partitions", "int", 1, "Default partition count for auto-created topics.", _pos),
    _d("default.replication.factor", "int", 1, "Default replication factor.", _pos),
    _d("auto.create.topics.enable", "bool", True, "Create topics on Metadata/Produce for unknown names."),
    _d("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    _d("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", _pos),
    _d("sasl.server.max.receive.size", "int", 524288,
       "Largest request frame a SASL listener accepts from a connection that has not authenticated (or is "
       "re-authenticating): a larger size field fails the authentication and closes the connection before the "
       "frame is read. listener.name.<listener>.sasl.server.max.receive.size overrides it for one listener."),
    _d("queued.max.requests", "int", 500, "Requests in flight per connection before reading pauses.", _pos),
    _d("connections.max.idle.ms", "long", 600000, "Idle connections are closed after this long.", _ms_or_unlimited),
    _d("quota.window.num", "int", 11, "Samples kept per client quota sensor (Kafka's: 10 whole windows and the "
       "current one).", _pos),
    _d("quota.window.size.seconds", "int", 1, "The time span of each client quota sample.", _pos),
    _d("message.max.bytes", "int", 1048588, "Largest record batch accepted.", _nonneg),
    _d("log.segment.bytes", "int", 1073741824, "Segment size before rolling.", (lambda v: v >= 14, "must be >= 14")),
    _d("log.roll.ms", "long", 604800000, "Segment age before rolling.", _pos),
    _d("log.retention.ms", "long", 604800000, "Time retention (-1 = unlimited).", _ms_or_unlimited),
    _d("log.retention.bytes", "long", -1, "Size retention per partition (-1 = unlimited).", _ms_or_unlimited),
    _d("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", _pos),
    _d("log.index.interval.bytes", "int", 4096, "Bytes between offset index entries.", _nonneg),
    _d("log.flush.interval.messages", "long", LONG_MAX, "fsync after this many messages (1 = before every ack).", _pos),
    _d("log.flush.interval.ms", "long", 1000, "fsync at least this often (hightide default 1000; Kafka's is unset).", _nonneg),
    _d("log.message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.",
       (lambda v: v in ("CreateTime", "LogAppendTime"), "must be CreateTime or LogAppendTime")),
    _d("log.cleanup.policy", "list", ("delete",), "delete and/or compact."),
    _d("log.roll.jitter.ms", "long", 0, "Default segment.jitter.ms (accepted and described; hightide rolls without "
       "jitter).", _nonneg),
    _d("log.index.size.max.bytes", "int", 10485760, "Default segment.index.bytes (accepted and described; hightide's "
       "indexes grow as needed).", (lambda v: v >= 8, "must be >= 8")),
    _d("log.segment.delete.delay.ms", "long", 60000, "Default file.delete.delay.ms (accepted and described; hightide "
       "deletes segments at once).", _nonneg),
    _d("log.max.open.files", "int", -1, "hightide: the most partition files (segments, indexes, snapshots, the "
       "metadata log) kept open at once; the least recently used are closed and reopened on demand. -1: half the "
       "open-file limit (RLIMIT_NOFILE, raised to its hard limit at start), at least 256 descriptors left for "
       "connections.", (lambda v: v == -1 or v >= 16, "must be -1 or >= 16")),
    _d("log.preallocate", "bool", False, "Default preallocate (accepted and described; hightide never preallocates)."),
    _d("log.message.timestamp.before.max.ms", "long", LONG_MAX,
       "Default message.timestamp.before.max.ms: oldest CreateTime accepted, relative to now.", _nonneg),
    _d("log.message.timestamp.after.max.ms", "long", LONG_MAX,
       "Default message.timestamp.after.max.ms: furthest future CreateTime accepted.", _nonneg),
    _d("unclean.leader.election.enable", "bool", False,
       "Default unclean.leader.election.enable: let an alive replica outside the ISR lead when no in-sync "
       "replica is alive (acknowledged records can be lost)."),
    _d("unclean.leader.election.interval.ms", "long", 300000,
       "How long after a leaderless partition of a topic allowing unclean election is seen the controller "
       "elects it a leader outside the ISR (elections at fencing are immediate).", _pos),
    _d("auto.leader.rebalance.enable", "bool", True,
       "The controller gives partitions back to their preferred (first) replica once it is in sync again, "
       "leader.imbalance.check.interval.seconds after they are seen led by another."),
    _d("leader.imbalance.check.interval.seconds", "long", 300,
       "How long the controller waits before giving partitions back to their preferred replicas.", _pos),
    _d("log.cleaner.enable", "bool", True, "Run the log cleaner for compacted topics."),
    _d("log.cleaner.backoff.ms", "long", 15000, "Pause between cleaner passes.", _pos),
    _d("log.cleaner.delete.retention.ms", "long", 86400000, "Default delete.retention.ms.", _nonneg),
    _d("log.cleaner.min.compaction.lag.ms", "long", 0, "Default min.compaction.lag.ms.", _nonneg),
    _d("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Default max.compaction.lag.ms (accepted and described; "
       "the cleaner runs by dirty ratio).", _pos),
    _d("log.cleaner.min.cleanable.ratio", "double", 0.5, "Default min.cleanable.dirty.ratio.",
       (lambda v: 0 <= v <= 1, "must be in [0, 1]")),
    _d("compression.type", "string", "producer",
       "producer: batches are stored exactly as the producer compressed them; uncompressed, gzip, snappy, lz4 or "
       "zstd: batches with another codec are recompressed to it.",
       (lambda v: v in COMPRESSION_TYPES, "must be one of [uncompressed, zstd, lz4, snappy, gzip, producer]")),
    _d("compression.gzip.level", "int", -1, "gzip level of recompressed batches (-1 = the codec's default, 6).",
       (lambda v: v == -1 or 1 <= v <= 9, "must be -1 or in [1, 9]")),
    _d("compression.lz4.level", "int", 9, "lz4 level of recompressed batches.",
       (lambda v: 1 <= v <= 17, "must be in [1, 17]")),
    _d("compression.zstd.level", "int", 3, "zstd level of recompressed batches.",
       (lambda v: -131072 <= v <= 22, "must be in [-131072, 22]")),
    _d("min.insync.replicas", "int", 1, "Minimum in-sync replicas for acks=all.", _pos),
    _d("replica.lag.time.max.ms", "long", 30000,
       "A follower that has not caught up with its leader's log end offset for this long is removed from the "
       "ISR (the leader asks the controller with AlterPartition).", _pos),
    _d("offset.metadata.max.bytes", "int", 4096, "Largest offset commit metadata.", _nonneg),
    _d("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets (fixed once created).", _pos),
    _d("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", (lambda v: v >= 14, "must be >= 14")),
    _d("offsets.topic.replication.factor", "int", 3,
       "Replicas of __consumer_offsets when it is created (capped at the brokers registered then, with a "
       "WARNING; Kafka refuses).", _pos),
    _d("offsets.retention.minutes", "int", 10080, "Offsets of groups without members expire after this long.", _pos),
    _d("offsets.retention.check.interval.ms", "long", 600000, "How often expired offsets are removed.", _pos),
    _d("transaction.state.log.num.partitions", "int", 50,
       "Partitions of __transaction_state (fixed once created).", _pos),
    _d("transaction.state.log.replication.factor", "int", 3,
       "Replicas of __transaction_state when it is created (capped at the brokers registered then, with a "
       "WARNING; Kafka refuses).", _pos),
    _d("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state.",
       (lambda v: v >= 14, "must be >= 14")),
    _d("transaction.max.timeout.ms", "int", 900000,
       "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above).", _pos),
    _d("transactional.id.expiration.ms", "int", 604800000,
       "A transactional id without a transaction for this long is removed.", _pos),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
       "How often transactions past their timeout are aborted (and decided ones completed).", _pos),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
       "How often expired transactional ids are removed.", _pos),
    _d("group.initial.rebalance.delay.ms", "int", 3000,
       "How long the first rebalance of an empty classic group waits for more members to join.", _nonneg),
    _d("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a classic group member may ask for.",
       _nonneg),
    _d("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a classic group member may ask for.",
       _nonneg),
    _d("group.max.size", "int", INT_MAX, "Most members a classic group may have.", _pos),
    _d("group.consumer.session.timeout.ms", "int", 45000,
       "A consumer group (KIP-848) member without a heartbeat for this long is fenced.", _pos),
    _d("group.consumer.heartbeat.interval.ms", "int", 5000,
       "How often consumer group (KIP-848) members are told to heartbeat.", _pos),
    _d("group.consumer.min.session.timeout.ms", "int", 45000, "Smallest consumer.session.timeout.ms of a group.", _pos),
    _d("group.consumer.max.session.timeout.ms", "int", 60000, "Largest consumer.session.timeout.ms of a group.", _pos),
    _d("group.consumer.min.heartbeat.interval.ms", "int", 5000, "Smallest consumer.heartbeat.interval.ms of a group.",
       _pos),
    _d("group.consumer.max.heartbeat.interval.ms", "int", 15000, "Largest consumer.heartbeat.interval.ms of a group.",
       _pos),
    # Share groups (KIP-932). The min/max pairs bound the group configs of the same name
    # (share.session.timeout.ms, ...) set with IncrementalAlterConfigs on a GROUP resource.
    _d("group.share.session.timeout.ms", "int", 45000,
       "A share group member without a heartbeat for this long is fenced.", _pos),
    _d("group.share.min.session.timeout.ms", "int", 45000, "Smallest share.session.timeout.ms of a group.", _pos),
    _d("group.share.max.session.timeout.ms", "int", 60000, "Largest share.session.timeout.ms of a group.", _pos),
    _d("group.share.heartbeat.interval.ms", "int", 5000, "How often share group members are told to heartbeat.", _pos),
    _d("group.share.min.heartbeat.interval.ms", "int", 5000, "Smallest share.heartbeat.interval.ms of a group.", _pos),
    _d("group.share.max.heartbeat.interval.ms", "int", 15000, "Largest share.heartbeat.interval.ms of a group.", _pos),
    _d("group.share.max.size", "int", 200, "Most members a share group may have.",
       (lambda v: 1 <= v <= 1000, "must be in [1, 1000]")),
    _d("group.share.max.share.sessions", "int", 2000,
       "Most share sessions (ShareFetch) the broker keeps; more get SHARE_SESSION_LIMIT_REACHED.", _pos),
    _d("group.share.record.lock.duration.ms", "int", 30000,
       "How long a share consumer holds the acquisition lock on a record before it becomes available again.",
       (lambda v: 1000 <= v <= 3600000, "must be in [1000, 3600000]")),
    _d("group.share.min.record.lock.duration.ms", "int", 15000, "Smallest share.record.lock.duration.ms of a group.",
       (lambda v: 1000 <= v <= 30000, "must be in [1000, 30000]")),
    _d("group.share.max.record.lock.duration.ms", "int", 60000, "Largest share.record.lock.duration.ms of a group.",
       (lambda v: 30000 <= v <= 3600000, "must be in [30000, 3600000]")),
    _d("group.share.delivery.count.limit", "int", 5,
       "Deliveries of a record before it is archived (no longer delivered).",
       (lambda v: 2 <= v <= 10, "must be in [2, 10]")),
    _d("group.share.min.delivery.count.limit", "int", 2, "Smallest share.delivery.count.limit of a group.",
       (lambda v: 2 <= v <= 10, "must be in [2, 10]")),
    _d("group.share.max.delivery.count.limit", "int", 10, "Largest share.delivery.count.limit of a group.",
       (lambda v: 2 <= v <= 10, "must be in [2, 10]")),
    _d("group.share.partition.max.record.locks", "int", 2000,
       "Most in-flight (acquired or available below the end of the window) records per share partition.",
       (lambda v: 100 <= v <= 10000, "must be in [100, 10000]")),
    _d("group.share.min.partition.max.record.locks", "int", 100,
       "Smallest share.partition.max.record.locks of a group.", (lambda v: 100 <= v <= 10000, "must be in [100, 10000]")),
    _d("group.share.max.partition.max.record.locks", "int", 10000,
       "Largest share.partition.max.record.locks of a group.", (lambda v: 100 <= v <= 10000, "must be in [100, 10000]")),
    _d("group.share.initialize.retry.interval.ms", "int", 30000,
       "A share-group state initialization not confirmed within this long is asked for again.", _pos),
    _d("group.share.assignors", "list", ("simple",),
       "Server-side assignors of share groups: 'simple' (Kafka's SimpleAssignor, also accepted by its class name) "
       "and hightide's 'backlog' (members in proportion to share lag). The first is every group's default; a group "
       "may pick another listed one with its share.assignor group config.",
       (lambda v: bool(v) and all(share_assignor_name(x) is not None for x in v),
        "must list one or more of: simple, backlog")),
    _d("group.share.backlog.assignor.interval.ms", "int", 15000,
       "The backlog share assignor recomputes a group's assignment because its lag moved at most once per this long.",
       _pos),
    # Share coordinator (share state in __share_group_state).
    _d("share.coordinator.state.topic.replication.factor", "int", 3,
       "Replicas of __share_group_state when it is created (capped at the brokers registered then, with a "
       "WARNING; Kafka refuses).", _pos),
    _d("share.coordinator.state.topic.num.partitions", "int", 50,
       "Partitions of __share_group_state (fixed once created).", _pos),
    _d("share.coordinator.state.topic.segment.bytes", "int", 104857600, "Segment size of __share_group_state.",
       (lambda v: v >= 14, "must be >= 14")),
    _d("share.coordinator.snapshot.update.records.per.snapshot", "int", 500,
       "ShareUpdate records written for a share partition before the next ShareSnapshot.", _nonneg),
    _d("share.coordinator.state.topic.prune.interval.ms", "int", 300000,
       "How often records no longer needed to rebuild share state are deleted from __share_group_state.", _pos),
    _d("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000,
       "A share partition whose last snapshot is older than this is snapshotted again (so pruning advances).", _pos),
    _d("authorizer.class.name", "string", "",
       "The authorizer: empty = none (every request allowed, ACL APIs answer SECURITY_DISABLED); "
       f"{AUTHORIZER_CLASS} (or 'standard') = Kafka's StandardAuthorizer over the ACLs in the metadata log.",
       (lambda v: v in ("", *AUTHORIZER_CLASS_NAMES), f"must be empty or one of {', '.join(AUTHORIZER_CLASS_NAMES)}")),
    _d("super.users", "string", "", "Principals the authorizer allows everything, separated by ';' "
       "(e.g. User:admin;User:ANONYMOUS).", (lambda v: all(":" in s for s in v.split(";") if s.strip()),
                                             "entries must be Type:name, e.g. User:admin")),
    _d("allow.everyone.if.no.acl.found", "bool", False,
       "With an authorizer: allow an action on a resource that has no ACL at all."),
]}

#: Broker configs the listener security (:mod:`hightide.security.settings`) reads as well.
_LISTENER_SECURITY_TOO = frozenset({"sasl.server.max.receive.size"})


def _valid_throttled(v: tuple[str, ...]) -> bool:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""
    return v == ("*",) or all(re.fullmatch(r"[0-9]+:[0-9]+", x) for x in v)


_THROTTLED = (_valid_throttled, "must be the literal '*' or a list of replicas in the following format: "
              "[partitionId]:[brokerId],[partitionId]:[brokerId],...")

# Topic config name -> broker synonym (None: no broker-level synonym).
TOPIC_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    _d("cleanup.policy", "list", ("delete",), synonym="log.cleanup.policy",
       valid=(lambda v: set(v) <= {"delete", "compact"}, "must be a subset of [delete, compact]")),
    _d("compression.gzip.level", "int", -1, synonym="compression.gzip.level",
       valid=(BROKER_CONFIGS["compression.gzip.level"].valid, BROKER_CONFIGS["compression.gzip.level"].valid_doc)),
    _d("compression.lz4.level", "int", 9, synonym="compression.lz4.level",
       valid=(BROKER_CONFIGS["compression.lz4.level"].valid, BROKER_CONFIGS["compression.lz4.level"].valid_doc)),
    _d("compression.type", "string", "producer", synonym="compression.type",
       valid=(BROKER_CONFIGS["compression.type"].valid, BROKER_CONFIGS["compression.type"].valid_doc)),
    _d("compression.zstd.level", "int", 3, synonym="compression.zstd.level",
       valid=(BROKER_CONFIGS["compression.zstd.level"].valid, BROKER_CONFIGS["compression.zstd.level"].valid_doc)),
    _d("delete.retention.ms", "long", 86400000, synonym="log.cleaner.delete.retention.ms", valid=_nonneg),
    _d("file.delete.delay.ms", "long", 60000, synonym="log.segment.delete.delay.ms", valid=_nonneg),
    _d("flush.messages", "long", LONG_MAX, synonym="log.flush.interval.messages", valid=_pos),
    _d("flush.ms", "long", 1000, synonym="log.flush.interval.ms", valid=_nonneg),
    _d("follower.replication.throttled.replicas", "list", (), valid=_THROTTLED),
    _d("index.interval.bytes", "int", 4096, synonym="log.index.interval.bytes", valid=_nonneg),
    _d("leader.replication.throttled.replicas", "list", (), valid=_THROTTLED),
    _d("max.compaction.lag.ms", "long", LONG_MAX, synonym="log.cleaner.max.compaction.lag.ms", valid=_pos),
    _d("max.message.bytes", "int", 1048588, synonym="message.max.bytes", valid=_nonneg),
    _d("message.timestamp.type", "string", "CreateTime", synonym="log.message.timestamp.type",
       valid=(BROKER_CONFIGS["log.message.timestamp.type"].valid, "must be CreateTime or LogAppendTime")),
    _d("message.timestamp.before.max.ms", "long", LONG_MAX, synonym="log.message.timestamp.before.max.ms",
       valid=_nonneg),
    _d("message.timestamp.after.max.ms", "long", LONG_MAX, synonym="log.message.timestamp.after.max.ms",
       valid=_nonneg),
    _d("min.cleanable.dirty.ratio", "double", 0.5, synonym="log.cleaner.min.cleanable.ratio",
       valid=(lambda v: 0 <= v <= 1, "must be in [0, 1]")),
    _d("min.compaction.lag.ms", "long", 0, synonym="log.cleaner.min.compaction.lag.ms", valid=_nonneg),
    _d("min.insync.replicas", "int", 1, synonym="min.insync.replicas", valid=_pos),
    _d("preallocate", "bool", False, synonym="log.preallocate"),
    _d("retention.bytes", "long", -1, synonym="log.retention.bytes", valid=_ms_or_unlimited),
    _d("retention.ms", "long", 604800000, synonym="log.retention.ms", valid=_ms_or_unlimited),
    _d("segment.bytes", "int", 1073741824, synonym="log.segment.bytes", valid=(lambda v: v >= 14, "must be >= 14")),
    _d("segment.index.bytes", "int", 10485760, synonym="log.index.size.max.bytes",
       valid=(lambda v: v >= 8, "must be >= 8")),
    _d("segment.jitter.ms", "long", 0, synonym="log.roll.jitter.ms", valid=_nonneg),
    _d("segment.ms", "long", 604800000, synonym="log.roll.ms", valid=_pos),
    _d("unclean.leader.election.enable", "bool", False, synonym="unclean.leader.election.enable"),
]}

# Legacy broker names folded into the canonical *.ms name (Kafka's precedence: ms > minutes > hours).
_TIME_ALIASES = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 3_600_000),
}
_ALIAS_RANK = {name: rank for rank, name in enumerate(_TIME_ALIASES, 1)}  # minutes before hours


@dataclass
class BrokerConfig:
    """Parsed broker configuration. ``values`` maps Kafka names to parsed values."""

    values: dict[str, Any] = field(default_factory=lambda: {k: d.default for k, d in BROKER_CONFIGS.items()})
    explicit: set[str] = field(default_factory=set)
    #: The static configs as given (file and flags, aliases such as log.retention.hours
    #: under their own name), as Kafka strings: DescribeConfigs' STATIC_BROKER_CONFIG.
    originals: dict[str, str | None] = field(default_factory=dict)
    #: Dynamic broker configs in force (metadata log): cluster default ``""`` and this broker.
    dynamic_default: dict[str, str] = field(default_factory=dict)
    dynamic_broker: dict[str, str] = field(default_factory=dict)
    _static: dict[str, Any] | None = field(default=None, repr=False)
    #: Cluster-mode settings as given (Kafka names: process.roles, listeners, ...);
    #: validated together by :meth:`cluster_settings`.
    cluster_values: dict[str, Any] = field(default_factory=dict)
    #: Listener security settings as given (Kafka names: listener.security.protocol.map,
    #: ssl.*, sasl.*, listener.name.<l>.*); read by :mod:`hightide.security.listeners`.
    security_values: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def set(self, name: str, value: Any) -> None:
        """Set a broker config by Kafka name; raise ConfigError for unknown/invalid."""
        if name in _TIME_ALIASES:
            target, factor = _TIME_ALIASES[name]
            try:
                n = _parse_int(value)
            except ValueError:
                raise ConfigError(f"Invalid value {value!r} for configuration {name}: expected int") from None
            self.originals[name] = str(n)
            if target in self.explicit:
                return  # the *.ms form wins
            # Kafka: a negative retention in any unit means unlimited (-1).
            value, name = (-1 if n < 0 and target == "log.retention.ms" else n * factor), target
        elif name not in BROKER_CONFIGS:
            from .cluster.settings import CLUSTER_CONFIGS  # late: cluster.settings imports this module
            if name in CLUSTER_CONFIGS:
                parsed = CLUSTER_CONFIGS[name].parse(value)
                self.cluster_values[name] = parsed
                self.originals[name] = None if parsed is None else CLUSTER_CONFIGS[name].render(parsed)
                return
            from .security.listeners import is_security_config, sensitive
            if is_security_config(name):  # listeners' TLS/SASL settings: checked by security_settings
                self.security_values[name] = value
                if not sensitive(name):
                    self.originals[name] = str(value)
                return
            raise ConfigError(f"Unknown broker configuration {name!r}"
                              f"{did_you_mean(name, [*BROKER_CONFIGS, *_TIME_ALIASES, *CLUSTER_CONFIGS])}")
        else:
            self.originals[name] = BROKER_CONFIGS[name].render(BROKER_CONFIGS[name].parse(value))
        self.values[name] = BROKER_CONFIGS[name].parse(value)
        self.explicit.add(name)
        if name in _LISTENER_SECURITY_TOO:  # the listeners' security reads it from security_values
            self.security_values[name] = self.values[name]

    def apply_dynamic(self, default: Mapping[str, str], per_broker: Mapping[str, str]) -> None:
        """Put dynamic broker configs in force, in place (every holder of this object sees
        them): this broker's over the cluster default over the static values. Values were
        validated when written; one that no longer parses is ignored (the static value
        stays)."""
        if self._static is None:
            self._static = dict(self.values)
        values = dict(self._static)
        for source in (default, per_broker):
            for name, raw in source.items():
                d = BROKER_CONFIGS.get(name)
                if d is not None:
                    try:
                        values[name] = d.parse(raw)
                    except ConfigError:
                        pass
        self.values = values
        self.dynamic_default, self.dynamic_broker = dict(default), dict(per_broker)

    @classmethod
    def load(cls, toml_path: str | None = None, overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
        cfg = cls()
        items: list[tuple[str, Any, str | None]] = []  # (name, value, the file it came from)
        if toml_path:  # errors from the file name the file
            with open(toml_path, "rb") as f:
                try:
                    items.extend((n, v, toml_path) for n, v in _flatten(tomllib.load(f)))
                except tomllib.TOMLDecodeError as exc:
                    raise ConfigError(f"{toml_path}: invalid TOML: {exc}") from None
        items.extend((n, v, None) for n, v in (overrides or {}).items())
        # *.ms names first so aliases see them as explicit, then minutes before hours.
        for name, value, source in sorted(items, key=lambda kv: _ALIAS_RANK.get(kv[0], 0)):
            try:
                cfg.set(name, value)
            except ConfigError as exc:
                raise ConfigError(f"{source}: {exc}" if source else str(exc)) from None
        return cfg

    def cluster_settings(self) -> "ClusterSettings":
        """The cluster-mode settings (roles, listeners, voters, ...) checked together;
        raises ConfigError naming the setting."""
        from .cluster.settings import ClusterSettings
        return ClusterSettings.from_values(self["node.id"], self.cluster_values)

    def topic_default(self, topic_name: str) -> Any:
        """Default of a topic config: its broker synonym's value, else its own default."""
        d = TOPIC_CONFIGS[topic_name]
        if d.synonym and d.synonym in self.values:
            return self.values[d.synonym]
        return d.default


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_flatten(v, name + "."))
        else:
            out.append((name, v))
    return out


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse topic config overrides; raise ConfigError naming the bad one."""
    parsed = {}
    for name, value in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise ConfigError(f"Unknown topic config name: {name}{did_you_mean(name, TOPIC_CONFIGS)}")
        if value is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}")
        parsed[name] = d.parse(value)
    return parsed


def effective_topic_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, Any]:
    """All topic configs: overrides parsed, the rest from broker synonyms or defaults."""
    out = {name: broker.topic_default(name) for name in TOPIC_CONFIGS}
    out.update(validate_topic_configs(overrides))
    return out


# -- group configs (GROUP resource, type 32, of DescribeConfigs / IncrementalAlterConfigs) ----------
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_iso_duration_ms(text: str) -> int:
    """Milliseconds of a Java ``Duration`` string (``PnDTnHnMn.nS``); ValueError if invalid."""
    m = _ISO_DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    sign = -1 if m.group(1) == "-" else 1
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    frac = m.group(7) or ""
    ms = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000
    if frac:
        part = int(frac.ljust(9, "0")[:3])
        ms += -part if m.group(6).startswith("-") else part
    return sign * ms


def parse_share_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """``share.auto.offset.reset``: ("latest"|"earliest", None) or ("by_duration", ms).
    Raises ValueError with Kafka's message for anything else (or a negative duration)."""
    v = value.strip().lower()
    if v in ("latest", "earliest"):
        return v, None
    if v.startswith("by_duration:"):
        try:
            ms = parse_iso_duration_ms(value.strip()[len("by_duration:"):])
        except ValueError:
            ms = -1
        if ms >= 0:
            return "by_duration", ms
    raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
                     "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


def _valid_reset(v: str) -> bool:
    try:
        parse_share_auto_offset_reset(v)
    except ValueError:
        return False
    return True


#: Kafka's class name of the ``simple`` share group assignor (accepted as an alias).
SIMPLE_SHARE_ASSIGNOR_CLASS = "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"
SHARE_ASSIGNORS = ("simple", "backlog")


def share_assignor_name(value: str) -> str | None:
    """The share group assignor a ``group.share.assignors`` entry or ``share.assignor``
    value names ("simple" or "backlog"), else None."""
    v = value.strip()
    if v == SIMPLE_SHARE_ASSIGNOR_CLASS:
        return "simple"
    return v if v in SHARE_ASSIGNORS else None


def share_assignors(broker: BrokerConfig) -> list[str]:
    """The assignors ``group.share.assignors`` enables, by name, the default first."""
    return [n for v in broker["group.share.assignors"] if (n := share_assignor_name(v)) is not None]


# Group config name -> its broker default (synonym) and the broker configs bounding it.
GROUP_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    _d("consumer.session.timeout.ms", "int", 45000, "Session timeout of this consumer group's (KIP-848) members.",
       _pos, synonym="group.consumer.session.timeout.ms"),
    _d("consumer.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of this consumer group's (KIP-848) members.",
       _pos, synonym="group.consumer.heartbeat.interval.ms"),
    _d("share.session.timeout.ms", "int", 45000, "Session timeout of this share group's members.", _pos,
       synonym="group.share.session.timeout.ms"),
    _d("share.heartbeat.interval.ms", "int", 5000, "Heartbeat interval of this share group's members.", _pos,
       synonym="group.share.heartbeat.interval.ms"),
    _d("share.record.lock.duration.ms", "int", 30000, "Acquisition lock duration of this share group's records.",
       (lambda v: v >= 1000, "must be >= 1000"), synonym="group.share.record.lock.duration.ms"),
    _d("share.delivery.count.limit", "int", 5, "Deliveries of a record before it is archived.", _pos,
       synonym="group.share.delivery.count.limit"),
    _d("share.partition.max.record.locks", "int", 2000, "Most in-flight records per share partition.", _pos,
       synonym="group.share.partition.max.record.locks"),
    _d("share.auto.offset.reset", "string", "latest",
       "Where a share partition starts: earliest, latest or by_duration:<PnDTnHnMn.nS>.",
       (_valid_reset, "must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'")),
    _d("share.isolation.level", "string", "read_uncommitted", "read_committed or read_uncommitted.",
       (lambda v: v in ("read_committed", "read_uncommitted"), "must be read_committed or read_uncommitted")),
    _d("share.assignor", "string", "simple",
       "This share group's assignor (hightide): one of group.share.assignors; default its first.",
       (lambda v: share_assignor_name(v) is not None, "must be simple or backlog")),
]}

# Group config -> (broker min config, broker max config); Kafka's GroupConfig.validateValues.
GROUP_CONFIG_BOUNDS: dict[str, tuple[str, str]] = {
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": ("group.share.min.partition.max.record.locks",
                                         "group.share.max.partition.max.record.locks"),
}


def group_config_default(broker: BrokerConfig, name: str) -> Any:
    """The broker-level default of a group config (its ``group.share.*`` synonym, if any)."""
    if name == "share.assignor":
        return share_assignors(broker)[0]
    d = GROUP_CONFIGS[name]
    return broker[d.synonym] if d.synonym else d.default


def validate_group_configs(broker: BrokerConfig, configs: Mapping[str, str]) -> dict[str, Any]:
    """All group configs of one group, parsed: the overrides in ``configs`` over the
    broker defaults. Raises ConfigError as Kafka's ``GroupConfig.validate`` does: unknown
    name, bad value, an override outside the broker's min/max, a session timeout not
    above the heartbeat interval. (The broker's own defaults are not held to the bounds,
    so a test broker with short timeouts can still take group configs.)"""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise ConfigError(f"Unknown group config name: {name}{did_you_mean(name, GROUP_CONFIGS)}")
    values = {n: GROUP_CONFIGS[n].parse(configs[n]) if n in configs else group_config_default(broker, n)
              for n in GROUP_CONFIGS}
    for name, (lo, hi) in GROUP_CONFIG_BOUNDS.items():
        if name not in configs:
            continue
        if values[name] < broker[lo]:
            raise ConfigError(f"{name} must be greater than or equal to {lo}")
        if values[name] > broker[hi]:
            raise ConfigError(f"{name} must be less than or equal to {hi}")
    if "share.assignor" in configs:
        values["share.assignor"] = share_assignor_name(values["share.assignor"])
        if values["share.assignor"] not in share_assignors(broker):
            raise ConfigError("share.assignor must be one of the assignors in group.share.assignors: "
                              + ", ".join(share_assignors(broker)))
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise ConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
    return values


# -- DescribeConfigs: Kafka's synonyms, sources and dynamic broker configs ---------------------------
# ConfigSource ids (DescribeConfigs v1+).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5

# Broker configs whose names have synonyms, highest priority first (Kafka's
# DynamicBrokerConfig.brokerConfigSynonyms).
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)

# Kafka's static defaults where they differ from the table: the *.ms forms of the time
# configs have no default (null), their hours forms carry it.
_KAFKA_DEFAULT_OVERRIDES: dict[str, str | None] = {
    "log.retention.ms": None, "log.retention.hours": "168",
    "log.roll.ms": None, "log.roll.hours": "168",
    "log.roll.jitter.ms": None, "log.roll.jitter.hours": "0",
}


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker config names that set ``name``, highest priority first (just ``name``
    for most)."""
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def broker_default_strings() -> dict[str, str]:
    """Kafka's DEFAULT_CONFIG level: every broker config with a (non-null) default, as a
    Kafka string."""
    out = {n: d.render(d.default) for n, d in BROKER_CONFIGS.items() if d.default is not None}
    for n, v in _KAFKA_DEFAULT_OVERRIDES.items():
        if v is None:
            out.pop(n, None)
        else:
            out[n] = v
    return {n: v for n, v in out.items() if v is not None}


def config_synonyms(broker: BrokerConfig, name: str) -> list[tuple[str, str | None, int]]:
    """Kafka's ConfigHelper.configSynonyms for broker config ``name``: (name, value,
    source) for each of its synonyms present at each level — dynamic for this broker,
    dynamic cluster default, static, default — in that order, starting at the first entry
    named ``name`` itself (so ``log.retention.ms`` without any value of its own has no
    synonyms: its default lives in ``log.retention.hours``)."""
    names = broker_synonyms(name)
    levels = ((broker.dynamic_broker, DYNAMIC_BROKER_CONFIG),
              (broker.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
              (broker.originals, STATIC_BROKER_CONFIG), (broker_default_strings(), DEFAULT_CONFIG))
    found = [(n, level[n], source) for level, source in levels for n in names if n in level]
    for i, (n, _, _) in enumerate(found):
        if n == name:
            return found[i:]
    return []


#: Broker configs that may be changed at run time (IncrementalAlterConfigs / AlterConfigs
#: on a BROKER resource): the broker synonyms of topic configs and the cleaner's, as Kafka
#: (DynamicLogConfig and LogCleaner reconfigurable configs) — those hightide has.
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {d.synonym for d in TOPIC_CONFIGS.values() if d.synonym in BROKER_CONFIGS}
    | {"message.max.bytes", "log.cleaner.backoff.ms"})


def is_static_broker_config(name: str) -> bool:
    """Whether a dynamic update of broker config ``name`` is refused: a name Kafka knows
    as static (:data:`hightide.kafka_broker_configs.KAFKA_STATIC_BROKER_CONFIGS`), or one
    of hightide's broker configs that it reads only at start-up. Any other name is
    accepted, as Kafka accepts (and keeps) names it does not know."""
    from .kafka_broker_configs import KAFKA_STATIC_BROKER_CONFIGS
    return name in KAFKA_STATIC_BROKER_CONFIGS or (name in BROKER_CONFIGS and name not in DYNAMIC_BROKER_CONFIGS)


def validate_dynamic_broker_configs(configs: Mapping[str, str]) -> None:
    """Check a resource's whole set of dynamic broker configs, as Kafka's
    DynamicBrokerConfig.validateConfigs. Raises ConfigError with Kafka's message for names
    known to be static ("Cannot update these configs dynamically: Set(a, b)"), for the
    key and trust store settings given without a listener prefix, or for an invalid value
    of a dynamic config hightide applies. Other names (``cleanup.policy``, custom ones)
    are accepted and kept without effect, as in Kafka."""
    from .kafka_broker_configs import LISTENER_ONLY
    static = sorted(n for n in configs if is_static_broker_config(n))
    if static:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(static)})")
    listener_only = sorted(n for n in configs if n in LISTENER_ONLY)
    if listener_only:
        raise ConfigError("These security configs can be dynamically updated only per-listener using the "
                          f"listener prefix: Set({', '.join(listener_only)})")
    for name, value in configs.items():
        if name in DYNAMIC_BROKER_CONFIGS:
            BROKER_CONFIGS[name].parse(value)


# -- docs/configuration.md: the tables are generated from the definitions above -------------------
def _doc_default(d: ConfigDef) -> str:
    if d.default == LONG_MAX:
        return "Long.MAX_VALUE"
    text = d.render(d.default)
    return f"`{text}`" if text else '`""`'


def _doc_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_doc_tables() -> str:
    """The Markdown tables of broker, topic and group configs that docs/configuration.md
    carries between its ``config-tables`` markers (a unit test keeps them equal)."""
    lines = ["### Broker configs", "", "| name | type | default | dynamic | description |", "|---|---|---|---|---|"]
    for name, d in sorted(BROKER_CONFIGS.items()):
        valid = f" ({d.valid_doc})" if d.valid_doc else ""
        lines.append(f"| `{name}` | {d.type} | {_doc_default(d)} | {'yes' if name in DYNAMIC_BROKER_CONFIGS else ''}"
                     f" | {_doc_cell(d.doc + valid)} |")
    aliases = ", ".join(f"`{a}` (→ `{t}`)" for a, (t, _) in _TIME_ALIASES.items())
    lines += ["", f"Also accepted in larger units, as in Kafka: {aliases}.", "",
              "### Topic configs", "", "| name | type | default | broker synonym |", "|---|---|---|---|"]
    for name, d in sorted(TOPIC_CONFIGS.items()):
        lines.append(f"| `{name}` | {d.type} | {_doc_default(d)} | {f'`{d.synonym}`' if d.synonym else ''} |")
    lines += ["", "### Group configs", "", "| name | type | default | broker synonym | description |",
              "|---|---|---|---|---|"]
    for name, d in sorted(GROUP_CONFIGS.items()):
        lines.append(f"| `{name}` | {d.type} | {_doc_default(d)} | {f'`{d.synonym}`' if d.synonym else ''} "
                     f"| {_doc_cell(d.doc)} |")
    return "\n".join(lines) + "\n"
