"""The ``quorum-state`` file of a controller (Kafka's ``FileQuorumStateStore``).

It holds what a voter must never forget across a crash: the epoch, whom it voted for
in it and the leader it knows. It lives in the ``__cluster_metadata-0`` directory as
JSON with Kafka's field names (version 0 of ``QuorumStateData``)::

    {"clusterId":"k5oQb1cTQ7yL8rPZ2JXw3A","leaderId":3001,"leaderEpoch":4,"votedId":3001,"appliedOffset":0,
     "currentVoters":[{"voterId":3000},{"voterId":3001},{"voterId":3002}],"data_version":0}

It is read and written through the node's :class:`~hightide.log.storage.Storage` engine
(the real disk, or an in-memory one in tests and simulations). Writes are atomic and
durable: the JSON goes to a temporary file, which is fsynced and renamed over
``quorum-state`` (:func:`~hightide.log.storage.write_small_file`), and then the directory
is fsynced, so after a crash the file holds either the old state or the new one, never a
mix and never nothing. :meth:`QuorumStateStore.write` blocks (two fsyncs): the asyncio
shell calls :meth:`QuorumStateStore.awrite`, which runs it on a worker thread, never on
the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence

from ..cluster.raft import ElectionState
from ..log.data_dir import QUORUM_STATE, encode_quorum_state
from ..log.storage import POSIX, Storage, make_dirs_durable, read_small_file, write_small_file

__all__ = ["QuorumStateStore", "QUORUM_STATE_FILE", "QuorumStateError"]

log = logging.getLogger("hightide.raft")

QUORUM_STATE_FILE = QUORUM_STATE


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be read (torn by hand, another format):
    a voter must not guess its vote, so the process refuses to start."""


class QuorumStateStore:
    """The quorum-state file in ``directory`` (on ``storage``) for a quorum of ``voters``
    of cluster ``cluster_id`` (both recorded in every write: the data dir's voter set,
    checked at start by :func:`hightide.log.data_dir.check_identity`). ``dynamic``: a
    dynamic quorum's voter (KIP-853): Kafka's version 1 file, no voter set (it is in the
    log)."""

    def __init__(self, directory: str, voters: Sequence[int], cluster_id: str = "",
                 storage: Storage = POSIX, dynamic: bool = False) -> None:
        self.dynamic = dynamic
        self.directory = directory
        self.path = os.path.join(directory, QUORUM_STATE_FILE)
        self.voters = tuple(sorted(voters))
        self.cluster_id = cluster_id
        self.storage = storage
        self.writes = 0  # completed writes (tests)

    def read(self) -> ElectionState | None:
        """The stored state; None when there is no file yet (a new voter). Raises
        :class:`QuorumStateError` when the file cannot be parsed."""
        try:
            raw = read_small_file(self.storage, self.path)
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
            state = ElectionState(int(doc["leaderEpoch"]), int(doc.get("votedId", -1)),
                                  int(doc.get("leaderId", -1)))
            stored = sorted(int(v["voterId"]) for v in doc.get("currentVoters") or [])
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumStateError(f"cannot read {self.path}: {exc}") from None
        if stored and tuple(stored) != self.voters and not self.dynamic:
            log.warning("%s was written for voters %s; controller.quorum.voters now names %s (static voters must be "
                        "the same on every controller and across restarts)", self.path, stored, list(self.voters))
        return state

    def encode(self, state: ElectionState) -> bytes:
        """The file's content for ``state`` (Kafka's JSON, version 0)."""
        return encode_quorum_state(self.cluster_id, None if self.dynamic else self.voters, state.epoch,
                                   state.voted_for, state.leader_id)

    def write(self, state: ElectionState) -> None:
        """Replace the file with ``state`` atomically and durably (blocking: temporary
        file, fsync, rename, directory fsync). Raises OSError when any step fails; the
        old file is then still in place (and, after a crash, the old state is what a
        restart reads unless the directory fsync completed)."""
        make_dirs_durable(self.storage, self.directory)
        write_small_file(self.storage, self.path, self.encode(state))
        self.storage.fsync_dir(self.directory)
        self.writes += 1

    async def awrite(self, state: ElectionState) -> None:
        """:meth:`write` on a worker thread (the event loop never waits for the disk)."""
        await asyncio.to_thread(self.write, state)
