"""The voter set of the quorum (KIP-853, Kafka's ``VoterSet``), kept in the log.

With ``kraft.version`` 0 (a static quorum) the voter set is ``controller.quorum.voters``
and never changes. With ``kraft.version`` 1 the voter set is a control entry in the log
(Kafka's ``VotersRecord``, next to a ``KRaftVersionRecord``): the latest one in the log —
committed or not — is the set a replica uses, the bootstrap set (from the formatted data
dir) only until the log holds one. A change adds or removes exactly one voter, so any
majority of the old set and any majority of the new one share a voter.

A :class:`VoterNode` is a replica key (node id and directory id, Kafka's ``ReplicaKey``)
with the endpoints its controller listeners are reached at. The core reads voter sets
from entries through :attr:`~.config.RaftConfig.read_voters` and writes them through
:attr:`~.config.RaftConfig.voters_payload`; :func:`voters_payload` / :func:`read_voters`
here are the small text form the simulator and unit tests use (production: Kafka's
control records, :mod:`.batches`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

__all__ = ["VoterNode", "VoterSet", "voters_payload", "read_voters", "Endpoint"]

#: (listener name, host, port).
Endpoint = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class VoterNode:
    """One voter: ``node_id``, ``directory_id`` (its metadata log dir's ``directory.id``,
    Kafka's Uuid text; "" when unknown: a static voter) and ``endpoints``."""

    node_id: int
    directory_id: str = ""
    endpoints: tuple[Endpoint, ...] = ()

    def matches(self, node_id: int, directory_id: str) -> bool:
        """Kafka's ReplicaKey match: same id, and the same directory id when both know one."""
        return self.node_id == node_id and (not self.directory_id or not directory_id
                                            or self.directory_id == directory_id)


@dataclass(frozen=True, slots=True)
class VoterSet:
    """The voters, sorted by node id (ids are unique)."""

    nodes: tuple[VoterNode, ...]

    @classmethod
    def of(cls, voters: Iterable[int | VoterNode]) -> VoterSet:
        nodes = {(v if isinstance(v, VoterNode) else VoterNode(v)).node_id:
                 (v if isinstance(v, VoterNode) else VoterNode(v)) for v in voters}
        return cls(tuple(nodes[i] for i in sorted(nodes)))

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(n.node_id for n in self.nodes)

    def get(self, node_id: int) -> VoterNode | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)

    def adding(self, node: VoterNode) -> VoterSet:
        """This set with ``node`` (ValueError if its id is a voter already)."""
        if self.get(node.node_id) is not None:
            raise ValueError(f"node {node.node_id} is a voter already")
        return VoterSet.of((*self.nodes, node))

    def removing(self, node_id: int) -> VoterSet:
        """This set without ``node_id`` (ValueError if it is not a voter, or is the last)."""
        if self.get(node_id) is None:
            raise ValueError(f"node {node_id} is not a voter")
        if len(self.nodes) == 1:
            raise ValueError("the last voter cannot be removed")
        return VoterSet(tuple(n for n in self.nodes if n.node_id != node_id))

    def with_endpoints(self, node_id: int, endpoints: tuple[Endpoint, ...], directory_id: str = "") -> VoterSet:
        """The same set with ``node_id``'s endpoints (and directory id, if given) replaced."""
        return VoterSet(tuple(replace(n, endpoints=endpoints, directory_id=directory_id or n.directory_id)
                              if n.node_id == node_id else n for n in self.nodes))

    def one_change_from(self, other: VoterSet) -> bool:
        """True if this set and ``other`` differ by exactly one voter added or removed
        (or not at all in their ids)."""
        a, b = set(self.ids), set(other.ids)
        return len(a ^ b) <= 1


_MARK = b"#voters "


def voters_payload(voters: VoterSet) -> bytes:
    """The text form of a voter-set entry (simulator, unit tests)."""
    return _MARK + json.dumps([[n.node_id, n.directory_id, [list(e) for e in n.endpoints]]
                               for n in voters.nodes]).encode()


def read_voters(data: bytes) -> VoterSet | None:
    """The last voter set written in ``data`` by :func:`voters_payload` (an entry's payload,
    or a snapshot holding several entries); None if it holds none."""
    i = data.rfind(_MARK)
    if i < 0:
        return None
    doc, _ = json.JSONDecoder().raw_decode(data[i + len(_MARK):].decode())
    return VoterSet.of(VoterNode(int(v[0]), str(v[1]), tuple((str(e[0]), str(e[1]), int(e[2])) for e in v[2]))
                       for v in doc)
