"""ACL and SCRAM metadata: the controller operations (Kafka's AclControlManager and
ScramControlManager rules), the records' JSON round trip, and replay into the image."""

from __future__ import annotations

import itertools

from hightide.cluster import records
from hightide.cluster.image import MetadataImage
from hightide.cluster.security_control import (
    ScramDeletion,
    ScramUpsertion,
    alter_scram_credentials,
    create_acls,
    delete_acls,
    describe_acls,
    describe_scram_credentials,
)
from hightide.cluster.security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from hightide.protocol.errors import ErrorCode
from hightide.security.acl import AclBinding, AclBindingFilter, AclOperation, PatternType, ResourceType
from hightide.security.scram import ScramClient, ScramMechanism, ScramServer, salted_password

READ = AclBinding.of(2, "orders", 3, "User:alice", "*", 3, 3)
WRITE_PREFIX = AclBinding.of(2, "app-", 4, "User:bob", "*", 4, 3)


def _apply(image: MetadataImage, recs: list) -> None:
    for r in recs:  # through the codec, as the metadata log does
        image.apply(records.decode(records.encode(r)), image.offset + 1)


def _ids() -> "itertools.count[int]":
    return itertools.count()


def test_records_round_trip() -> None:
    for r in (AccessControlEntryRecord("id", 2, "t", 3, "User:a", "*", 3, 3), RemoveAccessControlEntryRecord("id"),
              UserScramCredentialRecord.of("u", 2, b"salt", b"\x00sk", b"\xffsv", 4096),
              RemoveUserScramCredentialRecord("u", 2)):
        assert records.decode(records.encode(r)) == r


def test_create_describe_delete_acls() -> None:
    image = MetadataImage()
    counter = _ids()
    results, recs = create_acls(image.security, [READ, WRITE_PREFIX, READ,
                                                 AclBinding.of(4, "x", 3, "User:a", "*", 7, 3)],
                                new_id=lambda: f"id{next(counter)}")
    assert results == [(ErrorCode.none, None)] * 3 + [
        (ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is kafka-cluster")]
    assert len(recs) == 2  # the duplicate in the request is created once
    _apply(image, recs)
    again, none = create_acls(image.security, [READ])
    assert again == [(ErrorCode.none, None)] and none == []  # an existing ACL: success, no record
    code, found = describe_acls(image.security, AclBindingFilter(ResourceType.TOPIC, "app-orders", PatternType.MATCH))
    assert code == (ErrorCode.none, None) and found == [WRITE_PREFIX]
    bad = describe_acls(image.security, AclBindingFilter.of(1, None, 0, None, None, 1, 1))
    assert bad[0] == (ErrorCode.invalid_request, "Unknown patternFilter.")
    results2, removals = delete_acls(image.security, [AclBindingFilter(principal="User:alice"), AclBindingFilter(),
                                                      AclBindingFilter.of(1, None, 1, None, None, 0, 1)])
    assert [r.matched for r in results2[:2]] == [[READ], [READ, WRITE_PREFIX]]
    assert results2[2].error == (ErrorCode.invalid_request, "Unknown entryFilter.")
    assert sorted(r.id for r in removals) == ["id0", "id1"]  # READ removed once though matched twice
    _apply(image, removals)
    assert len(image.security.acls) == 0


def test_acl_replay_builds_the_authorizer_index() -> None:
    from hightide.security.authorizer import Authorizer
    image = MetadataImage()
    _apply(image, create_acls(image.security, [WRITE_PREFIX])[1])
    auth = Authorizer(image.security.acls)
    assert auth.authorize("User:bob", "1.2.3.4", AclOperation.WRITE, ResourceType.TOPIC, "app-x")
    assert auth.authorize("User:bob", "1.2.3.4", AclOperation.DESCRIBE, ResourceType.TOPIC, "app-x")
    assert not auth.authorize("User:bob", "1.2.3.4", AclOperation.READ, ResourceType.TOPIC, "app-x")


def _upsert(name: str, mech: int = 2, iterations: int = 4096, password: str = "pw") -> ScramUpsertion:
    m = ScramMechanism.from_type(mech) or ScramMechanism.SCRAM_SHA_512
    return ScramUpsertion(name, mech, iterations, b"salty", salted_password(m.hash_name, password, b"salty",
                                                                            max(iterations, 1)))


def test_alter_scram_validation_matches_kafka() -> None:
    image = MetadataImage()
    results, recs = alter_scram_credentials(image.security, [ScramDeletion("ghost", 1), ScramDeletion("", 1),
                                                             ScramDeletion("x", 9)],
                                            [_upsert("alice"), _upsert("few", iterations=4095),
                                             _upsert("many", iterations=16385), _upsert("mech", mech=0),
                                             _upsert("twice"), _upsert("twice")])
    assert dict(results) == {
        "alice": (ErrorCode.none, None),
        "ghost": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "x": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "mech": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "twice": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
    }
    assert len(recs) == 1 and isinstance(recs[0], UserScramCredentialRecord)
    assert "pw" not in records.encode(recs[0]).decode()


def test_scram_credentials_authenticate_after_replay_and_describe() -> None:
    image = MetadataImage()
    _apply(image, alter_scram_credentials(image.security, [], [_upsert("alice", 2, 8192, "secret"),
                                                               _upsert("bob", 1)])[1])
    cred = image.security.scram_credential("alice", 2)
    server = ScramServer(ScramMechanism.SCRAM_SHA_512, lambda u: image.security.scram_credential(u, 2))
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, "alice", "secret")
    client.verify(server.step(client.final(server.step(client.first()))))
    assert cred is not None and cred.iterations == 8192
    described = describe_scram_credentials(image.security, None)
    assert [(d.user, d.credentials) for d in described] == [("alice", [(2, 8192)]), ("bob", [(1, 4096)])]
    listed = describe_scram_credentials(image.security, ["bob", "nobody", "bob"])
    assert [(d.user, d.error[0]) for d in listed] == [("bob", ErrorCode.duplicate_resource),
                                                      ("nobody", ErrorCode.resource_not_found)]
    assert listed[1].error[1] == "Attempt to describe a user credential that does not exist: nobody"
    _apply(image, alter_scram_credentials(image.security, [ScramDeletion("bob", 1)], [])[1])
    assert image.security.scram_credential("bob", 1) is None
