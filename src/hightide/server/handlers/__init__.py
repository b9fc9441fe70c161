"""Per-API request handlers. :func:`routes` builds the broker's route table from them;
importing this package registers nothing anywhere."""

from __future__ import annotations

from ..registry import Routes, build_routes
from . import (
    acls,
    add_offsets_to_txn,
    add_partitions_to_txn,
    admin_configs,
    admin_topics,
    alter_configs,
    api_versions,
    consumer_groups,
    delete_records,
    describe_cluster,
    end_txn,
    fetch,
    group_offsets,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    scram_credentials,
    share_fetch,
    share_group_offsets,
    share_groups,
    share_state,
    txn_offset_commit,
    write_txn_markers,
)

MODULES = (admin_configs, admin_topics, alter_configs, api_versions, consumer_groups, delete_records,
           describe_cluster, fetch, group_offsets, groups, init_producer_id, list_offsets, metadata,
           offset_for_leader_epoch, produce, share_fetch, share_group_offsets, share_groups, share_state,
           add_partitions_to_txn, add_offsets_to_txn, end_txn, txn_offset_commit, write_txn_markers, acls, scram_credentials)


def routes() -> Routes:
    """The route table of every handler in this package (a new immutable mapping)."""
    return build_routes(MODULES)
