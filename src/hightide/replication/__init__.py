"""Partition replication, sans-IO: the leader's view of its followers
(:mod:`.leader_state`: ISR, high watermark, AlterPartition proposals) and the writes
waiting for the high watermark (:mod:`.acks`). The asyncio shell is
``hightide.replica`` (:mod:`hightide.replica.manager`)."""
