"""The controller's sans-IO core: validates admin requests against the metadata image
and returns (results, metadata records). It never mutates the image; the runtime
appends the records to the metadata log and then applies them.

Error codes follow Apache Kafka's controller (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_CONFIG, INVALID_TOPIC_EXCEPTION, ...).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..config import (
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    effective_topic_config,
    validate_group_configs,
    validate_topic_configs,
)
from .image import MetadataImage, TopicImage
from .placement import PlacementError, place, usable_brokers
from .replication_control import (
    AlterPartitionAnswer,
    ElectionResult,
    IsrRequest,
    ReassignResult,
    Reassignment,
    alter_partition,
    alter_reassignments,
    elect_leaders,
    list_reassignments,
    unclean_election_enabled,
)
from .records import (
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
)

log = logging.getLogger("hightide.controller")

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
PRODUCER_ID_BLOCK = 1000
# Every partition is a directory with three open files on this node, so a single request
# must not be able to ask for millions of them (Kafka has no such limit; it creates
# partitions asynchronously across a cluster). Documented in docs/compatibility.md.
MAX_PARTITIONS_PER_TOPIC = 10_000
#: The replication factor of each internal topic created with the default (-1): Kafka's
#: configs. Kafka refuses to create one with fewer brokers; hightide caps it at the number
#: of usable brokers and logs a WARNING (so one broker, or a single node, just works).
INTERNAL_REPLICATION_FACTORS = {"__consumer_offsets": "offsets.topic.replication.factor",
                                "__share_group_state": "share.coordinator.state.topic.replication.factor",
                                "__transaction_state": "transaction.state.log.replication.factor"}


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass
class TopicResult:
    name: str
    error_code: ErrorCode = ErrorCode.none
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # overrides as given


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}"
    if not _LEGAL.fullmatch(name):  # match() would let "$" accept a trailing newline
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


class Controller:
    """Validates cluster-metadata changes.

    ``node_ids``: the single node's fixed broker list (``[own id]``: every partition is
    led by this node). None: cluster mode — partitions are placed over the brokers the
    image shows registered, unfenced and not shutting down (:mod:`.placement`), and a
    manual assignment may name any registered broker."""

    def __init__(self, config: BrokerConfig, node_ids: Sequence[int] | None) -> None:
        self.config = config
        self.node_ids = None if node_ids is None else list(node_ids)
        self._start = None if node_ids is None else 0  # a fixed list stripes from its first node

    def usable(self, image: MetadataImage) -> list[int]:
        """The brokers new partitions are placed on."""
        return usable_brokers(image) if self.node_ids is None else self.node_ids

    def _unknown_broker(self, image: MetadataImage, assignments: Iterable[Sequence[int]],
                        first: int = 0, rf: int | None = None) -> str | None:
        """Kafka's INVALID_REPLICA_ASSIGNMENT text for a manual assignment naming a broker
        that is not registered, an empty replica list, a broker listed twice or a replica
        count unlike the other partitions' (``rf``: the existing partitions', for
        CreatePartitions), as Kafka's validateManualPartitionAssignment (or, cluster mode, a
        partition whose replicas are all fenced or shutting down); None when it is valid."""
        known = set(image.brokers) if self.node_ids is None else set(self.node_ids)
        usable = set(self.usable(image))
        for p, reps in enumerate(assignments):
            if not reps:
                return "The manual partition assignment includes an empty replica list."
            previous = None
            for b in sorted(reps):  # Kafka's order of checks: by broker id
                if b not in known:
                    return f"The manual partition assignment includes broker {b}, but no such broker is registered."
                if b == previous:
                    return f"The manual partition assignment includes the broker {b} more than once."
                previous = b
            if rf is not None and len(reps) != rf:
                return (f"The manual partition assignment includes a partition with {len(reps)} replica(s), but this "
                        f"is not consistent with previous partitions, which have {rf} replica(s).")
            rf = len(reps)
            if reps and not usable.intersection(reps):
                return (f"All brokers specified in the manual partition assignment for partition {first + p} "
                        "are fenced or in controlled shutdown.")
        return None

    # -- topics ---------------------------------------------------------------------
    def create_topics(self, image: MetadataImage, topics: Iterable[NewTopic],
                      validate_only: bool = False) -> tuple[list[TopicResult], list[MetadataRecord]]:
        results: list[TopicResult] = []
        records: list[MetadataRecord] = []
        topics = list(topics)
        seen: dict[str, int] = {}
        for t in topics:
            seen[t.name] = seen.get(t.name, 0) + 1
        created: set[str] = set()
        for t in topics:
            if seen[t.name] > 1:
                results.append(TopicResult(t.name, ErrorCode.invalid_request,
                                           f"Found multiple entries for topic {t.name}."))
                continue
            res, recs = self._create_one(image, t, created)
            results.append(res)
            if res.error_code == ErrorCode.none:
                created.add(t.name)
                if not validate_only:
                    records.extend(recs)
        return results, records

    def _create_one(self, image: MetadataImage, t: NewTopic,
                    created: set[str]) -> tuple[TopicResult, list[MetadataRecord]]:
        err = topic_name_error(t.name)
        if err:
            return TopicResult(t.name, ErrorCode.invalid_topic_exception, err), []
        if t.name in image.topics:
            return TopicResult(t.name, ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists."), []
        collision = image.colliding_topic(t.name) or _collision(t.name, created)
        if collision:
            return TopicResult(t.name, ErrorCode.invalid_topic_exception,
                               f"Topic '{t.name}' collides with existing topic: {collision}"), []
        if t.assignments:
            n = len(t.assignments)
            rf = len(next(iter(t.assignments.values())))
            if t.num_partitions != -1 or t.replication_factor != -1:
                return TopicResult(t.name, ErrorCode.invalid_request,
                                   "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                   "Both cannot be used at the same time."), []
            bad = self._unknown_broker(image, [t.assignments[p] for p in sorted(t.assignments)])
            if bad:
                return TopicResult(t.name, ErrorCode.invalid_replica_assignment, bad), []
        else:
            n = self.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
            rf = self._replication_factor(image, t)
        if n <= 0:
            return TopicResult(t.name, ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."), []
        if n > MAX_PARTITIONS_PER_TOPIC:
            return TopicResult(t.name, ErrorCode.invalid_partitions,
                               f"Number of partitions {n} exceeds hightide's limit of {MAX_PARTITIONS_PER_TOPIC} per topic."), []
        if rf <= 0:
            return TopicResult(t.name, ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0, or -1 to use the default value."), []
        try:
            replicas = ([tuple(t.assignments[p]) for p in sorted(t.assignments)] if t.assignments
                        else place(t.name, range(n), rf, self.usable(image), self._start))
        except PlacementError as exc:
            return TopicResult(t.name, ErrorCode.invalid_replication_factor, str(exc)), []
        try:
            validate_topic_configs(t.configs)
        except ConfigError as exc:
            return TopicResult(t.name, ErrorCode.invalid_config, str(exc)), []
        tid = uuid.uuid4()
        recs: list[MetadataRecord] = [TopicRecord(t.name, str(tid))]
        recs += self._partition_records(image, tid, 0, replicas)
        recs += [ConfigRecord(TOPIC_RESOURCE, t.name, k, v) for k, v in sorted(t.configs.items())]
        given = {k: v for k, v in t.configs.items() if v is not None}  # all of them: validated above
        return TopicResult(t.name, ErrorCode.none, None, tid, n, rf, given), recs

    def _replication_factor(self, image: MetadataImage, t: NewTopic) -> int:
        """The requested replication factor, else ``default.replication.factor``, else for
        an internal topic its own config capped at the usable brokers (with a WARNING in
        cluster mode; see :data:`INTERNAL_REPLICATION_FACTORS`)."""
        if t.replication_factor != -1:
            return t.replication_factor
        config = INTERNAL_REPLICATION_FACTORS.get(t.name)
        if config is None:
            return int(self.config["default.replication.factor"])
        wanted, usable = int(self.config[config]), len(self.usable(image))
        if 0 < usable < wanted:
            if self.node_ids is None:
                log.warning("creating %s with replication factor %d: %s=%d, but only %d broker(s) are registered "
                            "and unfenced (Kafka would refuse; it stays at %d replica(s) when more brokers join)",
                            t.name, usable, config, wanted, usable, usable)
            return usable
        return wanted

    def _partition_records(self, image: MetadataImage, tid: uuid.UUID, first: int,
                           replicas: Sequence[tuple[int, ...]]) -> list[MetadataRecord]:
        """Partitions ``first``, ``first + 1``, ... with the given replicas; the ISR is the
        usable replicas (a manual assignment may name fenced ones) and the leader its first
        (Kafka's ``buildPartitionRegistration``)."""
        usable = set(self.usable(image))
        out: list[MetadataRecord] = []
        for i, reps in enumerate(replicas):
            isr = tuple(b for b in reps if b in usable) or tuple(reps)
            out.append(PartitionRecord(str(tid), first + i, isr[0], 0, tuple(reps), isr))
        return out

    def delete_topics(self, image: MetadataImage, names: Iterable[str | None],
                      ids: Iterable[uuid.UUID] = ()) -> tuple[list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]], list[MetadataRecord]]:
        """Results are (name, topic_id, error, message) in request order."""
        out: list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]] = []
        records: list[MetadataRecord] = []
        if not self.config["delete.topic.enable"]:
            off = (ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
            return [(n, None, *off) for n in names] + [(None, i, *off) for i in ids], []
        targets: list[tuple[str | None, uuid.UUID | None, TopicImage | None]] = \
            [(n, None, image.topics.get(n) if n else None) for n in names] + \
            [(None, i, image.topic_by_id(i)) for i in ids]
        done: set[uuid.UUID] = set()
        for name, tid, t in targets:
            if t is None:
                code = ErrorCode.unknown_topic_id if tid is not None else ErrorCode.unknown_topic_or_partition
                out.append((name, tid, code, "This server does not host this topic ID." if tid else
                            "This server does not host this topic-partition."))
                continue
            if t.internal:
                out.append((t.name, t.topic_id, ErrorCode.invalid_request,
                            f"Topic {t.name} is an internal topic and cannot be deleted."))
                continue
            if t.topic_id not in done:
                records.append(RemoveTopicRecord(str(t.topic_id)))
                done.add(t.topic_id)
            out.append((t.name, t.topic_id, ErrorCode.none, None))
        return out, records

    def create_partitions(self, image: MetadataImage, name: str, count: int,
                          assignments: list[list[int]] | None) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
        t = image.topics.get(name)
        if t is None:
            return ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.", []
        cur = len(t.partitions)
        if count > MAX_PARTITIONS_PER_TOPIC:
            return ErrorCode.invalid_partitions, \
                f"Number of partitions {count} exceeds hightide's limit of {MAX_PARTITIONS_PER_TOPIC} per topic.", []
        if count < cur:
            return ErrorCode.invalid_partitions, f"The topic {name} currently has {cur} partition(s); {count} would not be an increase.", []
        if count == cur:
            return ErrorCode.invalid_partitions, f"Topic already has {cur} partition(s).", []
        if assignments is not None and len(assignments) != count - cur:
            return ErrorCode.invalid_replica_assignment, \
                f"Attempted to add {count - cur} additional partition(s), but only {len(assignments)} assignment(s) were specified.", []
        existing_rf = len(next(iter(t.partitions.values())).replicas) if t.partitions else None
        bad = self._unknown_broker(image, assignments or (), cur, existing_rf)
        if bad:
            return ErrorCode.invalid_replica_assignment, bad, []
        rf = len(next(iter(t.partitions.values())).replicas) if t.partitions else 1
        try:
            replicas = ([tuple(a) for a in assignments] if assignments is not None
                        else place(name, range(cur, count), rf, self.usable(image), self._start))
        except PlacementError as exc:
            return ErrorCode.invalid_replication_factor, str(exc), []
        return ErrorCode.none, None, self._partition_records(image, t.topic_id, cur, replicas)

    # -- configs --------------------------------------------------------------------
    def alter_topic_configs(self, image: MetadataImage, name: str,
                            ops: Sequence[tuple[str, int, str | None]]) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
        """IncrementalAlterConfigs on a topic. ops: (name, op, value) with op 0 SET,
        1 DELETE, 2 APPEND, 3 SUBTRACT (list configs only)."""
        t = image.topics.get(name)
        if t is None:
            return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist.", []
        current = dict(t.configs)
        keys = [k for k, _, _ in ops]
        if len(set(keys)) != len(keys):
            return ErrorCode.invalid_request, "Error due to duplicate config keys", []
        for key, op, value in ops:
            d = TOPIC_CONFIGS.get(key)
            if d is None:
                return ErrorCode.invalid_config, f"Unknown topic config name: {key}", []
            if op == 0:
                current[key] = value if value is not None else ""
            elif op == 1:
                current.pop(key, None)
            elif op in (2, 3):
                if d.type != "list":
                    return ErrorCode.invalid_config, f"Config value append/subtract is not allowed for config key {key}", []
                base = list(d.parse(current.get(key, d.render(effective_topic_config(self.config, {})[key]))))
                items = [x.strip() for x in (value or "").split(",") if x.strip()]
                if op == 2:
                    base += [x for x in items if x not in base]
                else:
                    base = [x for x in base if x not in items]
                current[key] = ",".join(base)
            else:
                return ErrorCode.invalid_request, f"Unknown config operation {op}", []
        try:
            validate_topic_configs(current)
        except ConfigError as exc:
            return ErrorCode.invalid_config, str(exc), []
        recs: list[MetadataRecord] = []
        for key in sorted(set(current) | set(t.configs)):
            if current.get(key) != t.configs.get(key):
                recs.append(ConfigRecord(TOPIC_RESOURCE, name, key, current.get(key)))
        return ErrorCode.none, None, recs

    def alter_group_configs(self, image: MetadataImage, group_id: str,
                            ops: Sequence[tuple[str, int, str | None]]) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
        """IncrementalAlterConfigs on a GROUP resource (Kafka's group configs, ``share.*``).
        Only SET (0) and DELETE (1): every group config is a scalar. The resulting
        overrides are validated as a whole against the broker bounds (INVALID_CONFIG)."""
        if not group_id:
            return ErrorCode.invalid_request, "Group id must not be empty", []
        current = dict(image.group_configs.get(group_id, {}))
        keys = [k for k, _, _ in ops]
        if len(set(keys)) != len(keys):
            return ErrorCode.invalid_request, "Error due to duplicate config keys", []
        for key, op, value in ops:
            if key not in GROUP_CONFIGS:
                return ErrorCode.invalid_config, f"Unknown group config name: {key}", []
            if op == 0:
                if value is None:
                    return ErrorCode.invalid_request, f"Null value not supported for : {key}", []
                current[key] = value
            elif op == 1:
                current.pop(key, None)
            elif op in (2, 3):
                return ErrorCode.invalid_config, f"Config value append/subtract is not allowed for config key {key}", []
            else:
                return ErrorCode.invalid_request, f"Unknown config operation {op}", []
        try:
            validate_group_configs(self.config, current)
        except ConfigError as exc:
            return ErrorCode.invalid_config, str(exc), []
        old = image.group_configs.get(group_id, {})
        return ErrorCode.none, None, [ConfigRecord(GROUP_RESOURCE, group_id, key, current.get(key))
                                      for key in sorted(set(current) | set(old)) if current.get(key) != old.get(key)]

    # -- replication (cluster/replication_control.py) ---------------------------------
    def unclean(self, image: MetadataImage) -> Callable[[TopicImage], bool]:
        """Whether a topic allows unclean leader election (``unclean.leader.election.enable``)."""
        default = bool(self.config["unclean.leader.election.enable"])
        return lambda topic: unclean_election_enabled(image, topic, default)

    def known(self, image: MetadataImage) -> set[int]:
        """The brokers a replica assignment may name: registered ones (single node: itself)."""
        return set(image.brokers) if self.node_ids is None else set(self.node_ids)

    def alter_partition(self, image: MetadataImage, broker_id: int, broker_epoch: int,
                        topics: Sequence[tuple[uuid.UUID | None, Sequence[IsrRequest]]],
                        version: int) -> tuple[AlterPartitionAnswer, list[MetadataRecord]]:
        """AlterPartition (56) from a partition leader (see :func:`.replication_control.alter_partition`)."""
        answer, records = alter_partition(image, broker_id, broker_epoch, topics, self.unclean(image), version)
        return answer, list(records)

    def elect_leaders(self, image: MetadataImage, election_type: int,
                      partitions: Sequence[tuple[str, Sequence[int]]] | None
                      ) -> tuple[list[tuple[str, list[ElectionResult]]], list[MetadataRecord]]:
        """ElectLeaders (43); raises ValueError for an unknown election type."""
        results, records = elect_leaders(image, election_type, partitions, self.usable(image))
        return results, list(records)

    def alter_reassignments(self, image: MetadataImage,
                            topics: Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]]
                            ) -> tuple[list[tuple[str, list[ReassignResult]]], list[MetadataRecord]]:
        """AlterPartitionReassignments (45)."""
        results, records = alter_reassignments(image, topics, self.known(image), self.usable(image),
                                               self.unclean(image))
        return results, list(records)

    @staticmethod
    def list_reassignments(image: MetadataImage, topics: Sequence[tuple[str, Sequence[int]]] | None
                           ) -> list[tuple[str, list[Reassignment]]]:
        """ListPartitionReassignments (46)."""
        return list_reassignments(image, topics)

    # -- producer ids ---------------------------------------------------------------
    def allocate_producer_ids(self, image: MetadataImage) -> tuple[int, list[MetadataRecord]]:
        """Reserve a block of producer ids; returns (first id, records)."""
        first = image.next_producer_id
        return first, [ProducerIdsRecord(first + PRODUCER_ID_BLOCK)]


def _collision(name: str, existing: Iterable[str]) -> str | None:
    """A name among ``existing`` (the topics created earlier in the same request, not in
    the image yet: few) that differs from ``name`` only in "." and "_"."""
    norm = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == norm:
            return other
    return None
