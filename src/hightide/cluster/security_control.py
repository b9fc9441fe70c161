"""The controller's ACL and SCRAM operations, sans-IO: Kafka's ``AclControlManager``
and ``ScramControlManager`` (and ``ScramImage.describe``).

Each write returns ``(results, records)`` computed from the current image without
changing it; the records are appended to the metadata log as one batch and applied by
:func:`hightide.cluster.security_image.apply_security_record`. Errors are
``(ErrorCode, message)`` pairs with Kafka's codes and texts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..protocol.errors import ErrorCode
from ..security.acl import AclBinding, AclBindingFilter, InvalidAcl, validate_filter, validate_new_acl
from ..security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism, credential_from_salted
from .security_image import SecurityImage
from .security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    SecurityRecord,
    UserScramCredentialRecord,
)

MAX_RECORDS_PER_USER_OP = 10000
"""Kafka's bound on the records one ACL request may produce."""
Error = tuple[ErrorCode, str | None]
OK: Error = (ErrorCode.none, None)


def create_acls(image: SecurityImage, acls: Sequence[AclBinding],
                new_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> tuple[list[Error], list[SecurityRecord]]:
    """CreateAcls: one result per binding, in order. An invalid binding gets
    INVALID_REQUEST with Kafka's message; a binding that already exists (or appears
    earlier in the request) succeeds without a new record."""
    results: list[Error] = []
    records: list[SecurityRecord] = []
    seen: set[AclBinding] = set()
    for acl in acls:
        try:
            validate_new_acl(acl)
        except InvalidAcl as exc:
            results.append((ErrorCode.invalid_request, str(exc)))
            continue
        if acl not in seen and image.acls.id_of(acl) is None:
            if len(records) >= MAX_RECORDS_PER_USER_OP:
                results.append((ErrorCode.invalid_request, f"Cannot create more than {MAX_RECORDS_PER_USER_OP} "
                                "acls in a single request."))
                continue
            acl_id = new_id()
            while acl_id in image.acls.by_id:
                acl_id = new_id()
            records.append(AccessControlEntryRecord(acl_id, acl.resource_type, acl.resource_name, acl.pattern_type,
                                                    acl.principal, acl.host, acl.operation, acl.permission))
        seen.add(acl)
        results.append(OK)
    return results, records


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One filter's outcome: an error, or the bindings it matched (and deleted)."""
    error: Error
    matched: list[AclBinding]


def delete_acls(image: SecurityImage, filters: Sequence[AclBindingFilter]
                ) -> tuple[list[DeleteResult], list[SecurityRecord]]:
    """DeleteAcls: per filter, every binding it matches (a binding matched by two filters
    is reported under both and removed once). An invalid filter gets INVALID_REQUEST
    ("Unknown patternFilter."/"Unknown entryFilter."); more than
    :data:`MAX_RECORDS_PER_USER_OP` removals fail the filter that crossed the bound."""
    results: list[DeleteResult] = []
    removed: dict[str, RemoveAccessControlEntryRecord] = {}
    for f in filters:
        try:
            validate_filter(f)
        except InvalidAcl as exc:
            results.append(DeleteResult((ErrorCode.invalid_request, str(exc)), []))
            continue
        matched = image.acls.matching(f)
        new = {i: RemoveAccessControlEntryRecord(i) for i, _ in matched if i not in removed}
        if len(removed) + len(new) > MAX_RECORDS_PER_USER_OP:
            results.append(DeleteResult((ErrorCode.unknown_server_error, f"Cannot remove more than "
                                         f"{MAX_RECORDS_PER_USER_OP} acls in a single delete operation."), []))
            continue
        removed.update(new)
        results.append(DeleteResult(OK, [acl for _, acl in matched]))
    return results, list(removed.values())


def describe_acls(image: SecurityImage, f: AclBindingFilter) -> tuple[Error, list[AclBinding]]:
    """DescribeAcls: the bindings ``f`` matches, or INVALID_REQUEST for an invalid filter."""
    try:
        validate_filter(f)
    except InvalidAcl as exc:
        return (ErrorCode.invalid_request, str(exc)), []
    return OK, [acl for _, acl in image.acls.matching(f)]


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int


_TWICE: Error = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


def _validate_user_and_mechanism(name: str, mechanism: int) -> Error:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if ScramMechanism.from_type(mechanism) is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return OK


def _validate_upsertion(u: ScramUpsertion) -> Error:
    error = _validate_user_and_mechanism(u.name, u.mechanism)
    if error != OK:
        return error
    if u.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    return OK


def alter_scram_credentials(image: SecurityImage, deletions: Sequence[ScramDeletion],
                            upsertions: Sequence[ScramUpsertion]
                            ) -> tuple[list[tuple[str, Error]], list[SecurityRecord]]:
    """AlterUserScramCredentials (Kafka's ``ScramControlManager.alterCredentials``): at
    most one change per user per request (a second one fails the user with
    DUPLICATE_RESOURCE); a deletion of a credential that does not exist is
    RESOURCE_NOT_FOUND; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; iterations outside
    4096..16384 or an empty name UNACCEPTABLE_CREDENTIAL. Results: one per user (deletions,
    then upsertions, then failures); records: removals and new credentials (StoredKey and
    ServerKey derived from the salted password, which is not kept)."""
    to_delete: dict[str, ScramDeletion] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    errors: dict[str, Error] = {}
    for d in deletions:
        if d.name in errors:
            continue
        if to_delete.pop(d.name, None) is not None:
            errors[d.name] = _TWICE
            continue
        error = _validate_user_and_mechanism(d.name, d.mechanism)
        if error == OK and image.scram_credential(d.name, d.mechanism) is None:
            error = ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        if error != OK:
            errors[d.name] = error
        else:
            to_delete[d.name] = d
    for u in upsertions:
        if u.name in errors:
            continue
        if to_delete.pop(u.name, None) is not None or to_upsert.pop(u.name, None) is not None:
            errors[u.name] = _TWICE
            continue
        error = _validate_upsertion(u)
        if error != OK:
            errors[u.name] = error
        else:
            to_upsert[u.name] = u
    results: list[tuple[str, Error]] = []
    records: list[SecurityRecord] = []
    for d in to_delete.values():
        results.append((d.name, OK))
        records.append(RemoveUserScramCredentialRecord(d.name, d.mechanism))
    for u in to_upsert.values():
        mechanism = ScramMechanism.from_type(u.mechanism)
        assert mechanism is not None
        cred = credential_from_salted(mechanism.hash_name, u.salt, u.salted_password, u.iterations)
        records.append(UserScramCredentialRecord.of(u.name, u.mechanism, cred.salt, cred.stored_key, cred.server_key,
                                                    cred.iterations))
        results.append((u.name, OK))
    results.extend(errors.items())
    return results, records


@dataclass(frozen=True, slots=True)
class ScramDescription:
    user: str
    error: Error
    credentials: list[tuple[int, int]]  # (mechanism type, iterations)


def describe_scram_credentials(image: SecurityImage, users: Sequence[str] | None) -> list[ScramDescription]:
    """DescribeUserScramCredentials (Kafka's ``ScramImage.describe``): every user with a
    credential when ``users`` is None or empty; a listed user without any credential gets
    RESOURCE_NOT_FOUND, one listed twice DUPLICATE_RESOURCE. Salts and keys are never
    returned."""
    known = image.scram_users()
    if not users:
        wanted = {u: False for u in sorted(known)}
    else:
        wanted = {}
        for u in users:
            wanted[u] = u in wanted
    out = []
    for user, duplicate in wanted.items():
        if duplicate:
            out.append(ScramDescription(user, (ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials for "
                                               f"the same user twice in a single request: {user}"), []))
        elif user not in known:
            out.append(ScramDescription(user, (ErrorCode.resource_not_found, "Attempt to describe a user credential "
                                               f"that does not exist: {user}"), []))
        else:
            out.append(ScramDescription(user, OK, sorted(known[user].items())))
    return out
