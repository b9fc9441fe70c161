"""The identity of a data dir: which cluster it belongs to and, on a controller, which
voter set it was formatted for (Kafka's ``kafka-storage format``).

* ``meta.properties`` (Kafka's v1): ``version=1``, ``cluster.id``, ``node.id``,
  ``directory.id``. Written once, atomically and durably (temporary file fsynced, renamed,
  the directory fsynced) through a :class:`~.storage.Storage` engine.
* ``__cluster_metadata-0/quorum-state`` (Kafka's ``QuorumStateData`` v0, JSON) on a
  controller: ``clusterId`` and ``currentVoters`` are its voter set. Formatting writes it
  with epoch 0 and no vote; the Raft shell rewrites it on every election
  (:mod:`hightide.node.quorum_state`). A controller whose dir has no quorum-state was
  not formatted for its voter set: it may follow a leader, never vote or stand for
  election before it has (see :class:`hightide.cluster.raft.RaftCore`'s ``can_vote``).

:func:`check_identity` is what a node checks at start: the data dir's cluster id and
node id, and a controller's recorded voter set (a controller whose log was written
without a quorum-state ran alone: its voter set is itself), against its configuration.
A mismatch is :class:`DataDirMismatch`, one line naming both sides.

**Dynamic quorums** (KIP-853, ``kraft.version`` 1: controllers configured with
``controller.quorum.bootstrap.servers`` and no ``controller.quorum.voters``): the
quorum-state is Kafka's version 1 (no ``currentVoters``, no ``clusterId``) and the voter
set lives in the metadata log — first in the bootstrap checkpoint
``00000000000000000000-0000000000.checkpoint`` that ``format --standalone /
--initial-controllers`` writes (a controller formatted with ``--no-initial-controllers``
has none: it joins as an observer), then in the VotersRecords the leader appends. That
voter set is authoritative: no configuration is compared with it. What is refused is a
mix: a dynamic dir started with static ``controller.quorum.voters``, or a static dir
started as a dynamic controller (a static quorum cannot become dynamic, as in Kafka
3.9). A refused start deletes and rewrites nothing.

Pure: no asyncio, no server imports.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Sequence

from .storage import POSIX, Storage, make_dirs_durable, read_small_file, write_small_file

__all__ = ["DataDirMismatch", "DataDirNotFormatted", "META_PROPERTIES", "METADATA_DIR", "QUORUM_STATE",
           "BOOTSTRAP_CHECKPOINT", "check_identity", "encode_quorum_state", "format_dir", "format_new_dir",
           "is_dynamic_quorum", "new_id", "read_meta_properties", "recorded_voters", "write_meta_properties"]

META_PROPERTIES = "meta.properties"
METADATA_DIR = "__cluster_metadata-0"
QUORUM_STATE = "quorum-state"
QUORUM_STATE_VERSION = 0
#: Kafka's bootstrap checkpoint (snapshot id 0-0) holding a dynamic quorum's initial voters.
BOOTSTRAP_CHECKPOINT = "00000000000000000000-0000000000.checkpoint"


class DataDirMismatch(Exception):
    """The data dir belongs to another cluster, node or voter set than the configuration
    says: the node refuses to start (one line, no traceback)."""


class DataDirNotFormatted(DataDirMismatch):
    """A dir that must be formatted before its node starts (a controller quorum's voter
    with no ``meta.properties``), or must not be formatted again (``hightide storage
    format`` on a formatted dir): one line, no traceback."""


def new_id() -> str:
    """A random id as Kafka prints one (``Uuid.randomUuid()``: URL-safe base64, no padding,
    never starting with ``-``, which command lines would take for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _parse_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def read_meta_properties(data_dir: str, storage: Storage = POSIX) -> dict[str, str]:
    """The data dir's ``meta.properties`` as a dict ({} when there is none)."""
    try:
        raw = read_small_file(storage, os.path.join(data_dir, META_PROPERTIES))
    except FileNotFoundError:
        return {}
    return _parse_properties(raw.decode(errors="replace"))


def write_meta_properties(data_dir: str, cluster_id: str, node_id: int, storage: Storage = POSIX,
                          directory_id: str | None = None) -> dict[str, str]:
    """Write ``meta.properties`` (creating the dir durably if needed): atomic (temporary
    file fsynced, renamed) and durable (the directory fsynced). Returns what was written.
    Raises OSError."""
    make_dirs_durable(storage, data_dir)
    props = {"version": "1", "cluster.id": cluster_id, "node.id": str(node_id),
             "directory.id": directory_id or new_id()}
    write_small_file(storage, os.path.join(data_dir, META_PROPERTIES), "".join(f"{k}={v}\n" for k, v in props.items()))
    storage.fsync_dir(data_dir)
    return props


def encode_quorum_state(cluster_id: str, voters: Sequence[int] | None, epoch: int = 0, voted_for: int = -1,
                        leader_id: int = -1) -> bytes:
    """The quorum-state file's content (Kafka's JSON): ``QuorumStateData`` v0 for a static
    quorum (``voters``), v1 for a dynamic one (``voters`` None: the voter set is in the log)."""
    if voters is None:
        return json.dumps({"leaderId": leader_id, "leaderEpoch": epoch, "votedId": voted_for,
                           "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA", "data_version": 1},
                          separators=(",", ":")).encode()
    return json.dumps({
        "clusterId": cluster_id, "leaderId": leader_id, "leaderEpoch": epoch, "votedId": voted_for,
        "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in sorted(voters)],
        "data_version": QUORUM_STATE_VERSION,
    }, separators=(",", ":")).encode()


def _quorum_state(data_dir: str, storage: Storage) -> dict | None:
    try:
        raw = read_small_file(storage, os.path.join(data_dir, METADATA_DIR, QUORUM_STATE))
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        return doc if isinstance(doc, dict) else {}
    except ValueError:
        return {}  # unreadable: the Raft shell refuses it with its own message


def _has_metadata_records(data_dir: str, storage: Storage) -> bool:
    path = os.path.join(data_dir, METADATA_DIR)
    try:
        names = storage.listdir(path)
    except FileNotFoundError:
        return False
    for name in names:
        if name.endswith(".log") or name.endswith(".checkpoint"):
            f = storage.open(os.path.join(path, name), create=False)
            try:
                if f.size() > 0:
                    return True
            finally:
                f.close()
    return False


def is_dynamic_quorum(data_dir: str, storage: Storage = POSIX) -> bool:
    """True if the controller's dir was formatted for a dynamic quorum (quorum-state v1)."""
    doc = _quorum_state(data_dir, storage)
    return doc is not None and doc.get("data_version") == 1


def recorded_voters(data_dir: str, node_id: int, storage: Storage = POSIX) -> tuple[tuple[int, ...] | None, str]:
    """(voter ids, cluster id) a controller's data dir records: the quorum-state file's
    ``currentVoters`` and ``clusterId``; a metadata log without a quorum-state was written
    by a lone controller (voters: itself); (None, "") when the dir records nothing yet, and
    for a dynamic quorum's dir (its voter set is in its log: :func:`is_dynamic_quorum`)."""
    doc = _quorum_state(data_dir, storage)
    if doc is not None:
        try:
            voters = tuple(sorted(int(v["voterId"]) for v in doc.get("currentVoters") or []))
        except (KeyError, TypeError, ValueError):
            voters = ()
        return voters or None, str(doc.get("clusterId") or "")
    if _has_metadata_records(data_dir, storage):
        return (node_id,), ""
    return None, ""


def format_dir(data_dir: str, *, cluster_id: str, node_id: int, voters: Sequence[int] | None = None,
               storage: Storage = POSIX, dynamic: bool = False, bootstrap: bytes | None = None,
               directory_id: str | None = None) -> None:
    """``kafka-storage format`` for one node: ``meta.properties`` (with ``directory_id``,
    else a new one) and, for a controller (``voters`` given), the initial quorum-state
    (epoch 0, no vote) recording ``voters`` and ``cluster_id``; for a controller of a
    dynamic quorum (``dynamic``) the version 1 quorum-state and, with ``bootstrap``, the
    bootstrap checkpoint's bytes (its initial voters). Raises OSError."""
    write_meta_properties(data_dir, cluster_id, node_id, storage, directory_id)
    if voters is not None or dynamic:
        mdir = os.path.join(data_dir, METADATA_DIR)
        make_dirs_durable(storage, mdir)
        if bootstrap is not None:
            write_small_file(storage, os.path.join(mdir, BOOTSTRAP_CHECKPOINT), bootstrap)
        write_small_file(storage, os.path.join(mdir, QUORUM_STATE),
                         encode_quorum_state(cluster_id, None if dynamic else voters or ()))
        storage.fsync_dir(mdir)


def _ids(voters: Sequence[int]) -> str:
    return ",".join(str(v) for v in sorted(voters))


def check_identity(data_dir: str, *, node_id: int, cluster_id: str | None, voters: Sequence[int] | None,
                   storage: Storage = POSIX, refusing: str = "refusing to start", dynamic: bool = False) -> None:
    """Refuse a data dir that is not this node's: ``meta.properties`` of another node id,
    a cluster id other than ``cluster_id`` (when one is configured), or — on a controller
    (``voters`` given) — a recorded voter set or quorum-state cluster id other than the
    configured one. A controller of a dynamic quorum (``dynamic``) compares no voter
    set (its log's is authoritative) but refuses a static quorum's dir, and a static
    controller refuses a dynamic quorum's dir. Raises :class:`DataDirMismatch` (one line
    naming both sides, ending in ``refusing``)."""
    props = read_meta_properties(data_dir, storage)
    have_cluster = props.get("cluster.id")
    have_node = props.get("node.id")
    if have_node is not None and have_node != str(node_id):
        raise DataDirMismatch(f"data dir {data_dir} belongs to node {have_node} of cluster {have_cluster}; "
                              f"configured node.id is {node_id}: {refusing}")
    if cluster_id is not None and have_cluster is not None and have_cluster != cluster_id:
        raise DataDirMismatch(f"data dir {data_dir} belongs to cluster {have_cluster}; this node is configured "
                              f"for cluster {cluster_id}: {refusing}")
    if voters is None:
        return
    stored, stored_cluster = recorded_voters(data_dir, node_id, storage)
    if is_dynamic_quorum(data_dir, storage):
        if not dynamic:
            raise DataDirMismatch(f"data dir {data_dir} belongs to a dynamic controller quorum (kraft.version 1: its "
                                  f"voter set is in its metadata log); configured static voters are {_ids(voters)}: "
                                  f"{refusing} (set controller.quorum.bootstrap.servers instead of "
                                  "controller.quorum.voters)")
        return
    if dynamic:
        if stored is not None:
            raise DataDirMismatch(f"data dir {data_dir} belongs to a static controller quorum (voters {_ids(stored)}); "
                                  f"this controller is configured for a dynamic quorum "
                                  f"(controller.quorum.bootstrap.servers): {refusing} (a static quorum cannot become "
                                  "dynamic: keep controller.quorum.voters)")
        return
    if stored_cluster and have_cluster is not None and stored_cluster != have_cluster:
        raise DataDirMismatch(f"data dir {data_dir}: its quorum-state belongs to cluster {stored_cluster}, its "
                              f"meta.properties to cluster {have_cluster}: {refusing}")
    if stored is not None and tuple(sorted(stored)) != tuple(sorted(voters)):
        raise DataDirMismatch(f"data dir {data_dir} belongs to cluster {have_cluster or stored_cluster or '?'} with "
                              f"voters {_ids(stored)}; configured voters are {_ids(voters)}: {refusing} "
                              "(the voter set is static: keep controller.quorum.voters, or use new data dirs)")


def format_new_dir(data_dir: str, *, cluster_id: str, node_id: int, voters: Sequence[int] | None,
                   ignore_formatted: bool = False, storage: Storage = POSIX, dynamic: bool = False,
                   bootstrap: bytes | None = None, directory_id: str | None = None) -> str:
    """``hightide storage format`` of one node's dir (Kafka's ``kafka-storage format``):
    a dir without ``meta.properties`` and without a metadata log is formatted
    (:func:`format_dir`: ``voters`` given for a controller). Returns the one line to print.

    Raises :class:`DataDirNotFormatted` for a dir already formatted (unless
    ``ignore_formatted``), and for one holding a metadata log or quorum-state without
    ``meta.properties`` (always: formatting it could make a voter with a log forget its
    vote); with ``ignore_formatted`` a formatted dir is checked as a start checks it
    (:func:`check_identity`: another cluster id, node id or voter set raises
    :class:`DataDirMismatch`) and left as it is. Raises OSError."""
    props = read_meta_properties(data_dir, storage)
    if props:
        have = f"cluster {props.get('cluster.id', '?')}, node {props.get('node.id', '?')}"
        if not ignore_formatted:
            raise DataDirNotFormatted(f"data dir {data_dir} is already formatted ({have}): refusing to format it "
                                      "again (--ignore-formatted leaves a dir of the same cluster as it is)")
        check_identity(data_dir, node_id=node_id, cluster_id=cluster_id, voters=voters, storage=storage,
                       refusing="refusing to format it", dynamic=dynamic)
        unvoted = voters is not None and not dynamic and recorded_voters(data_dir, node_id, storage)[0] is None
        return (f"data dir {data_dir} is already formatted ({have}): left as it is"
                + ("; it records no voter set: it votes once it follows a leader" if unvoted else ""))
    if recorded_voters(data_dir, node_id, storage)[0] is not None or is_dynamic_quorum(data_dir, storage):
        raise DataDirNotFormatted(f"data dir {data_dir} holds a metadata log (or quorum-state) but no "
                                  f"{META_PROPERTIES}: refusing to format it (use an empty dir)")
    format_dir(data_dir, cluster_id=cluster_id, node_id=node_id, voters=voters, storage=storage, dynamic=dynamic,
               bootstrap=bootstrap, directory_id=directory_id)
    if dynamic:
        role = (", dynamic quorum" + ("" if bootstrap is not None else ", no initial voters: joins as an observer"))
    else:
        role = f", voters {_ids(voters)}" if voters is not None else ""
    return f"formatted {data_dir}: cluster {cluster_id}, node {node_id}{role}"
