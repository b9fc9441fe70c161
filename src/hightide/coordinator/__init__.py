"""The coordinators: the log-backed state machines of a broker and the one runtime they
run on (Kafka's CoordinatorRuntime / GroupCoordinator / ShareCoordinator /
TransactionCoordinator).

* :mod:`.runtime`: :class:`~.runtime.CoordinatorRuntime`, one runtime for every
  coordinator log (replay is the only mutator; see its theory of operation);
* :mod:`.service`: the service shell the coordinators over an internal topic share
  (start-up, placement, topic creation, leadership, routing), and
  :mod:`.internal_topic` (creating such a topic, the runtime over its logs);
* :mod:`.groups` (``__consumer_offsets``), :mod:`.share_state` (``__share_group_state``),
  :mod:`.transactions` (``__transaction_state``, markers) with :mod:`.txn_verify`
  (KIP-890 with a coordinator on another broker);
* :mod:`.share_groups`, :mod:`.share_partitions`, :mod:`.share_persister`: the share
  groups' IO shell (membership, share partitions and sessions, the routed persister);
* :mod:`.metadata`: the single voter's serial metadata runtime.

Every part is built from narrow things (the metadata image as a callable, partition log
lookup, the flusher's durability wait, ...), never from the broker; this package never
imports :mod:`hightide.server` (an import-linter contract keeps it so).
"""
