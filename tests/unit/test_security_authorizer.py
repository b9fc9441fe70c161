"""Kafka's StandardAuthorizer semantics over the ACL index, and AclBindingFilter
matching/validation (DescribeAcls/DeleteAcls), checked against a brute-force model."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAcl,
    PatternType,
    ResourceType,
    validate_filter,
    validate_new_acl,
)
from hightide.security.authorizer import AclIndex, Authorizer

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
O = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(rt: ResourceType, name: str, pt: PatternType, principal: str, op: AclOperation,
        perm: AclPermissionType = ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


def authorizer(*acls: AclBinding, super_users: tuple[str, ...] = (), everyone: bool = False) -> Authorizer:
    index = AclIndex()
    for i, a in enumerate(acls):
        index.add(f"id{i}", a)
    return Authorizer(index, frozenset(super_users), everyone)


def test_literal_allow_only_for_that_principal_and_name() -> None:
    a = authorizer(acl(T, "orders", LIT, "User:alice", O.READ))
    assert a.authorize("User:alice", "10.0.0.1", O.READ, T, "orders")
    assert not a.authorize("User:bob", "10.0.0.1", O.READ, T, "orders")
    assert not a.authorize("User:alice", "10.0.0.1", O.WRITE, T, "orders")
    assert not a.authorize("User:alice", "10.0.0.1", O.READ, T, "orders2")  # no ACL there: default deny
    assert not a.authorize("User:alice", "10.0.0.1", O.READ, G, "orders")


def test_prefixed_and_wildcard_resource_and_principal() -> None:
    a = authorizer(acl(T, "app-", PRE, "User:alice", O.WRITE), acl(T, "*", LIT, "User:*", O.DESCRIBE))
    assert a.authorize("User:alice", "h", O.WRITE, T, "app-orders")
    assert a.authorize("User:alice", "h", O.WRITE, T, "app-")
    assert not a.authorize("User:alice", "h", O.WRITE, T, "ap")
    assert a.authorize("User:anyone", "h", O.DESCRIBE, T, "whatever")
    # Kafka's matchingPrincipals is {principal, User:*} whatever the principal's type
    assert a.authorize("Group:x", "h", O.DESCRIBE, T, "whatever")


def test_deny_wins_over_allow_at_any_level() -> None:
    a = authorizer(acl(T, "*", LIT, "User:alice", O.ALL), acl(T, "secret-", PRE, "User:alice", O.READ, DENY))
    assert a.authorize("User:alice", "h", O.READ, T, "public")
    assert not a.authorize("User:alice", "h", O.READ, T, "secret-plans")
    assert a.authorize("User:alice", "h", O.WRITE, T, "secret-plans")


def test_deny_for_wildcard_principal_denies_everyone_listed() -> None:
    a = authorizer(acl(T, "t", LIT, "User:alice", O.READ), acl(T, "t", LIT, "User:*", O.READ, DENY))
    assert not a.authorize("User:alice", "h", O.READ, T, "t")


def test_host_matching() -> None:
    a = authorizer(acl(T, "t", LIT, "User:alice", O.READ, host="10.0.0.1"))
    assert a.authorize("User:alice", "10.0.0.1", O.READ, T, "t")
    assert not a.authorize("User:alice", "10.0.0.2", O.READ, T, "t")
    d = authorizer(acl(T, "t", LIT, "User:alice", O.READ), acl(T, "t", LIT, "User:alice", O.READ, DENY, "10.9.9.9"))
    assert d.authorize("User:alice", "10.0.0.1", O.READ, T, "t")
    assert not d.authorize("User:alice", "10.9.9.9", O.READ, T, "t")


@pytest.mark.parametrize("granted, implied", [(O.READ, True), (O.WRITE, True), (O.DELETE, True), (O.ALTER, True),
                                              (O.CREATE, False), (O.ALTER_CONFIGS, False), (O.ALL, True)])
def test_allow_implies_describe(granted: AclOperation, implied: bool) -> None:
    a = authorizer(acl(T, "t", LIT, "User:u", granted))
    assert a.authorize("User:u", "h", O.DESCRIBE, T, "t") is implied


def test_alter_configs_implies_describe_configs_and_deny_never_implies() -> None:
    a = authorizer(acl(T, "t", LIT, "User:u", O.ALTER_CONFIGS))
    assert a.authorize("User:u", "h", O.DESCRIBE_CONFIGS, T, "t")
    assert not a.authorize("User:u", "h", O.DESCRIBE, T, "t")
    d = authorizer(acl(T, "t", LIT, "User:u", O.ALL), acl(T, "t", LIT, "User:u", O.READ, DENY))
    assert d.authorize("User:u", "h", O.DESCRIBE, T, "t")  # DENY READ does not deny DESCRIBE
    assert not d.authorize("User:u", "h", O.READ, T, "t")
    all_deny = authorizer(acl(T, "t", LIT, "User:u", O.READ), acl(T, "t", LIT, "User:u", O.ALL, DENY))
    assert not all_deny.authorize("User:u", "h", O.READ, T, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    a = authorizer(acl(T, "t", LIT, "User:alice", O.READ, DENY), super_users=("User:admin",))
    assert a.authorize("User:admin", "h", O.ALTER, C, "kafka-cluster")
    assert a.authorize("User:admin", "h", O.READ, T, "t")
    e = authorizer(acl(T, "t", LIT, "User:alice", O.READ), everyone=True)
    assert e.authorize("User:bob", "h", O.READ, T, "other")  # no ACL on "other" at all
    assert not e.authorize("User:bob", "h", O.READ, T, "t")  # ACLs exist on "t", none for bob
    assert e.decide("User:bob", "h", O.READ, T, "other")[1] == "DefaultAllow"
    assert not authorizer().authorize("User:bob", "h", O.READ, T, "x")


def test_remove_and_replace_keep_index_consistent() -> None:
    idx = AclIndex()
    a1 = acl(T, "app-", PRE, "User:u", O.READ)
    idx.add("a", a1)
    idx.add("b", acl(T, "app-x", LIT, "User:u", O.READ))
    auth = Authorizer(idx)
    assert auth.authorize("User:u", "h", O.READ, T, "app-z")
    assert idx.remove("a") == a1 and idx.remove("a") is None
    assert not auth.authorize("User:u", "h", O.READ, T, "app-z")
    assert auth.authorize("User:u", "h", O.READ, T, "app-x")
    assert idx.id_of(acl(T, "app-x", LIT, "User:u", O.READ)) == "b" and len(idx) == 1


def test_authorize_by_resource_type() -> None:
    a = authorizer(acl(T, "app-", PRE, "User:u", O.WRITE))
    assert a.authorize_by_resource_type("User:u", "h", O.WRITE, T)
    assert not a.authorize_by_resource_type("User:v", "h", O.WRITE, T)
    b = authorizer(acl(T, "app-x", LIT, "User:u", O.WRITE), acl(T, "app", PRE, "User:u", O.WRITE, DENY))
    assert not b.authorize_by_resource_type("User:u", "h", O.WRITE, T)
    c = authorizer(acl(T, "*", LIT, "User:u", O.WRITE), acl(T, "*", LIT, "User:*", O.WRITE, DENY))
    assert not c.authorize_by_resource_type("User:u", "h", O.WRITE, T)


# --- a brute-force model of StandardAuthorizer ----------------------------------------------

def model(acls: list[AclBinding], principal: str, host: str, op: AclOperation, rt: ResourceType, name: str) -> bool:
    on_resource = [a for a in acls if a.resource_type == rt and (
        (a.pattern_type == LIT and a.resource_name in (name, "*")) or
        (a.pattern_type == PRE and name.startswith(a.resource_name)))]
    def applies(a: AclBinding) -> bool:
        if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
            return False
        if a.operation in (O.ALL, op):
            return True
        if a.permission != ALLOW:
            return False
        return (op == O.DESCRIBE and a.operation in (O.READ, O.WRITE, O.DELETE, O.ALTER)) or (
            op == O.DESCRIBE_CONFIGS and a.operation == O.ALTER_CONFIGS)
    hits = [a for a in on_resource if applies(a)]
    if any(a.permission == DENY for a in hits):
        return False
    return bool(hits) or False


_names = st.sampled_from(["a", "ab", "abc", "b", "*", "ab*"])
_acls = st.builds(acl, st.sampled_from([T, G]), _names, st.sampled_from([LIT, PRE]),
                  st.sampled_from(["User:u", "User:v", "User:*"]),
                  st.sampled_from([O.READ, O.WRITE, O.DESCRIBE, O.ALL, O.ALTER_CONFIGS, O.DESCRIBE_CONFIGS]),
                  st.sampled_from([ALLOW, DENY]), st.sampled_from(["*", "h1"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_acls, max_size=12, unique=True))
def test_index_matches_brute_force_model(acls: list[AclBinding]) -> None:
    a = authorizer(*acls)
    for principal, host, op, rt, name in itertools.product(
            ["User:u", "User:v"], ["h1", "h2"], [O.READ, O.DESCRIBE, O.DESCRIBE_CONFIGS], [T, G],
            ["a", "abc", "b", "*", "zz"]):
        assert a.authorize(principal, host, op, rt, name) == model(acls, principal, host, op, rt, name), (
            principal, host, op, rt, name)


# --- filters ---------------------------------------------------------------------------------

def test_filter_matching_rules() -> None:
    lit = acl(T, "foo", LIT, "User:u", O.READ)
    wild = acl(T, "*", LIT, "User:u", O.READ)
    pre = acl(T, "fo", PRE, "User:u", O.READ, DENY)
    other = acl(G, "foo", LIT, "User:v", O.READ)
    every = [lit, wild, pre, other]

    def hits(f: AclBindingFilter) -> list[AclBinding]:
        return [a for a in every if f.matches(a)]

    assert hits(AclBindingFilter()) == every
    assert hits(AclBindingFilter(T, "foo", PatternType.MATCH)) == [lit, wild, pre]
    assert hits(AclBindingFilter(T, "foo", PatternType.ANY)) == [lit]
    assert hits(AclBindingFilter(T, "fo", PRE)) == [pre]
    assert hits(AclBindingFilter(T, "*", LIT)) == [wild]
    assert hits(AclBindingFilter(T, None, LIT)) == [lit, wild]
    assert hits(AclBindingFilter(principal="User:v")) == [other]
    assert hits(AclBindingFilter(permission=DENY)) == [pre]
    assert hits(AclBindingFilter(operation=O.WRITE)) == []
    assert hits(AclBindingFilter(host="*")) == every


def test_filter_validation() -> None:
    for bad in (AclBindingFilter.of(0, None, 1, None, None, 1, 1), AclBindingFilter.of(1, None, 99, None, None, 1, 1)):
        with pytest.raises(InvalidAcl, match="Unknown patternFilter."):
            validate_filter(bad)
    for bad in (AclBindingFilter.of(1, None, 1, None, None, 0, 1), AclBindingFilter.of(1, None, 1, None, None, 1, 0)):
        with pytest.raises(InvalidAcl, match="Unknown entryFilter."):
            validate_filter(bad)
    validate_filter(AclBindingFilter())


@pytest.mark.parametrize("args, message", [
    ((1, "t", 3, "User:a", "*", 3, 3), "Invalid resourceType ANY"),
    ((0, "t", 3, "User:a", "*", 3, 3), "Invalid resourceType UNKNOWN"),
    ((2, "t", 2, "User:a", "*", 3, 3), "Invalid patternType MATCH"),
    ((2, "t", 1, "User:a", "*", 3, 3), "Invalid patternType ANY"),
    ((2, "t", 3, "User:a", "*", 1, 3), "Invalid operation ANY"),
    ((2, "t", 3, "User:a", "*", 77, 3), "Invalid operation UNKNOWN"),
    ((2, "t", 3, "User:a", "*", 3, 1), "Invalid permissionType ANY"),
    ((2, "", 3, "User:a", "*", 3, 3), "Invalid empty resource name"),
    ((4, "other", 3, "User:a", "*", 3, 3), "The only valid name for the CLUSTER resource is kafka-cluster"),
    ((2, "t", 3, "alice", "*", 3, 3), "principalType:principalName"),
])
def test_new_acl_validation(args: tuple, message: str) -> None:
    with pytest.raises(InvalidAcl, match=message):
        validate_new_acl(AclBinding.of(*args))
    validate_new_acl(AclBinding.of(4, "kafka-cluster", 3, "User:a", "*", 7, 3))


def test_authorized_operations() -> None:
    a = authorizer(acl(T, "t", LIT, "User:u", O.READ), acl(T, "t", LIT, "User:u", O.ALTER_CONFIGS))
    assert a.authorized_operations("User:u", "h", T, "t") == {O.READ, O.DESCRIBE, O.ALTER_CONFIGS,
                                                              O.DESCRIBE_CONFIGS}
    assert a.authorized_operations("User:v", "h", T, "t") == frozenset()


def test_index_equality_and_deepcopy() -> None:
    """The image is compared and copied in the controller's tests: equal bindings under
    equal ids are equal indexes, and a deep copy authorizes the same."""
    import copy
    a = authorizer(acl(T, "p-", PRE, "User:u", O.READ))
    b = copy.deepcopy(a)
    assert a.index == b.index and b.authorize("User:u", "h", O.READ, T, "p-x")
    b.index.remove("id0")
    assert a.index != b.index and a.authorize("User:u", "h", O.READ, T, "p-x")
