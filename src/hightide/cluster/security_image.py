"""ACLs and SCRAM credentials in the metadata image (Kafka's ``AclsImage`` and
``ScramImage``).

:func:`apply_security_record` is the only mutator; it is called by
:meth:`hightide.cluster.image.MetadataImage.apply` for the records of
:mod:`hightide.cluster.security_records`, in log order, so a replay of the metadata log
rebuilds the same ACLs and credentials. The ACLs live in an
:class:`~hightide.security.authorizer.AclIndex`, ready for per-request authorization.

Replay rules (Kafka's ``AclControlManager.replay``/``ScramControlManager.replay``): an
ACL record adds (or replaces) the binding with its id; a credential record replaces the
user's credential for that mechanism. A remove record for an unknown id or credential is
ignored: Kafka's controller treats it as fatal, but these records are only generated
against the current image, and a replay that stops the process would make the whole log
unreadable (the same choice as :mod:`hightide.cluster.broker_image`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..security.acl import AclBinding
from ..security.authorizer import AclIndex
from ..security.scram import ScramCredential
from .security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    SecurityRecord,
    UserScramCredentialRecord,
)


@dataclass
class SecurityImage:
    """``acls``: the ACL bindings by id, indexed; ``scram``: credentials by
    (user name, mechanism type code)."""
    acls: AclIndex = field(default_factory=AclIndex)
    scram: dict[tuple[str, int], ScramCredential] = field(default_factory=dict)

    def scram_credential(self, user: str, mechanism: int) -> ScramCredential | None:
        """The credential the SCRAM server checks a proof against, or None."""
        return self.scram.get((user, mechanism))

    def scram_users(self) -> dict[str, dict[int, int]]:
        """{user: {mechanism type: iterations}} — what DescribeUserScramCredentials shows."""
        out: dict[str, dict[int, int]] = {}
        for (user, mechanism), cred in self.scram.items():
            out.setdefault(user, {})[mechanism] = cred.iterations
        return out


def apply_security_record(image: SecurityImage, record: SecurityRecord) -> None:
    """Apply one ACL or SCRAM record to ``image``."""
    match record:
        case AccessControlEntryRecord():
            image.acls.add(record.id, AclBinding.of(record.resource_type, record.resource_name, record.pattern_type,
                                                    record.principal, record.host, record.operation,
                                                    record.permission_type))
        case RemoveAccessControlEntryRecord(id=acl_id):
            image.acls.remove(acl_id)
        case UserScramCredentialRecord():
            image.scram[(record.name, record.mechanism)] = ScramCredential(
                record.salt_bytes, record.stored_key_bytes, record.server_key_bytes, record.iterations)
        case RemoveUserScramCredentialRecord(name=name, mechanism=mechanism):
            image.scram.pop((name, mechanism), None)
