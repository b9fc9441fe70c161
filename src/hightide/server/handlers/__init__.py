"""Per-API request handlers. :func:`routes` builds the broker's route table from them,
:func:`controller_routes` the controller listener's; importing this package registers
nothing anywhere."""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..registry import Route, Routes, build_routes
from . import (
    acls,
    add_offsets_to_txn,
    add_partitions_to_txn,
    admin_configs,
    admin_topics,
    allocate_producer_ids,
    alter_configs,
    alter_partition,
    api_versions,
    broker_lifecycle,
    client_quotas,
    consumer_groups,
    controller_fetch,
    delete_records,
    describe_cluster,
    describe_log_dirs,
    describe_quorum,
    describe_topic_partitions,
    elect_leaders,
    end_txn,
    envelope,
    fetch,
    fetch_snapshot,
    group_offsets,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    reassignments,
    raft_rpcs,
    raft_voters,
    sasl,
    scram_credentials,
    share_fetch,
    share_group_offsets,
    share_groups,
    share_state,
    txn_admin,
    txn_offset_commit,
    unregister_broker,
    update_features,
    write_txn_markers,
)

if TYPE_CHECKING:
    from ...node.controller_service import ControllerService

MODULES = (admin_configs, admin_topics, alter_configs, api_versions, consumer_groups, delete_records,
           describe_cluster, fetch, group_offsets, groups, init_producer_id, list_offsets, metadata,
           offset_for_leader_epoch, produce, share_fetch, share_group_offsets, share_groups, share_state,
           add_partitions_to_txn, add_offsets_to_txn, end_txn, txn_offset_commit, write_txn_markers,
           describe_quorum, update_features, acls, scram_credentials, sasl, txn_admin, elect_leaders, reassignments,
           describe_log_dirs, describe_topic_partitions, unregister_broker, client_quotas, raft_voters)


def routes() -> Routes:
    """The route table of every handler in this package (a new immutable mapping)."""
    return build_routes(MODULES)


#: The controller listener's handlers that need nothing but the request context: the
#: metadata writes (run against the controller's image, KIP-919) with ACLs and SCRAM
#: credentials, Envelope, ApiVersions.
CONTROLLER_MODULES = (admin_configs, admin_topics, alter_configs, api_versions, envelope, update_features, acls,
                      scram_credentials, sasl,  # sasl: a SASL controller listener authenticates brokers
                      alter_partition, elect_leaders, reassignments, client_quotas)
#: Handlers taking the controller service first (bound by :func:`controller_routes`).
CONTROLLER_SERVICE_MODULES = (broker_lifecycle, controller_fetch, allocate_producer_ids, fetch_snapshot)


def controller_routes(service: ControllerService) -> Routes:
    """The route table of a controller listener (a controller-only process): ApiVersions,
    BrokerRegistration/BrokerHeartbeat/UnregisterBroker, the observers' metadata Fetch and
    FetchSnapshot,
    AllocateProducerIds, Envelope, DescribeQuorum, DescribeCluster (controllers,
    KIP-919), UpdateFeatures and the admin writes and DescribeConfigs, with the service's
    handlers bound to ``service``."""
    table = dict(build_routes(CONTROLLER_MODULES))
    for key, r in build_routes(CONTROLLER_SERVICE_MODULES).items():
        table[key] = Route(key, r.min_version, r.max_version, functools.partial(r.fn, service), r.name)
    if service.raft is not None:  # a controller quorum: the voters' Raft RPCs, writes only on the leader
        for key, r in build_routes([raft_rpcs]).items():
            table[key] = Route(key, r.min_version, r.max_version, functools.partial(r.fn, service), r.name)
        envelope_route = table[58]
        table[58] = Route(58, envelope_route.min_version, envelope_route.max_version,
                          functools.partial(raft_rpcs.envelope_on_leader, service, envelope_route.fn), envelope_route.name)
        snapshot_route = table.get(59)  # a voter's FetchSnapshot goes to the Raft core, a broker's to the files
        if snapshot_route is not None:
            table[59] = Route(59, snapshot_route.min_version, snapshot_route.max_version,
                              functools.partial(raft_rpcs.fetch_snapshot_from_voters, service, snapshot_route.fn),
                              snapshot_route.name)
    quorum = build_routes([describe_quorum])[55]
    table[55] = Route(55, quorum.min_version, quorum.max_version,
                      functools.partial(describe_quorum.controller_describe_quorum, service), quorum.name)
    table[60] = Route(60, 0, 2, functools.partial(describe_quorum.controller_describe_cluster, service),
                      "describe_quorum")
    voters = build_routes([raft_voters])  # AddRaftVoter / RemoveRaftVoter (KIP-853) through the service
    for key, fn in ((80, raft_voters.controller_add_raft_voter), (81, raft_voters.controller_remove_raft_voter)):
        table[key] = Route(key, voters[key].min_version, voters[key].max_version, functools.partial(fn, service),
                           voters[key].name)
    return MappingProxyType(dict(sorted(table.items())))
