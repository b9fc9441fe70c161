"""How a coordinator write is appended when it belongs to a transaction (sans-IO).

A coordinator result may carry a :class:`TxnBatch` as ``txn_batch``: the coordinator
runtime then appends its records as a *transactional* batch of that producer (the
group coordinator's TxnOffsetCommit, Kafka's layout in ``__consumer_offsets``), or, for
a ``marker``, a COMMIT/ABORT control batch instead of records (the transaction
coordinator's marker for an offsets partition). On load the runtime hands such batches
to the adapter's ``load_txn`` so pending transactional state is rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TxnBatch:
    """``marker`` None: a transactional data batch; True/False: a COMMIT/ABORT marker."""

    producer_id: int
    producer_epoch: int
    marker: bool | None = None
    coordinator_epoch: int = 0
