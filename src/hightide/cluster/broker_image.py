"""Broker registrations in the metadata image (Kafka's ``BrokerRegistration`` as kept by
``ClusterControlManager`` and ``ClusterImage``).

:func:`apply_broker_record` is the only mutator; it is called by
:meth:`hightide.cluster.image.MetadataImage.apply` for the records of
:mod:`hightide.cluster.broker_records`, in log order, so a replay of the metadata log
rebuilds the same registrations.

Replay rules (Kafka's ``ClusterControlManager.replay``):

* ``RegisterBrokerRecord`` replaces the broker's registration; the offset it is stored at
  is remembered as ``registration_offset`` (the offset a broker must have applied before
  it can be unfenced).
* The other records name a broker epoch. A record for an epoch that is not the current
  registration's (or for an unknown broker) is ignored: Kafka's controller treats that as
  a fatal inconsistency, but these records are only ever generated against the current
  image, so the only way to meet one is a log written by a different controller history,
  and a replay that stops the process would then make the whole log unreadable.
"""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass

from .broker_records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    UNFENCE,
    BrokerRecord,
    BrokerRegistrationChangeRecord,
    Endpoint,
    Feature,
    FenceBrokerRecord,
    NoOpRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)


@dataclass
class BrokerRegistration:
    """One registered broker as the metadata image holds it."""
    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: tuple[Endpoint, ...]
    features: tuple[Feature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    registration_offset: int  # offset of the RegisterBrokerRecord last applied for it

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint of listener ``listener``, or None."""
        return next((e for e in self.endpoints if e[0] == listener), None)


def apply_broker_record(brokers: MutableMapping[int, BrokerRegistration], record: BrokerRecord,
                        offset: int) -> None:
    """Apply one broker-lifecycle record stored at ``offset`` to ``brokers`` (by id)."""
    match record:
        case RegisterBrokerRecord():
            brokers[record.broker_id] = BrokerRegistration(
                record.broker_id, uuid.UUID(record.incarnation_id), record.broker_epoch,
                record.end_points, record.features, record.rack, record.fenced,
                record.in_controlled_shutdown, offset)
        case UnregisterBrokerRecord(broker_id=bid, broker_epoch=epoch):
            if _current(brokers, bid, epoch) is not None:
                del brokers[bid]
        case FenceBrokerRecord(id=bid, epoch=epoch):
            _change(brokers, bid, epoch, FENCE, 0)
        case UnfenceBrokerRecord(id=bid, epoch=epoch):
            _change(brokers, bid, epoch, UNFENCE, 0)
        case BrokerRegistrationChangeRecord():
            _change(brokers, record.broker_id, record.broker_epoch, record.fenced, record.in_controlled_shutdown)
        case NoOpRecord():
            pass


def _current(brokers: MutableMapping[int, BrokerRegistration], broker_id: int,
             epoch: int) -> BrokerRegistration | None:
    reg = brokers.get(broker_id)
    return reg if reg is not None and reg.epoch == epoch else None


def _change(brokers: MutableMapping[int, BrokerRegistration], broker_id: int, epoch: int,
            fenced: int, in_controlled_shutdown: int) -> None:
    reg = _current(brokers, broker_id, epoch)
    if reg is None:
        return
    if fenced == FENCE:  # in_controlled_shutdown stays as it was (Kafka's cloneWith)
        reg.fenced = True
    elif fenced == UNFENCE:
        reg.fenced = False
    if in_controlled_shutdown == IN_CONTROLLED_SHUTDOWN:
        reg.in_controlled_shutdown = True
