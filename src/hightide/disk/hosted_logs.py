"""The partition logs this node hosts, following the metadata image (the part of Kafka's
``LogManager`` above the files: which logs exist here, their configs, retention).

Theory of operation. The metadata image says which partitions this node hosts: those it
leads or holds a replica of (on the single node, every partition). :meth:`HostedLogs.follow_image`
opens the log of each (recovering it from its files) and deletes the logs of partitions
no longer in the image (deleted topics) — never a log only because its partition is led
elsewhere now. A log whose files cannot be opened (out of file descriptors, an I/O
error) is logged once and retried at most once a second from :meth:`partition_log`;
meanwhile its partition answers KAFKA_STORAGE_ERROR (the lookup returns None).

**Loading at start-up** (issue 33; Kafka loads every log before it serves, which at
100,000 partitions is minutes): :meth:`open_at_start` opens the internal topics' logs
(the coordinators load from them) and returns the rest (none when they are fewer than
``BACKGROUND_LOAD_MIN``: those open before the node listens, as in Kafka), which :meth:`load_in_background`
opens after the listeners are up, ``LOAD_BATCH`` at a time on ``LOADER_THREADS`` threads (the
recovery after an unclean stop, and its flush, run there, off the loop), each batch put
among the open logs on the loop and announced through ``on_loaded(topics)`` (the
replica roles follow). Until its log is loaded a partition is :meth:`loading`: the data
handlers answer NOT_LEADER_OR_FOLLOWER, retriable, as Kafka answers for a partition in
the metadata that is not online on the broker yet (``ReplicaManager.getPartitionOrError``);
the metadata image lists it as led here meanwhile. The logs of removed topics are looked
for among the directory's entries once loading is done. :attr:`loaded` says whether
every log was loaded (a stop before that writes no clean-shutdown marker after an
unclean start: the logs not loaded were never recovered).

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

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Executor

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..cluster.image import MetadataImage, TopicImage
from ..cluster.metadata_log import METADATA_TOPIC
from ..config import BrokerConfig, effective_topic_config
from ..log.config import LogConfig
from ..log.manager import LogManager, TopicPartition
from ..log.partition_log import PartitionLog
from ..aio.threads import background_executor

log = logging.getLogger("hightide.broker")

#: How long a log that failed to open is left alone before a lookup retries it.
OPEN_RETRY_S = 1.0
#: Logs opened per loader-thread call at start-up (between two, the loop serves).
LOAD_BATCH = 100
#: Threads opening logs at start-up (a log recovered after an unclean stop is flushed:
#: its fsyncs overlap).
LOADER_THREADS = 4
#: With fewer partitions to load at start-up, all are loaded before the node listens.
BACKGROUND_LOAD_MIN = 2000
#: How long a stop waits for the loader thread's batch in progress.
LOAD_STOP_WAIT_S = 2.0


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
        #: Topics with a log opened after earlier failures since the last :meth:`retry_topics`.
        self._reopened: set[str] = set()
        self._loading: set[TopicPartition] = set()  # logs the start-up loader has still to open
        #: False while the start-up loader has logs left to open (see the module doc).
        self.loaded = True

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
            if plog is None and tp not in self._loading:  # (the loader opens those)
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
        wanted: set[TopicPartition] = set()
        candidates: list[TopicPartition] = []
        for name in topics:
            t = image.topics.get(name)
            if t is not None:
                cfg: LogConfig | None = None  # the topic's, worked out once
                for p, pimg in t.partitions.items():
                    tp = (name, p)
                    existing.add(tp)
                    if pimg.leader == node or node in pimg.replicas:
                        wanted.add(tp)
                        if logs.get(tp) is None and tp not in self._loading:
                            cfg = cfg or self.topic_log_config(t)
                            self._try_open(tp, t, ts, cfg)
            candidates.extend(logs.open_partitions_of(name))
        dropped = [tp for tp in self._unopened if tp[0] in topics and tp not in wanted]
        for tp in dropped:
            del self._unopened[tp]  # deleted or moved away before it could be opened
        if delete_removed:
            self._delete_removed(candidates + dropped, existing)

    def _delete_removed(self, candidates: list[TopicPartition], existing: set[TopicPartition]) -> None:
        logs = self._manager()
        for tp in candidates:
            if tp not in existing and tp[0] != METADATA_TOPIC:
                log.info("deleting log of removed topic partition %s-%d", *tp)
                logs.delete(tp)
                self._wake(tp)

    def open_at_start(self, *, background_min: int = BACKGROUND_LOAD_MIN) -> list[tuple[TopicPartition, TopicImage]]:
        """At start-up: open the logs of the internal topics hosted here now (the
        coordinators load from them); return the other hosted partitions whose logs are
        not open, now :meth:`loading`, for :meth:`load_in_background` — unless there are
        fewer than ``background_min``: then open them now as well (as Kafka, which
        serves once every log is loaded) and return none."""
        logs = self._manager()
        node = self.node_id
        ts = self.clock.now_ms()
        later: list[tuple[TopicPartition, TopicImage]] = []
        for t in self._image().topics.values():
            for p, pimg in t.partitions.items():
                tp = (t.name, p)
                if (pimg.leader == node or node in pimg.replicas) and logs.get(tp) is None:
                    if t.internal:
                        self._try_open(tp, t, ts)
                    else:
                        later.append((tp, t))
        if len(later) < background_min:
            for tp, t in later:
                self._try_open(tp, t, ts)
            later = []
        self._loading = {tp for tp, _ in later}
        self.loaded = not later
        return later

    def loading(self, topic: str, partition: int) -> bool:
        """True while the start-up loader has still to open this partition's log."""
        return bool(self._loading) and (topic, partition) in self._loading

    async def load_in_background(self, pending: list[tuple[TopicPartition, TopicImage]],
                                 on_loaded: Callable[[set[str]], None], *, delete_removed: bool) -> None:
        """Open the logs :meth:`open_at_start` left (``LOAD_BATCH`` per loader-thread call),
        put each batch among the open logs and call ``on_loaded`` with its topics; then,
        with ``delete_removed``, delete the logs of topics no longer in the image (found
        among the directory's entries, listed on the thread). A log that cannot be opened
        is retried as :meth:`partition_log` retries; a partition removed meanwhile is
        closed again. Cancelled (a stop), it waits for the batch in progress (bounded),
        keeps what it opened, and leaves :attr:`loaded` False."""
        loop = asyncio.get_running_loop()
        executor = background_executor(LOADER_THREADS, "hightide-log-loader")
        t0 = self.clock.monotonic()
        try:
            for i in range(0, len(pending), LOAD_BATCH):
                configs: dict[str, LogConfig] = {}  # each topic's, worked out once
                batch = [(tp, configs.get(tp[0]) or configs.setdefault(tp[0], self.topic_log_config(t)))
                         for tp, t in pending[i:i + LOAD_BATCH]]
                job = asyncio.ensure_future(self._open_on_threads(loop, executor, batch))
                try:
                    opened = await asyncio.shield(job)
                except asyncio.CancelledError:
                    done, _ = await asyncio.wait((job,), timeout=LOAD_STOP_WAIT_S)
                    if done and not job.cancelled() and job.exception() is None:
                        self._add_loaded(job.result())
                    raise
                on_loaded(self._add_loaded(opened))
            self.loaded = True
            log.info("loaded the logs of %d partitions in the background in %.1f s", len(pending),
                     self.clock.monotonic() - t0)
            if delete_removed:
                logs = self._manager()
                dirs = await loop.run_in_executor(executor, logs.existing_dirs)
                image = self._image()
                self._delete_removed([tp for tp in dirs if logs.get(tp) is None], {
                    tp for tp in dirs if (t := image.topics.get(tp[0])) is not None and tp[1] in t.partitions})
        finally:
            executor.shutdown(wait=False)

    async def _open_on_threads(self, loop: asyncio.AbstractEventLoop, executor: Executor,
                               batch: list[tuple[TopicPartition, LogConfig]]) -> list[tuple[TopicPartition, PartitionLog | OSError]]:
        """:meth:`_open_batch` on ``LOADER_THREADS`` threads at once (a recovered log's
        flush waits on fsyncs, which release the GIL), share i holding logs i mod n."""
        n = min(LOADER_THREADS, len(batch))
        now = self.clock.now_ms()
        shares = await asyncio.gather(*(loop.run_in_executor(executor, self._open_batch, batch[i::n], now)
                                        for i in range(n)))
        opened = [result for share in shares for result in share]
        recovered = [i for i, (_, result) in enumerate(opened)
                     if isinstance(result, PartitionLog) and result.recovery_flush_pending]
        if recovered:
            # the recovery flushes of the batch: one sync(2) writes everything back at once,
            # then each log's flush (its fsyncs find little left to write) runs as before
            await loop.run_in_executor(executor, os.sync)
            m = min(LOADER_THREADS, len(recovered))
            flushed = await asyncio.gather(*(loop.run_in_executor(
                executor, self._flush_recovered, [opened[i] for i in recovered[k::m]], now) for k in range(m)))
            for k in range(m):
                for i, result in zip(recovered[k::m], flushed[k]):
                    opened[i] = result
        return opened

    @staticmethod
    def _flush_recovered(logs: list[tuple[TopicPartition, PartitionLog | OSError]],
                         now_ms: int) -> list[tuple[TopicPartition, PartitionLog | OSError]]:
        """(On a loader thread.) The recovery flush of each log (see
        :meth:`PartitionLog.open`); a log whose flush fails is closed and given as its error."""
        out: list[tuple[TopicPartition, PartitionLog | OSError]] = []
        for tp, plog in logs:
            assert isinstance(plog, PartitionLog)
            try:
                plog.flush(now_ms)
                out.append((tp, plog))
            except OSError as exc:
                plog.abandon()
                out.append((tp, exc))
        return out

    def _open_batch(self, batch: list[tuple[TopicPartition, LogConfig]],
                    now_ms: int) -> list[tuple[TopicPartition, PartitionLog | OSError]]:
        """(On the loader thread.) Open each log, or the OSError that kept it closed."""
        logs = self._manager()
        out: list[tuple[TopicPartition, PartitionLog | OSError]] = []
        for tp, cfg in batch:
            try:
                out.append((tp, logs.open_detached(tp, cfg, now_ms, defer_recovery_flush=True)))
            except OSError as exc:
                out.append((tp, exc))
        return out

    def _add_loaded(self, opened: list[tuple[TopicPartition, PartitionLog | OSError]]) -> set[str]:
        """(On the loop.) Put the loaded logs among the open ones; the topics they belong to."""
        logs = self._logs()
        image = self._image()
        topics: set[str] = set()
        for tp, result in opened:
            self._loading.discard(tp)
            if isinstance(result, OSError):
                log.error("cannot open the log of %s-%d (will retry): %s", *tp, result)
                self._unopened[tp] = self.clock.monotonic() + OPEN_RETRY_S
                continue
            t = image.topics.get(tp[0])
            if logs is None or t is None or tp[1] not in t.partitions:
                result.abandon()  # removed meanwhile (its directory goes with the removed ones)
                continue
            if logs.add(tp, result) is not result:
                result.abandon()  # opened meanwhile by a metadata change
            topics.add(tp[0])
        return topics

    def _try_open(self, tp: TopicPartition, topic: TopicImage, ts: int,
                  config: LogConfig | None = None) -> PartitionLog | None:
        """Open a partition log; if the files cannot be opened (out of file descriptors,
        I/O error) log it and retry at most once every ``OPEN_RETRY_S`` from
        :meth:`partition_log`; meanwhile the partition answers KAFKA_STORAGE_ERROR."""
        try:
            plog = self._manager().open(tp, config or self.topic_log_config(topic), ts)
        except OSError as exc:
            if tp not in self._unopened:
                log.error("cannot open the log of %s-%d (will retry): %s", *tp, exc)
            self._unopened[tp] = self.clock.monotonic() + OPEN_RETRY_S
            return None
        if self._unopened.pop(tp, None) is not None:
            log.warning("opened the log of %s-%d after earlier failures", *tp)
            self._reopened.add(tp[0])
        return plog

    def retry_topics(self) -> set[str]:
        """The topics a follower of metadata changes looks at after any change, besides
        those the change touched: those with a log that failed to open (retried then), and
        those with a log opened after earlier failures since the last call (by
        :meth:`partition_log`: its replica role is still to be put in force). Few: empty
        unless opening logs failed."""
        reopened, self._reopened = self._reopened, set()
        return reopened | {tp[0] for tp in self._unopened}

    def apply_dynamic_broker_configs(self) -> None:
        """Put the dynamic broker configs of the metadata image in force (cluster default,
        then this broker's) and refresh every open log's config from them."""
        image = self._image()
        dynamic = image.broker_dynamic
        self.config.apply_dynamic(dynamic.get("", {}), dynamic.get(str(self.node_id), {}))
        if self._logs() is not None:
            for topic in image.topics.values():
                self.refresh_topic_config(topic)

    def refresh_topic_configs(self, topics: Iterable[str]) -> None:
        """:meth:`refresh_topic_config` for each of ``topics`` still in the image (after a
        change that touched them only: the broker's configs did not change)."""
        if self._logs() is not None:
            image = self._image()
            for name in topics:
                topic = image.topics.get(name)
                if topic is not None:
                    self.refresh_topic_config(topic)

    def refresh_topic_config(self, topic: TopicImage) -> None:
        """Put the topic's effective config (after a change to it) in force on its open logs."""
        logs = self._manager()
        cfg: LogConfig | None = None  # worked out once a log of the topic is open (none at start-up)
        for p in topic.partitions:
            plog = logs.get((topic.name, p))
            if plog is not None:
                cfg = cfg or self.topic_log_config(topic)
                plog.config = cfg

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None (not hosted here, unknown, or its files
        cannot be opened: then retried here once its retry time has come)."""
        plog = self._manager().get((topic, partition))
        if plog is None and self._unopened and (topic, partition) not in self._loading:
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
