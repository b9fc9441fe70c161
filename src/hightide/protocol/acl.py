"""ACL operations and the authorized-operations bit fields of Metadata, DescribeCluster
and the group describe APIs (KIP-430).

A response carries the operations the caller may perform on a resource as a 32-bit
field: bit ``n`` set means the operation with code ``n`` (Kafka's ``AclOperation``) is
allowed; INT32_MIN means "not requested". Kafka without an authorizer answers every
operation the resource type supports, and so does hightide (it has no ACLs yet).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["AUTHORIZED_OPERATIONS_OMITTED", "AclOperation", "all_operations", "to_bit_field"]

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class AclOperation(IntEnum):
    """Kafka's ``org.apache.kafka.common.acl.AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


_O = AclOperation
# Kafka's AclEntry.supportedOperations, per resource type.
SUPPORTED: dict[str, frozenset[AclOperation]] = {
    "topic": frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                        _O.ALTER_CONFIGS}),
    "group": frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    "cluster": frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                          _O.ALTER, _O.DESCRIBE}),
    "transactional_id": frozenset({_O.DESCRIBE, _O.WRITE}),
}


def to_bit_field(operations: frozenset[AclOperation] | set[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``op`` set for each operation (as a signed int32)."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field - (1 << 32) if field >= 1 << 31 else field


def all_operations(resource_type: str) -> int:
    """The bit field of every operation ``resource_type`` ("topic", "group", "cluster",
    "transactional_id") supports: Kafka's answer without an authorizer. Raises KeyError
    for another type."""
    return to_bit_field(SUPPORTED[resource_type])
