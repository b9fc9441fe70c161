"""The partition logs' asyncio shell: the work on the logs' files that must not run on
the event loop. :mod:`.flusher` fsyncs logs (the flush policy, durability for acks and
coordinator writes) on worker threads; :mod:`.cleaner` compacts the logs of compacted
topics on a worker thread. Both are built from the log manager they act on (never the
broker) and import nothing of the network shell, the coordinators, replication or the
cluster node.
"""
