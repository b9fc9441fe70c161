"""Per-API request handlers. :func:`routes` builds the broker's route table from them;
importing this package registers nothing anywhere."""

from __future__ import annotations

from ..registry import Routes, build_routes
from . import (
    admin_configs,
    admin_topics,
    alter_configs,
    api_versions,
    consumer_groups,
    delete_records,
    describe_cluster,
    fetch,
    group_offsets,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    share_fetch,
    share_group_offsets,
    share_groups,
    share_state,
)

MODULES = (admin_configs, admin_topics, alter_configs, api_versions, consumer_groups, delete_records,
           describe_cluster, fetch, group_offsets, groups, init_producer_id, list_offsets, metadata,
           offset_for_leader_epoch, produce, share_fetch, share_group_offsets, share_groups, share_state)


def routes() -> Routes:
    """The route table of every handler in this package (a new immutable mapping)."""
    return build_routes(MODULES)
