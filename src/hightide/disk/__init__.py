"""The partition logs' asyncio shell: the work on the logs' files that must not run on
the event loop. :mod:`.flusher` fsyncs logs (the flush policy, durability for acks and
coordinator writes) on worker threads; :mod:`.cleaner` compacts the logs of compacted
topics on a worker thread; :mod:`.hosted_logs` keeps the partition logs this node hosts
in step with the metadata image (opened, deleted with their topic, configured, retention).
Each is built from the log manager it acts on and a few callables (never the broker) and
imports nothing of the network shell, the coordinators, replication or the cluster node.
"""
