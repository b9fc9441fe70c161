"""The whole cluster in one deterministic simulation (issue 28).

Every node's production code above the seams (handlers, coordinator runtime, replica
manager and fetcher, broker lifecycle, metadata follower, Raft shell) runs in one process
on one :class:`~.loop.SimLoop` (simulated time), on in-memory storage
(:class:`~hightide.log.storage_memory.MemoryStorage`, with ``crash()``), connected by an
in-memory network; simulated clients speak the real protocol through the same network.
Faults come from a seed; invariants are checked as it runs; a failing seed replays
exactly. Run it with ``python -m hightide.sim --seeds N``.
"""
