"""ACL operations and the authorized-operations bit fields of Metadata, DescribeCluster
and the group describe APIs (KIP-430).

A response carries the operations the caller may perform on a resource as a 32-bit
field: bit ``n`` set means the operation with code ``n`` (Kafka's ``AclOperation``) is
allowed; INT32_MIN means "not requested". Kafka without an authorizer answers every
operation the resource type supports, and so does hightide; with one, the server computes
the field from the ACLs (``hightide.server.authorization``). The operation codes are the
one :class:`hightide.security.acl.AclOperation`.
"""

from __future__ import annotations

from ..security.acl import AclOperation

__all__ = ["AUTHORIZED_OPERATIONS_OMITTED", "AclOperation", "all_operations", "to_bit_field"]

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


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
