"""Kafka's StandardAuthorizer as a pure index over ACL bindings.

Theory of operation
-------------------
:class:`AclIndex` holds the ACL bindings of the metadata image, indexed so that one
authorization costs a few dictionary look-ups, never a scan of every ACL:

* LITERAL bindings by ``(resource type, name)`` — the wildcard ``*`` is a LITERAL name too;
* PREFIXED bindings by resource type, then by prefix, plus the multiset of prefix lengths
  in use, so the prefixes of a resource name that can match are looked up directly
  (one look-up per distinct prefix length present for that resource type);
* within each pattern, by principal, so a call only evaluates the bindings of its own
  principal and of ``User:*`` (a busy topic with ACLs for hundreds of principals costs
  the same as one with a single ACL).

:meth:`Authorizer.authorize` follows ``StandardAuthorizerData.authorize``:

1. a principal listed in ``super.users`` is allowed everything;
2. the applicable bindings are those on the exact literal name, on the ``*`` wildcard and
   on every prefix of the name; a binding applies to the request when its principal is
   the request's principal or ``User:*``, and its host is ``*`` or the client's address;
3. operation matching: ALL matches every operation. An ALLOW binding for READ, WRITE,
   DELETE or ALTER also allows DESCRIBE, and ALTER_CONFIGS also allows
   DESCRIBE_CONFIGS; these implications never apply to DENY bindings;
4. any applicable DENY wins; otherwise any applicable ALLOW allows; otherwise, if *no*
   binding at all exists on the resource (any principal, host or operation), the answer is
   ``allow.everyone.if.no.acl.found``; otherwise denied.

Everything here is sans-IO and synchronous; the index is mutated only by
:meth:`AclIndex.add`/:meth:`AclIndex.remove`, called when metadata records are applied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


Bucket = dict[str, list[AclBinding]]
"""The bindings of one resource pattern, by principal."""


class AclIndex:
    """The ACL bindings of the image by id, indexed for :class:`Authorizer`.

    Ids are the ``AccessControlEntryRecord`` ids (UUID strings). Adding an id that is
    present replaces its binding; removing an unknown id is a no-op (returns None)."""

    def __init__(self) -> None:
        self.by_id: dict[str, AclBinding] = {}
        self._ids: dict[AclBinding, str] = {}
        self._literal: dict[tuple[ResourceType, str], Bucket] = {}
        self._prefixed: dict[ResourceType, dict[str, Bucket]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self._by_type: dict[ResourceType, set[AclBinding]] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def __eq__(self, other: object) -> bool:
        """Equal when they hold the same bindings under the same ids (the indexes are
        derived from them)."""
        return isinstance(other, AclIndex) and self.by_id == other.by_id

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self.by_id.values())

    def id_of(self, acl: AclBinding) -> str | None:
        """The id of an existing binding equal to ``acl``, or None."""
        return self._ids.get(acl)

    def add(self, acl_id: str, acl: AclBinding) -> None:
        """Index ``acl`` under ``acl_id``."""
        self.remove(acl_id)
        self.by_id[acl_id] = acl
        self._ids[acl] = acl_id
        self._by_type.setdefault(acl.resource_type, set()).add(acl)
        if acl.pattern_type == PatternType.PREFIXED:
            bucket = self._prefixed.setdefault(acl.resource_type, {}).setdefault(acl.resource_name, {})
            bucket.setdefault(acl.principal, []).append(acl)
            self._prefix_lengths.setdefault(acl.resource_type, Counter())[len(acl.resource_name)] += 1
        else:
            self._literal.setdefault((acl.resource_type, acl.resource_name), {}).setdefault(
                acl.principal, []).append(acl)

    def remove(self, acl_id: str) -> AclBinding | None:
        """Drop the binding with ``acl_id``; returns it, or None if there was none."""
        acl = self.by_id.pop(acl_id, None)
        if acl is None:
            return None
        if self._ids.get(acl) == acl_id:
            del self._ids[acl]
        self._by_type[acl.resource_type].discard(acl)
        if acl.pattern_type == PatternType.PREFIXED:
            _drop(self._prefixed[acl.resource_type], acl.resource_name, acl)
            lengths = self._prefix_lengths[acl.resource_type]
            lengths[len(acl.resource_name)] -= 1
            if not lengths[len(acl.resource_name)]:
                del lengths[len(acl.resource_name)]
        else:
            _drop(self._literal, (acl.resource_type, acl.resource_name), acl)
        return acl

    def buckets(self, resource_type: ResourceType, name: str) -> Iterator[Bucket]:
        """The non-empty buckets (bindings by principal) of every pattern that applies to
        the resource: its literal name, ``*``, and every prefix of ``name`` in use."""
        bucket = self._literal.get((resource_type, name))
        if bucket:
            yield bucket
        if name != WILDCARD:
            bucket = self._literal.get((resource_type, WILDCARD))
            if bucket:
                yield bucket
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for length in self._prefix_lengths[resource_type]:
                if length <= len(name):
                    bucket = prefixed.get(name[:length])
                    if bucket:
                        yield bucket

    def applicable(self, resource_type: ResourceType, name: str) -> Iterator[AclBinding]:
        """Every binding whose pattern applies to the resource, any principal."""
        for bucket in self.buckets(resource_type, name):
            for acls in bucket.values():
                yield from acls

    def of_type(self, resource_type: ResourceType) -> Iterable[AclBinding]:
        """Every binding on resources of ``resource_type``."""
        return self._by_type.get(resource_type, ())

    def matching(self, f: AclBindingFilter) -> list[tuple[str, AclBinding]]:
        """(id, binding) of every binding ``f`` matches, in insertion order."""
        return [(i, acl) for i, acl in self.by_id.items() if f.matches(acl)]


def _drop(table: dict, key: object, acl: AclBinding) -> None:
    bucket = table[key]
    bucket[acl.principal].remove(acl)
    if not bucket[acl.principal]:
        del bucket[acl.principal]
    if not bucket:
        del table[key]


def _result(acl: AclBinding, principal: str, host: str, operation: AclOperation) -> AclPermissionType | None:
    """ALLOW/DENY if ``acl`` applies to this principal, host and operation, else None
    (Kafka's ``StandardAuthorizerData.findResult``; the resource is already matched)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != AclOperation.ALL and acl.operation != operation:
        if acl.permission != AclPermissionType.ALLOW:
            return None
        if operation == AclOperation.DESCRIBE:
            if acl.operation not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return acl.permission


@dataclass
class Authorizer:
    """``authorize`` answers one action from the current :class:`AclIndex`.

    ``super_users`` holds principals as ``Type:name`` strings (the ``super.users``
    config, split on ``;``); ``allow_everyone_if_no_acl_found`` is Kafka's config of the
    same name (default false)."""
    index: AclIndex
    super_users: frozenset[str] = field(default_factory=frozenset)
    allow_everyone_if_no_acl_found: bool = False

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``principal`` connected from ``host`` (the client's IP address as a
        string) may perform ``operation`` on the LITERAL resource ``(resource_type,
        name)``."""
        return self._decide(principal, host, operation, resource_type, name)[0]

    def decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
               name: str) -> tuple[bool, str]:
        """:meth:`authorize` and the rule that decided it, for an audit log:
        ``"SuperUser"``, ``"DefaultAllow"``/``"DefaultDeny"`` (no binding on the
        resource), ``"Deny"`` (bindings exist, none allows) or ``"MatchingAcl(...)"``."""
        ok, rule = self._decide(principal, host, operation, resource_type, name)
        return ok, rule if isinstance(rule, str) else f"MatchingAcl({rule})"

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> tuple[bool, str | AclBinding]:
        if principal in self.super_users:
            return True, "SuperUser"
        allow: AclBinding | None = None
        has_resource_acls = False
        for bucket in self.index.buckets(resource_type, name):
            has_resource_acls = True
            for who in (principal, WILDCARD_PRINCIPAL):
                for acl in bucket.get(who, ()):
                    result = _result(acl, principal, host, operation)
                    if result == AclPermissionType.DENY:
                        return False, acl
                    if result == AclPermissionType.ALLOW:
                        allow = acl
                if principal == WILDCARD_PRINCIPAL:
                    break
        if allow is not None:
            return True, allow
        if not has_resource_acls:
            ok = self.allow_everyone_if_no_acl_found
            return ok, "DefaultAllow" if ok else "DefaultDeny"
        return False, "Deny"

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[AclOperation]:
        """The operations of the resource type (kafka-acls.sh's supported set) that
        ``principal`` may perform on the resource: what Metadata/DescribeCluster/describe
        groups report as authorized operations (KIP-430; encode with
        :func:`hightide.protocol.acl.to_bit_field`)."""
        return frozenset(op for op in SUPPORTED_OPERATIONS.get(resource_type, ())
                         if self.authorize(principal, host, op, resource_type, name))

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether ``principal`` may perform ``operation`` on *some* resource of the type
        (Kafka's ``Authorizer.authorizeByResourceType``, used e.g. for an idempotent
        producer without IDEMPOTENT_WRITE on the cluster: WRITE on any topic): allowed
        if allowed on a resource named ``hardcode``, or by a wildcard ALLOW, or by a
        LITERAL/PREFIXED ALLOW not covered by a DENY on the same literal name or on a
        prefix of it; a wildcard DENY denies."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allows: list[AclBinding] = []
        wildcard_allow = False
        for acl in self.index.of_type(resource_type):
            if acl.host not in (host, WILDCARD) or acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
                (deny_literal if acl.pattern_type == PatternType.LITERAL else deny_prefixed).add(acl.resource_name)
            elif acl.permission == AclPermissionType.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allow = True
                else:
                    allows.append(acl)
        if wildcard_allow:
            return True
        for acl in allows:
            name = acl.resource_name
            if acl.pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False
