"""Forwarding metadata writes from a broker-only node to the active controller (Kafka's
``ForwardingManager``), and the broker's remote metadata writes.

Theory of operation
-------------------
* **Forwarded APIs** (:data:`FORWARDED`: CreateTopics, DeleteTopics, CreatePartitions,
  AlterConfigs, IncrementalAlterConfigs, UpdateFeatures, CreateAcls, DeleteAcls,
  AlterUserScramCredentials, AlterClientQuotas, UnregisterBroker, and DescribeQuorum): the broker's route of each is
  replaced by :meth:`Forwarder.forward`. The client's request (header with its
  correlation id and client id, then the body, re-encoded from the decoded request) goes
  to the controller inside an Envelope (58) with the client's address; the controller
  runs it and returns the inner response (its header and body) in the EnvelopeResponse,
  plus hightide's tag 10000 ``MetadataOffset``: the metadata offset that covers the
  write. The broker holds the answer until the read gate says every unfenced broker has
  applied that offset (``acknowledged``; see :mod:`.read_gate`), then sends the inner
  response to the client unchanged. Tagged fields of the client's request that kio does
  not know are not forwarded.
* **Failover** (Kafka's ForwardingManager over the NodeToControllerChannelManager):
  the Envelope goes to the active controller the channel knows. An answer NOT_CONTROLLER
  — the Envelope's own error code, as Kafka's controllers answer, or any error code of
  the inner response — means the voter processed nothing: the Envelope is sent again to
  the next candidate (the leader hint, else the voters in turn) until the request's
  timeout. A request that never left (no connection) is retried likewise. A request
  whose outcome is unknown — the connection broke while it was in flight, or no answer
  came in time — is **never sent again** (it may have been applied): the client gets the
  API's error response with ``REQUEST_TIMED_OUT`` (retriable) for every item, as Kafka's
  forwarding answers a timeout. With no active controller until the timeout, likewise;
  any other Envelope error is answered with that error code.
* **Deadline**: every forwarded request is answered by its deadline, counted from when
  the handler starts: the request's ``timeout`` field (CreateTopics, DeleteTopics,
  CreatePartitions, ...; at least 1 s), else :data:`DEFAULT_TIMEOUT_MS` (30 s, Kafka's
  ``controller.socket.timeout.ms`` that bounds a forwarded request in flight). It covers
  waiting for a connection (another caller's attempt, the backoff, the handshake), every
  NOT_CONTROLLER re-send and the read gate: a write answered by the controller but not
  yet covered at the gate is answered at the deadline with the controller's answer, as
  after ``metadata.read.max.wait.ms``.
* **Remote writes** (:class:`RemoteMetadataWrites`): what a broker writes for itself —
  topics auto-created by Metadata and the coordinators' internal topics (a CreateTopics
  in an Envelope, so the answer carries MetadataOffset and the broker can wait until its
  own image shows the topics), and producer-id blocks (AllocateProducerIds, 67).
* **ApiVersions**: :meth:`Forwarder.narrow` intersects the broker's versions of the
  forwarded APIs with the controller's (an API the controller lacks is not advertised);
  before the controller's versions are known the broker's own are advertised (Kafka's
  ``ApiVersionManager`` does the same).
"""

from __future__ import annotations

import ipaddress
import logging
import struct
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ..client.connection import decode_response
from ..client.errors import KafkaError, KafkaTimeoutError
from ..cluster.controller import NewTopic, TopicResult
from ..protocol.build import materialize
from ..protocol.codec import encode_request, request_schema, response_schema
from ..protocol.errors import ErrorCode
from ..protocol.views import opt
from ..security.principal import serialize_principal
from ..services import CoordinatorLoadInProgress, CoordinatorUnavailable
from .controller_channel import NOT_CONTROLLER, ControllerChannel, ControllerUnavailable
from .read_gate import ReadGate

if TYPE_CHECKING:
    from ..protocol.views.alter_client_quotas import AlterClientQuotasRequest
    from ..protocol.views.alter_configs import AlterConfigsRequest
    from ..protocol.views.alter_partition_reassignments import AlterPartitionReassignmentsRequest
    from ..protocol.views.alter_user_scram_credentials import AlterUserScramCredentialsRequest
    from ..protocol.views.create_acls import CreateAclsRequest
    from ..protocol.views.create_partitions import CreatePartitionsRequest
    from ..protocol.views.create_topics import CreateTopicsRequest
    from ..protocol.views.delete_acls import DeleteAclsRequest
    from ..protocol.views.delete_topics import DeleteTopicsRequest
    from ..protocol.views.elect_leaders import ElectLeadersRequest
    from ..protocol.views.incremental_alter_configs import IncrementalAlterConfigsRequest

log = logging.getLogger("hightide.forwarding")

#: The one table of forwarded APIs (api key → name): what a broker-only node forwards, as
#: Kafka's brokers do, and what a controller runs from an Envelope (Kafka's forwardable
#: APIs that hightide's controller serves; ``server/handlers/envelope.py`` reads this
#: table): the metadata writes (CreateTopics, DeleteTopics, CreatePartitions, the config
#: and ACL writes, AlterUserScramCredentials, AlterClientQuotas, UpdateFeatures, ElectLeaders, the
#: partition reassignments, UnregisterBroker), DescribeQuorum (only the controller knows the quorum, so
#: ``kafka-metadata-quorum --bootstrap-server`` sees the controller's) and AddRaftVoter / RemoveRaftVoter
#: (KIP-853: the active controller changes the voter set).
FORWARDED = {19: "CreateTopics", 20: "DeleteTopics", 30: "CreateAcls", 31: "DeleteAcls", 33: "AlterConfigs",
             37: "CreatePartitions", 43: "ElectLeaders", 44: "IncrementalAlterConfigs",
             45: "AlterPartitionReassignments", 46: "ListPartitionReassignments", 51: "AlterUserScramCredentials",
             49: "AlterClientQuotas", 55: "DescribeQuorum", 57: "UpdateFeatures", 64: "UnregisterBroker",
             80: "AddRaftVoter", 81: "RemoveRaftVoter"}
ENVELOPE_KEY = 58
TAG_METADATA_OFFSET = 10000
#: The deadline of a forwarded request whose API has no timeout field (IncrementalAlterConfigs,
#: CreateAcls, ...): Kafka's controller.socket.timeout.ms (30 s), which bounds a forwarded
#: request in flight in Kafka's NodeToControllerChannelManager.
DEFAULT_TIMEOUT_MS = 30000
CREATE_TOPICS_VERSION_MAX = 7
_I64 = struct.Struct(">q")
_ZERO_UUID = uuid.UUID(int=0)


class EnvelopeFailed(Exception):
    """The controller answered the Envelope itself with an error (not the inner request)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class OutcomeUnknown(Exception):
    """The forwarded request was sent and no answer came (connection lost, timeout): it
    may or may not have been applied, so it is not sent again."""


class NoActiveController(Exception):
    """No active controller answered before the request's timeout (nothing was applied)."""


def inner_not_controller(api_key: int, version: int, data: bytes) -> bool:
    """True if the inner response ``data`` (header and body, no size prefix) carries
    NOT_CONTROLLER in any ``error_code`` (top level or per item) — for DescribeQuorum
    also NOT_LEADER_OR_FOLLOWER, Raft's answer of a voter that does not lead: the
    controller that ran it was not active and applied nothing. False if it does not
    decode."""
    try:
        body = decode_response(api_key, version, data)[1]
    except KafkaError:
        return False
    codes = {NOT_CONTROLLER, int(ErrorCode.not_leader_or_follower)} if api_key == 55 else {NOT_CONTROLLER}
    return _has_error(body, codes, 3)


def _has_error(entity: Any, codes: set[int], depth: int) -> bool:
    if getattr(entity, "error_code", None) in codes:
        return True
    if depth == 0 or not hasattr(entity, "__dataclass_fields__"):
        return False
    for name in entity.__dataclass_fields__:
        value = getattr(entity, name, None)
        if isinstance(value, tuple) and any(_has_error(item, codes, depth - 1) for item in value):
            return True
    return False


def metadata_offset(unknown: dict) -> int | None:
    """The MetadataOffset tag (10000) of a decoded EnvelopeResponse's unknown tags, or None."""
    for tags in unknown.values():
        raw = tags.get(TAG_METADATA_OFFSET)
        if raw is not None and len(raw) == _I64.size:
            return int(_I64.unpack(raw)[0])
    return None


def client_address(peer: str) -> bytes:
    """The client's IP address as bytes (4 or 16), from ``host:port``; empty if unknown."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def error_response(api_key: int, version: int, req: object, code: int, message: str) -> Any:
    """The response of a forwarded API with ``code`` for every item of ``req`` (the
    decoded request of API ``api_key``: seen through its view per branch)."""
    cls = response_schema(api_key, version)
    item: dict[str, Any] = {"error_code": code, "error_message": message}
    body: dict[str, Any]
    if api_key == 19:
        body = {"topics": [{**item, "name": t.name, "topic_id": _ZERO_UUID, "num_partitions": -1,
                            "replication_factor": -1, "configs": None, "topic_config_error_code": 0}
                           for t in cast("CreateTopicsRequest", req).topics]}
    elif api_key == 20:
        delete = cast("DeleteTopicsRequest", req)
        names = [t.name for t in opt(delete, "topics", ())] or list(opt(delete, "topic_names", ()))
        ids = [t.topic_id for t in opt(delete, "topics", ())] or [None] * len(names)
        body = {"responses": [{**item, "name": n, "topic_id": i or _ZERO_UUID} for n, i in zip(names, ids)]}
    elif api_key == 37:
        body = {"results": [{**item, "name": t.name} for t in cast("CreatePartitionsRequest", req).topics]}
    elif api_key in (33, 44):
        body = {"responses": [{**item, "resource_type": r.resource_type, "resource_name": r.resource_name}
                              for r in cast("AlterConfigsRequest | IncrementalAlterConfigsRequest", req).resources]}
    elif api_key == 30:
        body = {"results": [dict(item) for _ in cast("CreateAclsRequest", req).creations]}
    elif api_key == 31:
        body = {"filter_results": [{**item, "matching_acls": []} for _ in cast("DeleteAclsRequest", req).filters]}
    elif api_key == 51:
        scram = cast("AlterUserScramCredentialsRequest", req)
        users = dict.fromkeys([d.name for d in scram.deletions] + [u.name for u in scram.upsertions])
        body = {"results": [{**item, "user": u} for u in users]}
    elif api_key == 49:
        body = {"entries": [{**item, "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                                                for e in entry.entity]}
                               for entry in cast("AlterClientQuotasRequest", req).entries]}
    elif api_key == 55:
        body = {**item, "topics": [], "nodes": []}
    elif api_key == 43:
        body = {**item, "replica_election_results": [
            {"topic": t.topic, "partition_result": [{**item, "partition_id": p} for p in t.partitions]}
            for t in cast("ElectLeadersRequest", req).topic_partitions or ()]}
    elif api_key == 45:
        body = {**item, "responses": [
            {"name": t.name, "partitions": [{**item, "partition_index": p.partition_index} for p in t.partitions]}
            for t in cast("AlterPartitionReassignmentsRequest", req).topics]}
    elif api_key == 46:
        body = {**item, "topics": []}
    else:
        body = dict(item)
    return materialize(cls, {"throttle_time": 0, **body})


class Forwarder:
    """Forwards requests over ``channel`` and holds their answers at ``gate``; deadlines
    are on the gate's clock (``gate.clock``: the channel's too, see BrokerNode).
    ``versions`` gives the controller's ApiVersions (default: ``channel``'s, known once it
    connected; a broker also learns them from its heartbeat channel, connected from start)."""

    def __init__(self, channel: ControllerChannel, gate: ReadGate,
                 versions: Callable[[], dict[int, tuple[int, int]]] | None = None) -> None:
        self.channel = channel
        self._versions = versions or (lambda: channel.api_versions)
        self.clock = gate.clock
        self.gate = gate
        self.forwarded = 0
        #: Envelopes answered NOT_CONTROLLER inside (not applied) and sent again.
        self.not_controller_resends = 0

    # -- the Envelope round trip -------------------------------------------------------
    async def envelope(self, inner: bytes, peer: str, deadline: float, principal: str | None = None, *,
                       api_key: int | None = None, api_version: int = 0) -> tuple[bytes, int | None]:
        """Send ``inner`` (a request header and body, no size prefix) in an Envelope
        carrying the client's ``principal`` (Kafka's principal serde; None: the broker's
        own write, run under the broker's principal) and address to the active
        controller; return (inner response bytes, MetadataOffset or None).

        Sent again (it was not applied) while the request never left or the answer is
        NOT_CONTROLLER (the Envelope's error, or — with ``api_key`` given — one in the
        inner response), until ``deadline`` (monotonic). Raises :class:`OutcomeUnknown`
        when the request may have been applied (connection lost in flight, no answer in
        time), :class:`NoActiveController` when none answered by ``deadline``, and
        :class:`EnvelopeFailed` for any other Envelope error."""
        body = {"request_data": inner,
                "request_principal": serialize_principal(principal) if principal is not None else None,
                "client_host_address": client_address(peer)}
        while True:
            unknown: dict = {}
            try:
                resp = await self.channel.request(ENVELOPE_KEY, 0, body, unknown_tags=unknown,
                                                  timeout_s=max(0.1, deadline - self.clock.monotonic()))
            except ControllerUnavailable as exc:
                if exc.sent:
                    raise OutcomeUnknown(f"the connection to the controller was lost with the request in "
                                         f"flight ({exc}); it may or may not have been applied") from exc
                if self.clock.monotonic() >= deadline or self.channel.closed:
                    raise NoActiveController(f"no controller could be reached: {exc}") from exc
                continue  # never sent: the channel waits out its backoff before the next attempt
            except KafkaTimeoutError as exc:  # (a paused controller: the lifecycle's heartbeat resets the channel)
                raise OutcomeUnknown(f"the controller did not answer in time ({exc}); the request may or may "
                                     "not have been applied") from exc
            code = int(resp.error_code)
            data = bytes(resp.response_data) if resp.response_data is not None else None
            not_controller = code == NOT_CONTROLLER or (
                code == ErrorCode.none and data is not None and api_key is not None
                and inner_not_controller(api_key, api_version, data))
            if not_controller:
                if self.clock.monotonic() >= deadline:
                    raise NoActiveController("no active controller answered before the timeout (every voter "
                                             "asked answered NOT_CONTROLLER)")
                self.not_controller_resends += 1
                self.channel.retire_current()  # the answering voter is not the active controller
                continue
            if code != ErrorCode.none or data is None:
                code = code or int(ErrorCode.unknown_server_error)
                raise EnvelopeFailed(code, f"the controller refused the forwarded request: "
                                           f"{ErrorCode(code).name.upper()}")
            return data, metadata_offset(unknown)

    async def forward(self, ctx: Any, req: object) -> Any:
        """The handler of a forwarded API: the controller's answer, held until covered."""
        header = ctx.header
        name = FORWARDED.get(header.api_key, str(header.api_key))
        timeout_ms = getattr(req, "timeout", None)
        timeout_s = _seconds(timeout_ms) if timeout_ms is not None else DEFAULT_TIMEOUT_MS / 1000
        deadline = self.clock.monotonic() + max(timeout_s, 1.0)
        inner = encode_request(header.api_key, header.api_version, header.correlation_id, header.client_id, req)[4:]
        try:
            data, offset = await self.envelope(inner, ctx.peer, deadline, ctx.principal,
                                               api_key=header.api_key, api_version=header.api_version)
        except EnvelopeFailed as exc:
            return error_response(header.api_key, header.api_version, req, exc.code, str(exc))
        except (OutcomeUnknown, NoActiveController, KafkaError) as exc:
            log.warning("forwarding %s to the controller failed: %s", name, exc)
            return error_response(header.api_key, header.api_version, req, ErrorCode.request_timed_out,
                                  f"the controller did not answer the forwarded {name}: {exc}")
        self.forwarded += 1
        if offset is not None:
            await self.gate.wait_write(offset, f"the forwarded {name} (metadata offset {offset})", deadline)
        frame = bytearray(len(data).to_bytes(4, "big") + data)
        frame[4:8] = header.correlation_id.to_bytes(4, "big", signed=True)
        return bytes(frame)

    # -- ApiVersions ---------------------------------------------------------------------
    def narrow(self, ranges: list[dict[str, int]]) -> list[dict[str, int]]:
        """ApiVersions' ranges with the forwarded APIs narrowed to the controller's."""
        theirs = self._versions()
        if not theirs:
            return ranges
        out = []
        for r in ranges:
            key = r["api_key"]
            if key in FORWARDED:
                other = theirs.get(key)
                if other is None:
                    continue
                lo, hi = max(r["min_version"], other[0]), min(r["max_version"], other[1])
                if lo > hi:
                    continue
                r = {**r, "min_version": lo, "max_version": hi}
            out.append(r)
        return out


class RemoteMetadataWrites:
    """A broker-only node's metadata writes for itself, over the controller channel."""

    def __init__(self, forwarder: Forwarder, node_id: int, broker_epoch: Callable[[], int]) -> None:
        self.forwarder = forwarder
        self.node_id = node_id
        self._epoch = broker_epoch

    async def create_topics(self, topics: list[NewTopic], timeout_s: float = 30.0) -> list[TopicResult]:
        """Create topics through the controller; return when this broker's image shows
        them (and, with acknowledged consistency, every unfenced broker's). Raises
        CoordinatorUnavailable when the controller cannot be reached in time."""
        channel = self.forwarder.channel
        deadline = self.forwarder.clock.monotonic() + timeout_s
        try:
            await channel.connection(deadline)
            version = channel.pick_version(19, CREATE_TOPICS_VERSION_MAX, 2)
        except (ControllerUnavailable, KafkaError) as exc:
            raise CoordinatorUnavailable(f"the controller cannot be reached: {exc}") from exc
        body = materialize(request_schema(19, version), {
            "topics": [{"name": t.name, "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                        "assignments": [{"partition_index": p, "broker_ids": list(b)} for p, b in t.assignments.items()],
                        "configs": [{"name": k, "value": v} for k, v in t.configs.items()]} for t in topics],
            "timeout": int(timeout_s * 1000), "validate_only": False})
        inner = encode_request(19, version, 0, "hightide-broker", body)[4:]
        try:
            data, offset = await self.forwarder.envelope(inner, "", deadline, api_key=19, api_version=version)
        except (EnvelopeFailed, OutcomeUnknown, NoActiveController, KafkaError) as exc:
            raise CoordinatorUnavailable(f"creating {', '.join(t.name for t in topics)} failed: {exc}") from exc
        resp = decode_response(19, version, data)[1]
        if offset is not None:
            await self.forwarder.gate.wait_applied(offset, max(0.1, deadline - self.forwarder.clock.monotonic()))
            await self.forwarder.gate.wait_write(offset, f"topic creation (metadata offset {offset})", deadline)
        return [TopicResult(r.name, ErrorCode(int(r.error_code)), r.error_message, getattr(r, "topic_id", None),
                            int(getattr(r, "num_partitions", -1)), int(getattr(r, "replication_factor", -1)))
                for r in resp.topics]

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """A block of producer ids from the controller: (first id, count). Raises
        CoordinatorLoadInProgress (COORDINATOR_LOAD_IN_PROGRESS, retriable, as Kafka's
        broker answers while it has no block) when the controller cannot give one."""
        try:
            resp = await self.forwarder.channel.request(
                67, 0, {"broker_id": self.node_id, "broker_epoch": self._epoch()})
        except (ControllerUnavailable, KafkaError) as exc:  # Kafka: retriable while no block is available
            raise CoordinatorLoadInProgress(f"no producer id block from the controller: {exc}") from exc
        if resp.error_code != ErrorCode.none:
            raise CoordinatorLoadInProgress("the controller refused a producer id block: "
                                            f"{ErrorCode(resp.error_code).name.upper()}")
        return int(resp.producer_id_start), int(resp.producer_id_len)


def _seconds(value: Any) -> float:
    """A kio timedelta (or int milliseconds) as seconds."""
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return float(value) / 1000
