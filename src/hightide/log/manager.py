"""All partition logs of one data directory (Kafka's LogManager).

Directory names are ``<topic>-<partition>``; a ``.hightide_cleanshutdown`` marker is
written after every log has been flushed and closed, and removed at start-up, so the
next start knows whether full recovery is needed. Every file is reached through the
manager's :class:`~.storage.Storage` engine (POSIX by default).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Iterator

from .config import LogConfig
from .partition_log import PartitionLog
from .storage import POSIX, Storage, make_dirs_durable, remove_tree

CLEAN_SHUTDOWN = ".hightide_cleanshutdown"
log = logging.getLogger("hightide.log")

TopicPartition = tuple[str, int]


def parse_dir_name(name: str) -> TopicPartition | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    def __init__(self, data_dir: str, storage: Storage = POSIX) -> None:
        self.data_dir = data_dir
        self.storage = storage
        make_dirs_durable(storage, data_dir)
        marker = os.path.join(data_dir, CLEAN_SHUTDOWN)
        self.clean_shutdown = storage.exists(marker)
        if self.clean_shutdown:
            storage.unlink(marker)
            storage.fsync_dir(data_dir)  # a crash from now on must not look clean
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self._by_topic: dict[str, set[int]] = {}  # the open logs' partitions by topic
        #: Given to every log put among the open ones as its ``on_dirty``, and called
        #: with it then (the flusher's feed of logs that may need a flush).
        self.on_dirty: Callable[[PartitionLog], None] | None = None

    def existing_dirs(self) -> list[TopicPartition]:
        out = []
        for name in self.storage.listdir(self.data_dir):
            tp = parse_dir_name(name)
            if tp is not None and self.storage.is_dir(os.path.join(self.data_dir, name)):
                out.append(tp)
        return out

    def get(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def open_partitions_of(self, topic: str) -> list[TopicPartition]:
        """The topic-partitions of ``topic`` whose logs are open here."""
        return [(topic, p) for p in self._by_topic.get(topic, ())]

    def add(self, tp: TopicPartition, plog: PartitionLog) -> PartitionLog:
        """Put a log opened elsewhere (:meth:`PartitionLog.open` on a loader thread) among
        the open logs; if one is open for ``tp`` already, that one stays (returned)."""
        current = self.logs.get(tp)
        if current is not None:
            return current
        self.logs[tp] = plog
        self._by_topic.setdefault(tp[0], set()).add(tp[1])
        if self.on_dirty is not None:
            plog.on_dirty = self.on_dirty
            self.on_dirty(plog)  # opened: a recovered or new log may need a flush
        return plog

    def path_of(self, tp: TopicPartition) -> str:
        return os.path.join(self.data_dir, f"{tp[0]}-{tp[1]}")

    def open_detached(self, tp: TopicPartition, config: LogConfig, now_ms: int, *,
                      defer_recovery_flush: bool = False) -> PartitionLog:
        """Open (recovering) or create the log for ``tp`` without putting it among the
        open logs (safe on a loader thread: it touches nothing shared but the storage;
        :meth:`add` it on the owner's thread). ``defer_recovery_flush``: see
        :meth:`PartitionLog.open`."""
        return PartitionLog.open(self.path_of(tp), config, now_ms, clean_shutdown=self.clean_shutdown,
                                 storage=self.storage, defer_recovery_flush=defer_recovery_flush)

    def open(self, tp: TopicPartition, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open (recovering) or create the log for ``tp``."""
        plog = self.logs.get(tp)
        if plog is None:
            plog = self.add(tp, self.open_detached(tp, config, now_ms))
        return plog

    def delete(self, tp: TopicPartition) -> None:
        plog = self.logs.pop(tp, None)
        if plog is not None:
            self._forget(tp)
            plog.delete()
        else:
            remove_tree(self.storage, self.path_of(tp))

    def _forget(self, tp: TopicPartition) -> None:
        parts = self._by_topic.get(tp[0])
        if parts is not None:
            parts.discard(tp[1])
            if not parts:
                del self._by_topic[tp[0]]

    def __iter__(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self.logs.items()))

    def close(self, *, mark_clean: bool = True) -> None:
        """Flush and close every log, then write the clean-shutdown marker (not when
        ``mark_clean`` is False: logs recovered after an unclean stop were left unopened)."""
        failed = not mark_clean
        for tp, plog in list(self.logs.items()):
            try:
                plog.close()
            except OSError:
                failed = True
                log.exception("closing log %s-%d failed", *tp)
        self.logs.clear()
        self._by_topic.clear()
        if not failed:
            self.storage.open(os.path.join(self.data_dir, CLEAN_SHUTDOWN)).close()
            self.storage.fsync_dir(self.data_dir)

    def abandon(self) -> None:
        """Close every log's files without flushing or writing the marker, as a killed
        process would (for tests that simulate a crash in-process)."""
        for plog in self.logs.values():
            plog.abandon()
        self.logs.clear()
        self._by_topic.clear()
