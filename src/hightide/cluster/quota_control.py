"""AlterClientQuotas on the controller, sans-IO (Kafka's
``ClientQuotaControlManager.alterClientQuotas``).

:func:`alter_client_quotas` computes, from the current image and without changing it,
one result per quota entity and the :class:`ClientQuotaRecord` s to append (a value only
when it changes, a removal only of a value that is set); ``validate_only`` gives the
results and no records. Kafka's rules and messages, per entity:

* an entity names each type once (a type named twice in the request: the last name
  counts, as Kafka's request parsing keeps it); an empty entity, an unknown type
  ("Unhandled client quota entity type: X") or an empty name ("Empty X not supported")
  is INVALID_REQUEST; hightide does not serve ``ip`` entities (connection-creation
  quotas), which get the unknown-type error;
* the keys of user / client-id entities: ``producer_byte_rate`` and
  ``consumer_byte_rate`` (LONG: whole numbers), ``request_percentage`` and
  ``controller_mutation_rate`` (DOUBLE); another key is "Invalid configuration key K";
  a value must be > 0 ("Quota K must be greater than 0"), a LONG one whole ("K cannot
  be a fractional value.") and at most 2^63-1; hightide also refuses a value that is not
  a finite number (Kafka accepts NaN and infinity, which no rate can be held to);
* a key named twice in one entity's operations, or an entity named twice in the
  request: Kafka reports "Ignoring duplicate entity ..." for that entity (its check of
  duplicates overwrites the duplicate-key message), and so does hightide; an earlier
  occurrence's records are kept, as in Kafka.
An entity that fails writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..protocol.errors import ErrorCode
from .quota_image import ClientQuotasImage
from .quota_records import CLIENT_ID, USER, ClientQuotaRecord, QuotaEntity, quota_entity

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: The quota keys of user and client-id entities and whether each is a LONG (else DOUBLE).
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
              CONTROLLER_MUTATION_RATE: False}
_LONG_MAX = float(2 ** 63 - 1)

Error = tuple[ErrorCode, str | None]
OK: Error = (ErrorCode.none, None)


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of the request: ``entity`` as the request listed it ((type, name)
    pairs) and ``ops`` as (key, value or None to remove)."""
    entity: Sequence[tuple[str, str | None]]
    ops: Sequence[tuple[str, float | None]]


def entity_text(entity: QuotaEntity) -> str:
    """Kafka's ``ClientQuotaEntity.toString`` (a Java map: ``{client-id=app, user=alice}``)."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={'null' if n is None else n}" for t, n in entity) + "})"


def alter_client_quotas(image: ClientQuotasImage, alterations: Sequence[QuotaAlteration]
                        ) -> tuple[list[tuple[QuotaEntity, Error]], list[ClientQuotaRecord]]:
    """The results (one per distinct entity, in first-seen order) and the records."""
    results: dict[QuotaEntity, Error] = {}
    records: list[ClientQuotaRecord] = []
    for alteration in alterations:
        entity = quota_entity(dict(alteration.entity).items())
        ops: dict[str, float | None] = {}
        for key, value in alteration.ops:
            if key in ops:
                results[entity] = (ErrorCode.invalid_request, f"Duplicate quota key {key} not updating quota "
                                                              f"for this entity {entity_text(entity)}")
            else:
                ops[key] = value
        if entity in results:
            results[entity] = (ErrorCode.invalid_request, f"Ignoring duplicate entity {entity_text(entity)}")
            continue
        error, new = _alter_entity(image, entity, ops)
        results[entity] = error
        records.extend(new)
    return list(results.items()), records


def _alter_entity(image: ClientQuotasImage, entity: QuotaEntity, ops: dict[str, float | None]
                  ) -> tuple[Error, list[ClientQuotaRecord]]:
    error = validate_entity(entity)
    if error != OK:
        return error, []
    current = image.entities.get(entity, {})
    records = []
    for key, value in ops.items():
        if value is None:
            if key in current:
                records.append(ClientQuotaRecord(entity, key, remove=True))
            continue
        error = validate_value(key, value)
        if error != OK:
            return error, []
        if current.get(key) != value:
            records.append(ClientQuotaRecord(entity, key, value))
    return OK, records


def validate_entity(entity: QuotaEntity) -> Error:
    """Kafka's ``validateEntity`` and ``configKeysForEntityType`` for user/client-id."""
    if not entity:
        return ErrorCode.invalid_request, "Invalid empty client quota entity"
    for entity_type, name in entity:
        if entity_type not in (USER, CLIENT_ID):
            return ErrorCode.invalid_request, f"Unhandled client quota entity type: {entity_type}"
        if name == "":
            return ErrorCode.invalid_request, f"Empty {entity_type} not supported"
    return OK


def validate_value(key: str, value: float) -> Error:
    """Kafka's ``validateQuotaKeyValue`` for the user/client-id keys (plus: finite)."""
    is_long = QUOTA_KEYS.get(key)
    if is_long is None:
        return ErrorCode.invalid_request, f"Invalid configuration key {key}"
    if not math.isfinite(value):
        return ErrorCode.invalid_request, f"Quota {key} must be a finite number"
    if value <= 0.0:
        return ErrorCode.invalid_request, f"Quota {key} must be greater than 0"
    if is_long:
        if value > _LONG_MAX:
            return ErrorCode.invalid_request, f"Proposed value for {key} is too large for a LONG."
        if abs(math.fmod(value, 1.0)) > 1e-6:
            return ErrorCode.invalid_request, f"{key} cannot be a fractional value."
    return OK
