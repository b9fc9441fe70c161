"""Per-API request handlers. Importing this package registers every route."""

from . import (  # noqa: F401
    admin_configs,
    admin_topics,
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
