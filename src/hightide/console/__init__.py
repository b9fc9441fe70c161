"""``hightide console``: a small web app showing lag against hightide or any Kafka cluster.

Pages for the cluster, topics (with liveness), consumer groups (per-partition lag, time
lag with method and certainty, status with the rule that fired, anomalies in words),
share groups (share-partition lag, in-flight records by state) and each group's lag
history, updated live. Offset resets with a dry-run preview and a confirm, only with
``--allow-writes``. Built on the same client and monitor as the CLI and the exporter
(:mod:`hightide.client`, :mod:`hightide.monitoring`), so its numbers are theirs.

Layout: :mod:`.views` (pure view-model), :mod:`.sampler` (background snapshots and the
bounded history), :mod:`.cluster` (DescribeCluster/DescribeQuorum), :mod:`.actions`
(resets), :mod:`.client_config` (``--command-config``), :mod:`.app` (Starlette routes).
Nothing here is imported by ``hightide serve``; the web libraries are the ``console`` extra.
"""
