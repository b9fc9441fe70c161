"""ACL bindings and binding filters, with Kafka's codes and matching rules.

The numeric codes are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``): they travel unchanged in CreateAcls/DescribeAcls/DeleteAcls and
in the metadata records. A code Kafka does not know decodes to ``UNKNOWN`` (Kafka's
``fromCode``), which every validator here rejects.

* :class:`AclBinding` — a resource pattern (type, name, LITERAL/PREFIXED) and an entry
  (principal, host, operation, ALLOW/DENY): what CreateAcls creates and the image stores.
* :class:`AclBindingFilter` — what DescribeAcls and DeleteAcls match with
  (Kafka's ``AclBindingFilter``: ``None`` for "any" name/principal/host, ``ANY`` codes,
  pattern type ``MATCH`` for "every pattern that would apply to this name").
* :func:`validate_new_acl` and :func:`validate_filter` give Kafka's INVALID_REQUEST
  messages (``AclControlManager.validateNewAcl``/``validateFilter`` and the checks of
  ``AclApis.handleCreateAcls``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self

WILDCARD = "*"
"""The wildcard resource name (a LITERAL pattern matching every name) and host."""
WILDCARD_PRINCIPAL = "User:*"
"""The principal every ``User:`` principal matches."""
CLUSTER_NAME = "kafka-cluster"
"""The only valid name of the CLUSTER resource."""


class _Coded(enum.IntEnum):
    @classmethod
    def of(cls, code: int) -> Self:
        """The member with ``code``; ``UNKNOWN`` (0) for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
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


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations kafka-acls.sh accepts per resource type (Kafka's ``AclEntry.supportedOperations``).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE, AclOperation.CREATE_TOKENS,
                                     AclOperation.DESCRIBE_TOKENS}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE,
                                              AclOperation.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


class InvalidAcl(ValueError):
    """A binding or filter Kafka answers INVALID_REQUEST for; ``str()`` is Kafka's message."""


def split_principal(principal: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``. Raises :class:`InvalidAcl` without a
    ``:`` or with an empty type (Kafka's ``SecurityUtils.parseKafkaPrincipal``)."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind:
        raise InvalidAcl(f"expected a string in format principalType:principalName but got {principal}")
    return kind, name


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's ``AclBinding``)."""
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission: int) -> AclBinding:
        """A binding from wire codes (unknown codes become ``UNKNOWN``)."""
        return cls(ResourceType.of(resource_type), resource_name, PatternType.of(pattern_type),
                   principal, host, AclOperation.of(operation), AclPermissionType.of(permission))

    @property
    def pattern(self) -> tuple[ResourceType, str, PatternType]:
        return self.resource_type, self.resource_name, self.pattern_type


def validate_new_acl(acl: AclBinding) -> None:
    """Raise :class:`InvalidAcl` (Kafka's message) unless ``acl`` may be created: a
    concrete resource type, LITERAL or PREFIXED, a concrete operation, ALLOW or DENY, a
    non-empty name (``kafka-cluster`` for CLUSTER) and a ``Type:name`` principal."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAcl(f"Invalid operation {acl.operation.name}")
    if acl.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAcl(f"Invalid permissionType {acl.permission.name}")
    if not acl.resource_name:
        raise InvalidAcl("Invalid empty resource name")
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    split_principal(acl.principal)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: ``None`` name/principal/host match anything, ``ANY``
    codes match any value; pattern type ``MATCH`` matches every pattern that applies to
    ``resource_name`` (the literal name, the ``*`` wildcard, and every prefix of it)."""
    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission: int) -> AclBindingFilter:
        """A filter from wire codes (unknown codes become ``UNKNOWN``)."""
        return cls(ResourceType.of(resource_type), resource_name, PatternType.of(pattern_type),
                   principal, host, AclOperation.of(operation), AclPermissionType.of(permission))

    def matches(self, acl: AclBinding) -> bool:
        """Whether ``acl`` matches (Kafka's ``ResourcePatternFilter.matches`` and
        ``AccessControlEntryFilter.matches``)."""
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:  # MATCH
            return acl.resource_name in (self.resource_name, WILDCARD)
        return self.resource_name.startswith(acl.resource_name)  # MATCH against PREFIXED

    def _matches_entry(self, acl: AclBinding) -> bool:
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation == AclOperation.ANY or self.operation == acl.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == acl.permission))


def validate_filter(f: AclBindingFilter) -> None:
    """Raise :class:`InvalidAcl` (Kafka's ``AclControlManager.validateFilter`` message)
    for a filter with an UNKNOWN resource type, pattern type, operation or permission."""
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        raise InvalidAcl("Unknown patternFilter.")
    if f.operation == AclOperation.UNKNOWN or f.permission == AclPermissionType.UNKNOWN:
        raise InvalidAcl("Unknown entryFilter.")
