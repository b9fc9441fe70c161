"""Share group membership as the rest of the broker sees it: ``broker.share_groups``.

A thin IO shell over the share groups of the group coordinator shards
(:mod:`hightide.group.share_group`, run by :class:`~.groups.GroupRuntime`):

* :meth:`ShareGroupService.heartbeat` runs a ShareGroupHeartbeat through the runtime and,
  when the heartbeat subscribed to share partitions whose state is not initialized yet,
  initializes it through the share coordinator (``broker.share_state``, the
  :class:`~hightide.share.types.SharePersister`) with start offset -1 and the group
  epoch as state epoch, records the result in the group (ShareGroupStatePartitionMetadata)
  and heartbeats for the member once more, so the member is given the new partitions in
  this very answer (Kafka answers them one heartbeat interval later);
* :meth:`settings`, :meth:`is_member` and :meth:`group_state` implement
  :class:`~hightide.share.types.ShareGroupView` for the share partitions and the admin
  APIs;
* :meth:`delete_state` deletes a group's share-partition state (DeleteGroups);
* a heartbeat of a group whose assignor (``share.assignor``, default the first of
  ``group.share.assignors``) is ``backlog`` carries a snapshot of the group's
  share-partition backlogs (:meth:`backlogs`, from the share-partition manager) into the
  sans-IO group, which decides whether to recompute the assignment.

Group state is read from the coordinator shard, so it is committed state only.

Built from the node's :class:`~.env.CoordinatorEnv` (configs, image), the group
coordinator, the local share coordinator and the persister; the share-partition manager
is set once built (each uses the other).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..config import ConfigError, parse_share_auto_offset_reset, validate_group_configs
from ..group.share_backlog_assignor import NAME as BACKLOG
from ..group.share_backlog_assignor import PartitionBacklog
from ..group.share_group import ShareAssignorInput, ShareGroup, ShareHeartbeatRequest, ShareHeartbeatResponse
from ..protocol.errors import ErrorCode
from ..share.types import ShareGroupSettings, ShareStateKey
from .internal_topic import CoordinatorUnavailable

if TYPE_CHECKING:
    from ..share.types import SharePersister
    from .env import CoordinatorEnv
    from .groups import GroupRuntime
    from .share_partitions import SharePartitionManager
    from .share_state import ShareStateRuntime

log = logging.getLogger("hightide.share.groups")

INIT_WAIT_S = 5.0  # longest a heartbeat waits for another one's state initialization


def _reset(value: str) -> str:
    """``share.auto.offset.reset`` as ShareGroupSettings spells it (validated already):
    "latest", "earliest" or "by_duration:<ISO-8601>"."""
    kind, _ = parse_share_auto_offset_reset(value)
    return kind if kind != "by_duration" else "by_duration:" + value.strip().split(":", 1)[1].strip()


class ShareGroupService:
    """``broker.share_groups``: implements ``share.types.ShareGroupView``. Built from the
    node's :class:`~.env.CoordinatorEnv` (configs, image), the group coordinator
    (``groups``), the local share coordinator (``share_state``: the group's keys) and the
    ``persister`` (the share coordinator wherever it is); ``manager``, the share
    partitions told of departed members and deleted state, is set once built (it is
    built from this service)."""

    def __init__(self, env: CoordinatorEnv, groups: GroupRuntime, share_state: ShareStateRuntime,
                 persister: SharePersister) -> None:
        self.env = env
        self.groups = groups
        self.share_state = share_state
        self.persister = persister
        self.manager: SharePartitionManager | None = None
        self._settings: dict[str, ShareGroupSettings] = {}
        self._assignors: dict[str, str] = {}  # group id -> its share.assignor (built with _settings)
        self._settings_at = -2  # metadata image offset the cache was built at
        self._inflight: dict[str, set[asyncio.Future]] = {}  # group id -> its initializations under way

    # -- ShareGroupView ---------------------------------------------------------------------
    def settings(self, group_id: str) -> ShareGroupSettings:
        """The group's effective settings: its group configs, else the broker defaults."""
        image = self.env.image()
        if image.offset != self._settings_at:
            self._settings, self._settings_at = {}, image.offset
        cached = self._settings.get(group_id)
        if cached is None:
            overrides = image.group_configs.get(group_id, {})
            try:
                v = validate_group_configs(self.env.config, overrides)
            except ConfigError:  # bounds changed since they were set: fall back to the defaults
                v = validate_group_configs(self.env.config, {})
            self._assignors[group_id] = v["share.assignor"]
            cached = self._settings[group_id] = ShareGroupSettings(
                auto_offset_reset=_reset(v["share.auto.offset.reset"]),
                record_lock_duration_ms=v["share.record.lock.duration.ms"],
                delivery_count_limit=v["share.delivery.count.limit"],
                partition_max_record_locks=v["share.partition.max.record.locks"],
                isolation_level=v["share.isolation.level"])
        return cached

    def _group(self, group_id: str) -> ShareGroup | None:
        """The committed share group, or None. Raises CoordinatorUnavailable (e.g. its
        partition is loading)."""
        return self.groups.shard_for(group_id).share.get(group_id)

    def _group_or_none(self, group_id: str) -> ShareGroup | None:
        try:
            return self._group(group_id)
        except CoordinatorUnavailable:
            return None

    def is_member(self, group_id: str, member_id: str) -> bool:
        """True if ``member_id`` is a member of the share group. In cluster mode a broker
        that does not coordinate the group cannot tell (Kafka's share-partition leaders do
        not ask the coordinator either): every member id counts there, and the records a
        departed member held come back when their acquisition locks expire."""
        if self.groups.led_elsewhere(group_id):
            return True
        g = self._group_or_none(group_id)
        return g is not None and member_id in g.members

    def group_state(self, group_id: str) -> str | None:
        """"Empty" or "Stable"; None if there is no share group with this id. Raises
        CoordinatorUnavailable if the group's partition is not available (loading)."""
        g = self._group(group_id)
        return None if g is None else g.state

    def member_ids(self, group_id: str) -> set[str]:
        g = self._group_or_none(group_id)
        return set(g.members) if g is not None else set()

    def assignor(self, group_id: str) -> str:
        """The group's share assignor: its ``share.assignor`` group config, else the
        first of ``group.share.assignors``."""
        self.settings(group_id)
        return self._assignors[group_id]

    def backlogs(self, group_id: str) -> dict[tuple[uuid.UUID, int], PartitionBacklog]:
        """A snapshot of the backlog of every initialized share partition of the group,
        for the backlog assignor (partitions nobody here can tell are left out: the
        assignor weighs them as unknown)."""
        g, manager = self._group_or_none(group_id), self.manager
        if g is None or manager is None:
            return {}
        image, out = self.env.image(), {}
        for tid, parts in g.initialized.items():
            t = image.topic_by_id(tid)
            if t is None:
                continue
            for p in parts:
                b = manager.backlog(ShareStateKey(group_id, tid, p), t.name)
                if b is not None:
                    out[(tid, p)] = b
        return out

    # -- ShareGroupHeartbeat -------------------------------------------------------------------
    async def _run(self, hb: ShareHeartbeatRequest, now_ms: int) -> ShareHeartbeatResponse:
        runtime = self.groups
        session, interval = runtime.share_timeouts(hb.group_id)
        name = self.assignor(hb.group_id)
        choice = ShareAssignorInput(name, self.backlogs(hb.group_id) if name == BACKLOG else {})
        return await runtime.execute(hb.group_id, lambda shard: shard.share_group_heartbeat(
            hb, now_ms, runtime.topics(), session, interval, choice), now_ms)

    async def heartbeat(self, hb: ShareHeartbeatRequest, now_ms: int) -> ShareHeartbeatResponse:
        """One validated heartbeat, with the state initialization it needs (module doc).
        A heartbeat arriving while another one's initialization for the same group is in
        flight waits for it (bounded) and is then answered with the partitions it brought.
        Raises CoordinatorUnavailable if the group's log cannot be written."""
        resp = await self._run(hb, now_ms)
        if resp.error_code == ErrorCode.none and resp.member_epoch < 0:
            # it left: what it holds is freed now; its share session waits (bounded) for
            # the client's final-epoch request, as Kafka's does
            if self.manager is not None:
                self.manager.member_left(hb.group_id, hb.member_id)
        if resp.error_code != ErrorCode.none or resp.member_epoch < 0:
            return resp
        if resp.to_initialize:
            done = asyncio.get_running_loop().create_future()
            self._inflight.setdefault(hb.group_id, set()).add(done)
            try:
                if not await self._initialize(hb.group_id, resp.member_epoch, resp.to_initialize):
                    return resp
            finally:
                done.set_result(None)
                self._inflight[hb.group_id].discard(done)
                if not self._inflight[hb.group_id]:
                    del self._inflight[hb.group_id]
        elif hb.group_id in self._inflight:
            await asyncio.wait(list(self._inflight[hb.group_id]), timeout=INIT_WAIT_S)
        else:
            return resp
        again = await self._run(ShareHeartbeatRequest(hb.group_id, hb.member_id, resp.member_epoch,
                                                      client_id=hb.client_id, client_host=hb.client_host),
                                self.env.clock.now_ms())
        if again.error_code != ErrorCode.none:
            return replace(resp, to_initialize={})
        return replace(again, assignment=again.assignment if again.assignment is not None else resp.assignment,
                       to_initialize={})

    async def _initialize(self, group_id: str, state_epoch: int, parts: dict[uuid.UUID, frozenset[int]]) -> bool:
        """Initialize the share-partition state of ``parts``; record which succeeded.
        True if any did."""
        persister = self.persister  # the share coordinator, on whichever broker leads its partition
        good: dict[uuid.UUID, set[int]] = {}
        bad: dict[uuid.UUID, set[int]] = {}
        for tid, ps in parts.items():
            for p in sorted(ps):
                try:
                    code = await persister.initialize(ShareStateKey(group_id, tid, p), state_epoch, -1)
                except Exception as exc:  # noqa: BLE001  (any share coordinator failure: retry later)
                    log.warning("initializing share state of %s %s-%d failed: %s", group_id, tid, p, exc)
                    code = ErrorCode.unknown_server_error
                (good if code == 0 else bad).setdefault(tid, set()).add(p)
        runtime, now = self.groups, self.env.clock.now_ms()
        for ok, sel in ((True, good), (False, bad)):
            if sel:
                frozen = {t: frozenset(ps) for t, ps in sel.items()}
                await runtime.execute(group_id, lambda shard: shard.share_initialized(
                    group_id, frozen, runtime.topics(), ok), now)  # awaited: frozen/ok cannot change
        if bad:
            log.warning("share group %s: state initialization failed for %s", group_id,
                        {str(t): sorted(ps) for t, ps in bad.items()})
        return bool(good)

    # -- DeleteGroups --------------------------------------------------------------------------
    async def delete_state(self, group_id: str) -> int:
        """Delete the share-partition state of every partition the group may have state
        for (before its records are tombstoned). Returns an error code (0: done)."""
        persister, manager = self.share_state, self.manager
        try:
            g = self._group(group_id)
            keys = set(persister.keys_for_group(group_id))
        except CoordinatorUnavailable as exc:
            return int(exc.error_code)
        if g is not None:
            keys |= {ShareStateKey(group_id, t, p) for t, ps in g.state_partitions().items() for p in ps}
        for key in sorted(keys, key=lambda k: (k.topic_id.bytes, k.partition)):
            code = await self.persister.delete(key)
            if manager is not None:
                manager.invalidate(key)
            if code not in (0, ErrorCode.unknown_topic_or_partition, ErrorCode.group_id_not_found):
                return code
        return 0

    async def state_deleted(self, group_id: str, topic_ids: list[uuid.UUID]) -> None:
        """Call after deleting the share-partition state of these topics for the group
        (DeleteShareGroupOffsets): the group forgets they were initialized, so the next
        heartbeat initializes them again before assigning them (Kafka's behaviour).
        Raises CoordinatorUnavailable if the group's log cannot be written."""
        runtime = self.groups
        await runtime.execute(group_id, lambda shard: shard.share_state_deleted(group_id, topic_ids, runtime.topics()),
                              self.env.clock.now_ms())

    def describe(self, group_id: str) -> dict[str, Any] | None:
        runtime = self.groups
        return runtime.shard_for(group_id).describe_share_group(group_id, runtime.topics())
