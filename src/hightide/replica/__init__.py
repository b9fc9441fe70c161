"""Partition replication, the asyncio shell (Kafka's ``ReplicaManager`` and
``ReplicaFetcherManager``): the leader side (:mod:`.manager`: roles from the metadata
image, ISR changes sent to the controller, the high watermark, acks=all), the follower
side (:mod:`.fetcher`: followers fetch from their leaders) and the leaders' offsets that
OffsetFetch reports for partitions led elsewhere (:mod:`.leader_offsets`).

The sans-IO core these drive stays beside this package, in :mod:`hightide.replication`
(the leader's view of its followers, the writes waiting for the high watermark). Each
component is built from the narrow things it uses, never from the broker (its module
docstring names them); ``hightide.server.broker`` wires them.
"""
