"""Cluster-mode settings (issue 13): Kafka's KRaft config names, parsed and checked
together, and :class:`ClusterSettings`, what the server reads.

The names (``process.roles``, ``node.id``, ``controller.quorum.voters``, ``listeners``,
...) are accepted by :class:`hightide.config.BrokerConfig` (``--set``, the TOML file) and
validated here as a whole, as Kafka's KafkaConfig does. ``process.roles`` defaults to both
roles: the single-node combined mode, which behaves exactly as hightide always has (one
listener from ``--listen``, no registrations, no heartbeats).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..config import ConfigDef, ConfigError, _d, _doc_cell, _doc_default, _nonneg, _pos, did_you_mean
from .raft.voters import VoterNode, VoterSet

_LISTENER = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\s]*):([0-9]{1,5})")
_VOTER = re.compile(r"([0-9]+)@(\[[0-9A-Fa-f:.]+\]|[^:@\s]+):([0-9]{1,5})")
_HOSTPORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^:\s]+):([0-9]{1,5})")


def _all_match(pattern: re.Pattern[str]) -> Callable[[tuple[str, ...]], bool]:
    return lambda v: all(pattern.fullmatch(x) and int(pattern.fullmatch(x).groups()[-1]) <= 65535  # type: ignore[union-attr]
                         for x in v)


CLUSTER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    _d("process.roles", "list", ("broker", "controller"),
       "The roles of this process: broker, controller or both (hightide's default is both, the single-node "
       "combined mode; Kafka's has no default).",
       (lambda v: len(v) > 0 and len(set(v)) == len(v) and set(v) <= {"broker", "controller"},
        "must be a non-empty list of distinct roles among [broker, controller]")),
    _d("controller.quorum.voters", "list", (), "Static voters as id@host:port.",
       (_all_match(_VOTER), "must be a list of {id}@{host}:{port}")),
    _d("controller.quorum.bootstrap.servers", "list", (), "host:port of controllers to discover the quorum from.",
       (_all_match(_HOSTPORT), "must be a list of {host}:{port}")),
    _d("controller.listener.names", "list", (), "Names of the listeners the controller serves on."),
    _d("controller.quorum.election.timeout.ms", "int", 1000,
       "A voter without a leader waits a random time in [t, 2t) before it starts an election.", _pos),
    _d("controller.quorum.fetch.timeout.ms", "int", 2000,
       "A voter that has not fetched from the leader for this long starts an election; a leader that has not "
       "heard a majority fetch within 1.5 times it resigns.", _pos),
    _d("controller.quorum.election.backoff.max.ms", "int", 1000,
       "The longest a voter backs off after a lost election (exponential, randomized).", _pos),
    _d("controller.quorum.request.timeout.ms", "int", 2000,
       "How long a voter waits for another voter's answer before retrying.", _pos),
    _d("controller.quorum.retry.backoff.ms", "int", 20,
       "How long a voter waits before retrying a request whose connection failed.", _nonneg),
    _d("listeners", "list", ("PLAINTEXT://:9092",), "NAME://host:port for each listener.",
       (_all_match(_LISTENER), "must be a list of {name}://{host}:{port}")),
    _d("advertised.listeners", "list", None, "NAME://host:port published to clients (default: listeners).",
       (_all_match(_LISTENER), "must be a list of {name}://{host}:{port}")),
    _d("broker.heartbeat.interval.ms", "int", 2000, "How often a broker heartbeats to the controller.", _pos),
    _d("broker.session.timeout.ms", "int", 9000,
       "A broker without a heartbeat for this long is fenced by the controller.", _pos),
    _d("metadata.max.idle.interval.ms", "int", 500,
       "The controller appends a NoOp record when the metadata log has been idle this long (0 = never).", _nonneg),
    _d("metadata.log.max.record.bytes.between.snapshots", "long", 20 * 1024 * 1024,
       "The controller snapshots its metadata image once this many bytes of records have been committed to the "
       "metadata log since the last snapshot.", _pos),
    _d("metadata.log.max.snapshot.interval.ms", "long", 3_600_000,
       "The controller snapshots its metadata image at least this often while records are committed that no "
       "snapshot holds (0 = only by size).", _nonneg),
    _d("metadata.log.segment.bytes", "int", 1024 * 1024 * 1024,
       "The size of a metadata log segment file; segments wholly below the latest snapshot are deleted.",
       (lambda v: v >= 8 * 1024 * 1024, "must be >= 8388608 (Kafka's minimum)")),
    _d("metadata.read.consistency", "string", "acknowledged",
       "acknowledged: a broker serves metadata only at offsets every unfenced broker has applied (seed 004); "
       "local: its own latest, as Kafka.",
       (lambda v: v in ("acknowledged", "local"), "must be acknowledged or local")),
    _d("metadata.read.max.wait.ms", "int", 2000,
       "hightide: the longest a broker holds a metadata read or a forwarded write for the lowest acknowledged "
       "offset to cover it (acknowledged consistency); past it the broker answers anyway and logs why.", _nonneg),
]}


def validate_cluster_configs(node_id: int, configs: Mapping[str, Any]) -> dict[str, Any]:
    """All cluster-mode configs parsed (``configs`` over the defaults) and checked together
    as Kafka's KafkaConfig does: unique listener names; the controller listener names are
    listeners of a controller and are never advertised; a broker-only process names
    its controller listener and a controller quorum; a controller with static voters is
    one of them. Raises ConfigError naming the setting."""
    for name in configs:
        if name not in CLUSTER_CONFIGS:
            raise ConfigError(f"Unknown cluster configuration {name!r}{did_you_mean(name, CLUSTER_CONFIGS)}")
    v = {n: CLUSTER_CONFIGS[n].parse(configs[n]) if n in configs else d.default for n, d in CLUSTER_CONFIGS.items()}
    roles = set(v["process.roles"])
    names = [x.split("://", 1)[0] for x in v["listeners"]]
    if len(set(names)) != len(names):
        raise ConfigError(f"listeners: each listener must have a different name, listeners: {','.join(v['listeners'])}")
    controller_names = set(v["controller.listener.names"])
    advertised = v["advertised.listeners"]
    if advertised and controller_names & {x.split("://", 1)[0] for x in advertised}:
        raise ConfigError("advertised.listeners must not contain a listener named in controller.listener.names")
    if "controller" in roles and controller_names - set(names):
        raise ConfigError("controller.listener.names must name listeners of this controller: "
                          f"{', '.join(sorted(controller_names - set(names)))} not in listeners")
    if roles == {"broker"}:
        if not controller_names:
            raise ConfigError("controller.listener.names must contain at least one value when running with just "
                              "the broker role")
        if not v["controller.quorum.voters"] and not v["controller.quorum.bootstrap.servers"]:
            raise ConfigError("a broker-only process needs controller.quorum.voters or "
                              "controller.quorum.bootstrap.servers")
    voters = [int(x.split("@", 1)[0]) for x in v["controller.quorum.voters"]]
    if "controller" in roles and voters and node_id not in voters:
        raise ConfigError(f"If process.roles contains controller, the node.id {node_id} must be included in the "
                          "set of voters controller.quorum.voters")
    if roles == {"broker", "controller"} and len(voters) > 1:
        raise ConfigError("controller.quorum.voters: a quorum of more than one voter runs on controller-only "
                          "processes (process.roles=controller); combined mode (broker,controller) is a single voter")
    return v


def cluster_config_doc_table() -> str:
    """The Markdown table of the cluster-mode configs that docs/cluster.md carries."""
    lines = ["| name | type | default | description |", "|---|---|---|---|"]
    for name, d in sorted(CLUSTER_CONFIGS.items()):
        valid = f" ({d.valid_doc})" if d.valid_doc else ""
        default = "null" if d.default is None else _doc_default(d)
        lines.append(f"| `{name}` | {d.type} | {default} | {_doc_cell(d.doc + valid)} |")
    return "\n".join(lines) + "\n"


class Listener(NamedTuple):
    """One listener: ``NAME://host:port`` (an empty host means every address)."""
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


class Voter(NamedTuple):
    node_id: int
    host: str
    port: int


def _host(text: str) -> str:
    return text[1:-1] if text.startswith("[") else text


def parse_listener(text: str) -> Listener:
    m = _LISTENER.fullmatch(text)
    if m is None:
        raise ConfigError(f"invalid listener {text!r}: expected NAME://host:port")
    return Listener(m.group(1), _host(m.group(2)), int(m.group(3)))


def parse_voter(text: str) -> Voter:
    m = _VOTER.fullmatch(text)
    if m is None:
        raise ConfigError(f"invalid voter {text!r}: expected id@host:port")
    return Voter(int(m.group(1)), _host(m.group(2)), int(m.group(3)))


_INITIAL = re.compile(r"([0-9]+)@(\[[0-9A-Fa-f:.]+\]|[^:@\s]+):([0-9]{1,5}):([A-Za-z0-9_-]{22})")


def parse_initial_controllers(text: str, listener_name: str) -> VoterSet:
    """``--initial-controllers`` of ``format`` (Kafka's KIP-853 flag): a comma-separated
    list of ``id@host:port:directory-id``; each voter's endpoint is ``listener_name``.
    Raises ConfigError naming the bad entry (a repeated id too)."""
    nodes: list[VoterNode] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        m = _INITIAL.fullmatch(item)
        if m is None or int(m.group(3)) > 65535:
            raise ConfigError(f"invalid --initial-controllers entry {item!r}: expected id@host:port:directory-id "
                              "(a directory id is 22 characters: `hightide storage random-uuid`)")
        if any(n.node_id == int(m.group(1)) for n in nodes):
            raise ConfigError(f"--initial-controllers names node {m.group(1)} twice")
        nodes.append(VoterNode(int(m.group(1)), m.group(4), ((listener_name, _host(m.group(2)), int(m.group(3))),)))
    if not nodes:
        raise ConfigError("--initial-controllers names no controller")
    return VoterSet.of(nodes)


def parse_hostport(text: str) -> tuple[str, int]:
    m = _HOSTPORT.fullmatch(text)
    if m is None:
        raise ConfigError(f"invalid address {text!r}: expected host:port")
    return _host(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster-mode settings of one process (parsed and validated)."""

    roles: frozenset[str]
    node_id: int
    voters: tuple[Voter, ...] = ()
    bootstrap_servers: tuple[tuple[str, int], ...] = ()
    listeners: tuple[Listener, ...] = ()
    advertised_listeners: tuple[Listener, ...] = ()  # as configured (empty: the listeners)
    controller_listener_names: tuple[str, ...] = ()
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    max_idle_interval_ms: int = 500
    read_consistency: str = "acknowledged"
    read_max_wait_ms: int = 2000
    snapshot_max_bytes: int = 20 * 1024 * 1024
    snapshot_interval_ms: int = 3_600_000
    metadata_segment_bytes: int = 1024 * 1024 * 1024
    #: controller.quorum.{election.timeout,fetch.timeout,election.backoff.max,request.timeout,retry.backoff}.ms
    quorum_timeouts_ms: tuple[int, int, int, int, int] = (1000, 2000, 1000, 2000, 20)

    @classmethod
    def from_values(cls, node_id: int, configs: Mapping[str, Any]) -> ClusterSettings:
        """From raw Kafka-named values (strings or parsed); raises ConfigError naming the
        setting when one is invalid or they do not fit together."""
        v = validate_cluster_configs(node_id, configs)
        return cls(
            roles=frozenset(v["process.roles"]), node_id=node_id,
            voters=tuple(parse_voter(x) for x in v["controller.quorum.voters"]),
            bootstrap_servers=tuple(parse_hostport(x) for x in v["controller.quorum.bootstrap.servers"]),
            listeners=tuple(parse_listener(x) for x in v["listeners"]),
            advertised_listeners=tuple(parse_listener(x) for x in v["advertised.listeners"] or ()),
            controller_listener_names=tuple(v["controller.listener.names"]),
            heartbeat_interval_ms=v["broker.heartbeat.interval.ms"],
            session_timeout_ms=v["broker.session.timeout.ms"],
            max_idle_interval_ms=v["metadata.max.idle.interval.ms"],
            read_consistency=v["metadata.read.consistency"],
            read_max_wait_ms=v["metadata.read.max.wait.ms"],
            snapshot_max_bytes=v["metadata.log.max.record.bytes.between.snapshots"],
            snapshot_interval_ms=v["metadata.log.max.snapshot.interval.ms"],
            metadata_segment_bytes=v["metadata.log.segment.bytes"],
            quorum_timeouts_ms=(v["controller.quorum.election.timeout.ms"], v["controller.quorum.fetch.timeout.ms"],
                                v["controller.quorum.election.backoff.max.ms"],
                                v["controller.quorum.request.timeout.ms"], v["controller.quorum.retry.backoff.ms"]))

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def single_node(self) -> bool:
        """Both roles in one process: hightide's single-node combined mode (no
        registrations, heartbeats or forwarding; one listener from ``--listen``)."""
        return self.is_broker and self.is_controller

    @property
    def dynamic_quorum(self) -> bool:
        """A controller of a dynamic quorum (KIP-853, ``kraft.version`` 1): a
        controller-only process with ``controller.quorum.bootstrap.servers`` and no
        ``controller.quorum.voters``; its voter set is in its metadata log."""
        return self.is_controller and not self.is_broker and not self.voters and bool(self.bootstrap_servers)

    @property
    def formatted_voters(self) -> tuple[int, ...] | None:
        """The voter set this node's data dir is formatted for and records (its
        quorum-state, :mod:`hightide.log.data_dir`): a controller-only process's voter ids
        (itself when it has no static voters: it runs alone; none, ``()``, for a dynamic
        quorum's controller: its log holds them); None on a broker and on the single
        node (its dir records no voter set)."""
        if not self.is_controller or self.is_broker:
            return None
        if self.dynamic_quorum:
            return ()
        return tuple(v.node_id for v in self.voters) or (self.node_id,)

    @property
    def controller_listeners(self) -> tuple[Listener, ...]:
        return tuple(x for x in self.listeners if x.name in self.controller_listener_names)

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        return tuple(x for x in self.listeners if x.name not in self.controller_listener_names)

    def advertised_for(self, listener: Listener, bound_port: int) -> tuple[str, int]:
        """(host, port) published for a broker listener: the advertised listener of the same
        name if configured, else the listener itself (port 0 → the bound port; a wildcard
        or empty host → 127.0.0.1)."""
        for a in self.advertised_listeners:
            if a.name == listener.name:
                return a.host, a.port or bound_port
        host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return host, listener.port or bound_port

    def controller_addresses(self) -> list[tuple[str, int]]:
        """Where a broker looks for the active controller: the static voters, else the
        bootstrap servers."""
        return [(v.host, v.port) for v in self.voters] or list(self.bootstrap_servers)
