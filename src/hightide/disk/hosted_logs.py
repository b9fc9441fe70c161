"""The partition logs this node hosts, following the metadata image (the part of Kafka's
``LogManager`` above the files: which logs exist here, their configs, retention).

Theory of operation. The metadata image says which partitions this node hosts: those it
leads or holds a replica of (on the single node, every partition). :meth:`HostedLogs.follow_image`
opens the log of each (recovering it from its files) and deletes the logs of partitions
no longer in the image (deleted topics) — never a log only because its partition is led
elsewhere now. A log whose files cannot be opened (out of file descriptors, an I/O
error) is logged once and retried at most once a second from :meth:`partition_log`;
meanwhile its partition answers KAFKA_STORAGE_ERROR (the lookup returns None).

Each log's :class:`~hightide.log.config.LogConfig` is the topic's effective config
(broker defaults, dynamic broker configs from the image, topic overrides):
:meth:`apply_dynamic_broker_configs` and :meth:`refresh_topic_config` put a changed one
in force on the open logs. :meth:`run_retention` applies time and size retention to
every hosted log (:meth:`run_retention_loop`: every ``log.retention.check.interval.ms``),
not before the node acts on its image (``ready``: a broker-only node's topic configs may
be stale until it caught up with the controller).

Built from: ``config`` (the node's :class:`~hightide.config.BrokerConfig`, whose dynamic
part it updates), ``node_id``, ``data_dir`` (reported by DescribeLogDirs), ``logs`` (a
callable returning the open :class:`~hightide.log.manager.LogManager`, or None before
start and after stop: its owner opens and closes it), ``image`` (the current metadata
image), ``ready`` (whether the node acts on that image), ``wake`` (wakes the waiters of a
partition whose log was deleted) and ``clock``. It satisfies
:class:`~hightide.services.PartitionLogs`. The metadata log is not among the hosted logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..cluster.image import MetadataImage, TopicImage
from ..cluster.metadata_log import METADATA_TOPIC
from ..config import BrokerConfig, effective_topic_config
from ..log.config import LogConfig
from ..log.manager import LogManager, TopicPartition
from ..log.partition_log import PartitionLog

log = logging.getLogger("hightide.broker")

#: How long a log that failed to open is left alone before a lookup retries it.
OPEN_RETRY_S = 1.0


class HostedLogs:
    """The partition logs of this node, as the metadata image says (see the module doc)."""

    def __init__(self, *, config: BrokerConfig, node_id: int, data_dir: str,
                 logs: Callable[[], LogManager | None], image: Callable[[], MetadataImage],
                 ready: Callable[[], bool], wake: Callable[[TopicPartition], None],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.node_id = node_id
        #: The absolute path of the data directory: hightide's one log directory.
        self.data_dir = data_dir
        self._logs = logs
        self._image = image
        self._ready = ready
        self._wake = wake
        self.clock = clock
        self._unopened: dict[TopicPartition, float] = {}  # logs that failed to open -> retry time

    def _manager(self) -> LogManager:
        logs = self._logs()
        assert logs is not None, "the partition logs are not open"
        return logs

    def topic_log_config(self, topic: TopicImage) -> LogConfig:
        """The topic's effective log config. Without ``delete`` in ``cleanup.policy``
        (compact-only topics) nothing is ever deleted by time or size, as in Kafka."""
        eff = effective_topic_config(self.config, topic.configs)
        props = {k: str(v) if not isinstance(v, tuple) else ",".join(v) for k, v in eff.items()}
        if "delete" not in eff["cleanup.policy"]:
            props["retention.ms"] = props["retention.bytes"] = "-1"
        return LogConfig.from_kafka(props)

    def follow_image(self, *, delete_removed: bool = True, scan_dir: bool = True,
                     topics: set[str] | None = None) -> None:
        """Open the log of every partition hosted here (this node leads it or holds a
        replica: on the single node, every partition); delete the logs of partitions no
        longer in the image (deleted topics) unless ``delete_removed`` is False (a
        broker-only node's stale local copy at start may lack a topic created since) —
        never a log just because its partition is led elsewhere now. ``scan_dir``: look
        for such logs among the data directory's entries (at start, after a catch-up);
        False: among the open logs and those waiting to be opened (after this node's own
        metadata writes: a listing and a stat per partition at every write would cost
        more than the write at thousands of partitions). ``topics``: only these topics
        changed (:meth:`MetadataImage.take_changes`): the work is that of the change,
        not of every partition (``scan_dir`` does not apply); None: the whole image."""
        if topics is not None:
            self._follow_topics(topics, delete_removed)
            return
        logs = self._manager()
        wanted: dict[TopicPartition, TopicImage] = {}
        existing: set[TopicPartition] = set()
        node = self.node_id
        for t in self._image().topics.values():
            for p, pimg in t.partitions.items():
                existing.add((t.name, p))
                if pimg.leader == node or node in pimg.replicas:
                    wanted[(t.name, p)] = t
        ts = self.clock.now_ms()
        for tp, t in wanted.items():
            plog = logs.get(tp)
            if plog is None:
                self._try_open(tp, t, ts)
        dropped = [tp for tp in self._unopened if tp not in wanted]
        for tp in dropped:
            del self._unopened[tp]  # deleted before it could be opened
        if not delete_removed:
            candidates: list[TopicPartition] = []
        elif scan_dir:
            candidates = logs.existing_dirs()
        else:
            candidates = [tp for tp, _ in logs] + dropped  # a failed open may have left a directory
        self._delete_removed(candidates, existing)

    def _follow_topics(self, topics: set[str], delete_removed: bool) -> None:
        """:meth:`follow_image` for the changed ``topics`` only."""
        logs = self._manager()
        image = self._image()
        node = self.node_id
        ts = self.clock.now_ms()
        existing: set[TopicPartition] = set()
        candidates: list[TopicPartition] = []
        for name in topics:
            t = image.topics.get(name)
            if t is not None:
                for p, pimg in t.partitions.items():
                    tp = (name, p)
                    existing.add(tp)
                    if (pimg.leader == node or node in pimg.replicas) and logs.get(tp) is None:
                        self._try_open(tp, t, ts)
            candidates.extend(logs.open_partitions_of(name))
        dropped = [tp for tp in self._unopened if tp[0] in topics and tp not in existing]
        for tp in dropped:
            del self._unopened[tp]  # deleted before it could be opened
        if delete_removed:
            self._delete_removed(candidates + dropped, existing)

    def _delete_removed(self, candidates: list[TopicPartition], existing: set[TopicPartition]) -> None:
        logs = self._manager()
        for tp in candidates:
            if tp not in existing and tp[0] != METADATA_TOPIC:
                log.info("deleting log of removed topic partition %s-%d", *tp)
                logs.delete(tp)
                self._wake(tp)

    def _try_open(self, tp: TopicPartition, topic: TopicImage, ts: int) -> PartitionLog | None:
        """Open a partition log; if the files cannot be opened (out of file descriptors,
        I/O error) log it and retry at most once every ``OPEN_RETRY_S`` from
        :meth:`partition_log`; meanwhile the partition answers KAFKA_STORAGE_ERROR."""
        try:
            plog = self._manager().open(tp, self.topic_log_config(topic), ts)
        except OSError as exc:
            if tp not in self._unopened:
                log.error("cannot open the log of %s-%d (will retry): %s", *tp, exc)
            self._unopened[tp] = self.clock.monotonic() + OPEN_RETRY_S
            return None
        if self._unopened.pop(tp, None) is not None:
            log.warning("opened the log of %s-%d after earlier failures", *tp)
        return plog

    def apply_dynamic_broker_configs(self) -> None:
        """Put the dynamic broker configs of the metadata image in force (cluster default,
        then this broker's) and refresh every open log's config from them."""
        image = self._image()
        dynamic = image.broker_dynamic
        self.config.apply_dynamic(dynamic.get("", {}), dynamic.get(str(self.node_id), {}))
        if self._logs() is not None:
            for topic in image.topics.values():
                self.refresh_topic_config(topic)

    def refresh_topic_config(self, topic: TopicImage) -> None:
        """Put the topic's effective config (after a change to it) in force on its open logs."""
        cfg = self.topic_log_config(topic)
        logs = self._manager()
        for p in topic.partitions:
            plog = logs.get((topic.name, p))
            if plog is not None:
                plog.config = cfg

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None (not hosted here, unknown, or its files
        cannot be opened: then retried here once its retry time has come)."""
        plog = self._manager().get((topic, partition))
        if plog is None and self._unopened:
            tp = (topic, partition)
            retry_at = self._unopened.get(tp)
            timg = self._image().topics.get(topic)
            if (retry_at is not None and self.clock.monotonic() >= retry_at and timg is not None
                    and partition in timg.partitions):
                plog = self._try_open(tp, timg, self.clock.now_ms())
        return plog

    def hosted_logs(self) -> list[tuple[TopicPartition, PartitionLog]]:
        """Every open partition log here (the metadata log is not among them)."""
        return [(tp, plog) for tp, plog in self._logs() or () if tp[0] != METADATA_TOPIC]

    def run_retention(self) -> None:
        """Apply retention to every partition log (not before a broker-only node caught up
        with the controller: its topic configs may be stale). A log whose retention fails
        is logged; the others go on."""
        logs = self._manager()
        if not self._ready():
            return
        ts = self.clock.now_ms()
        for tp, plog in logs:
            if tp[0] == METADATA_TOPIC:
                continue
            try:
                freed = plog.apply_retention(ts)
                if freed:
                    log.info("retention deleted %d bytes from %s-%d", freed, *tp)
            except OSError:
                log.exception("retention failed for %s-%d", *tp)

    async def run_retention_loop(self) -> None:
        """Forever, on the clock: :meth:`run_retention` every ``log.retention.check.interval.ms``."""
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await self.clock.sleep(interval)
            self.run_retention()
