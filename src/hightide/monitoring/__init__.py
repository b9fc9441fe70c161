"""Client-side monitoring tools built on :mod:`hightide.client` and :mod:`hightide.lag`.

- :mod:`.monitor`: consistent consumer-group lag snapshots (committed and end offsets read
  together) for the CLI, the exporter and benchmarks.
- :mod:`.share_monitor`: share-group lag snapshots.
- :mod:`.exporter`: the Prometheus exporter (``hightide exporter``).

They work against hightide or any Kafka-compatible cluster. Import the submodules
directly; this package imports nothing so that ``hightide serve`` never pays for them.
"""
