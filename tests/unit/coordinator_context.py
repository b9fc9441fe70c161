"""One test context for coordinator shards, in the shape of Kafka's
``OffsetMetadataManagerTestContext`` / ``GroupMetadataManagerTestContext``.

A context drives a sans-IO shard the way the coordinator runtime
(``hightide.coordinator.runtime``) does once an operation's records are committed:
:meth:`CoordinatorContext.run` calls a handler on the shard, :meth:`~CoordinatorContext.apply`
appends its records to a log *through the real byte codec* and replays what reads back
(then the live records, which are never written), collects the answers of parked
requests, :meth:`~CoordinatorContext.advance` moves a fake clock and runs the shard's
timers through the same path, and :meth:`~CoordinatorContext.reload` loads a fresh shard
from the log (start-up). Test modules subclass one of the concrete contexts below and
add their request helpers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from hightide.group.shard import GroupConfig, GroupCoordinatorShard, decode_record, encode_record
from hightide.share.coordinator import ShareCoordinatorConfig, ShareCoordinatorShard
from hightide.share.records import decode_key, decode_value, encode_key, encode_value

S = TypeVar("S")
LIVE = -1  # the "offset" of a live record (never appended)


class CoordinatorContext(Generic[S]):
    """The generic part; subclasses say how to make a shard, encode, decode and replay."""

    def __init__(self, now: int = 1000) -> None:
        self.now = now
        self.log: list[tuple[int, bytes | None, bytes | None]] = []  # (offset, key, value) as stored
        self.answers: dict[int, Any] = {}  # parked requests' answers by handle
        self.shard: S = self.new_shard()

    # -- hooks ----------------------------------------------------------------------------------
    def new_shard(self) -> S:
        raise NotImplementedError

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        raise NotImplementedError

    def decode(self, key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
        raise NotImplementedError

    def replay(self, shard: S, offset: int, key: Any, value: Any) -> None:
        raise NotImplementedError

    def poll(self, shard: S, now: int) -> Any:
        """The shard's timers due at ``now`` (a result, as a request's)."""
        raise NotImplementedError

    def loaded(self, shard: S) -> None:
        """After a reload: arm what the runtime arms (timers)."""

    # -- driving --------------------------------------------------------------------------------
    def apply(self, result: Any) -> Any:
        """Commit ``result``: append its records through the codec, replay what reads back,
        then its live records; keep its completions. Returns its response."""
        for k, v in getattr(result, "records", ()):
            kb, vb = self.encode(k, v)
            offset = len(self.log)
            self.log.append((offset, kb, vb))
            self.replay(self.shard, offset, *self.decode(kb, vb))
        for k, v in getattr(result, "live", ()):
            self.replay(self.shard, LIVE, k, v)
        for handle, response in getattr(result, "completions", ()):
            assert handle not in self.answers, f"handle {handle} answered twice"
            self.answers[handle] = response
        return result.response

    def run(self, call: Callable[[S], Any]) -> Any:
        """``call(shard)`` (a handler), committed: its response."""
        return self.apply(call(self.shard))

    def advance(self, ms: int) -> Any:
        """Move the clock and run the timers due; the timers' response."""
        self.now += ms
        return self.apply(self.poll(self.shard, self.now))

    def reload(self, from_offset: int = 0) -> S:
        """A fresh shard loaded from the log (from ``from_offset``), as at start-up; it
        becomes the context's shard."""
        fresh = self.new_shard()
        for offset, kb, vb in self.log[from_offset:]:
            self.replay(fresh, offset, *self.decode(kb, vb))
        self.loaded(fresh)
        self.shard = fresh
        return fresh


class GroupShardContext(CoordinatorContext[GroupCoordinatorShard]):
    """A :class:`GroupCoordinatorShard` (one ``__consumer_offsets`` partition): classic,
    consumer and share groups and offsets. Member ids are deterministic (``client-1``,
    ``m-2``, ...). :meth:`advance` runs every group kind's timers."""

    def __init__(self, config: GroupConfig | None = None, now: int = 1000, **shard_kw: Any) -> None:
        self.config = config or GroupConfig()
        ids = itertools.count(1)
        self.classic_ids = lambda client: f"{client}-{next(ids)}"
        self.consumer_ids = lambda: f"m-{next(ids)}"
        self.shard_kw = shard_kw
        self.topics: Any = None  # a TopicsView for consumer and share group timers
        super().__init__(now)

    def new_shard(self) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(self.config, self.classic_ids, self.consumer_ids, **self.shard_kw)

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        return encode_record(key, value)

    def decode(self, key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
        record = decode_record(key, value)
        assert record is not None, "a record the shard wrote does not decode"
        return record

    def replay(self, shard: GroupCoordinatorShard, offset: int, key: Any, value: Any) -> None:
        shard.replay(key, value)

    def poll(self, shard: GroupCoordinatorShard, now: int) -> Any:
        result = shard.poll(now)
        if self.topics is not None:
            for more in (shard.consumer_poll(now, self.topics), shard.share_poll(now, self.topics)):
                result.records += more.records
                result.live += more.live
                result.completions += more.completions
        return result

    def loaded(self, shard: GroupCoordinatorShard) -> None:
        for k, v in shard.loaded(self.now).live:
            shard.replay(k, v)


class ShareCoordinatorContext(CoordinatorContext[ShareCoordinatorShard]):
    """A :class:`ShareCoordinatorShard` (one ``__share_group_state`` partition): records
    replay with their offsets."""

    def __init__(self, config: ShareCoordinatorConfig | None = None, now: int = 1000) -> None:
        self.config = config or ShareCoordinatorConfig()
        super().__init__(now)

    def new_shard(self) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(self.config)

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        return encode_key(key), encode_value(value)

    def decode(self, key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
        k = decode_key(key)
        return k, decode_value(k, value)

    def replay(self, shard: ShareCoordinatorShard, offset: int, key: Any, value: Any) -> None:
        shard.replay(offset, key, value)

    def poll(self, shard: ShareCoordinatorShard, now: int) -> Any:
        from hightide.share.coordinator import ShareResult
        return ShareResult(shard.cold_snapshots(now))
