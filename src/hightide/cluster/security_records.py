"""ACL and SCRAM-credential metadata records, with the fields of Kafka's
``__cluster_metadata`` records of the same names (``AccessControlEntryRecord``,
``RemoveAccessControlEntryRecord``, ``UserScramCredentialRecord``,
``RemoveUserScramCredentialRecord``).

They are stored like every other hightide metadata record (see
:mod:`hightide.cluster.records`): one JSON object per record value with a ``type`` and a
``v``. Kafka's ``bytes`` fields (salt, StoredKey, ServerKey) are kept as base64 text so
the value stays JSON; the properties ``salt_bytes`` etc. give the bytes. Enum fields keep
Kafka's numeric codes (:mod:`hightide.security.acl`; SCRAM mechanism 1 = SHA-256,
2 = SHA-512). A SCRAM record never holds a password nor a salted password: only what the
server needs to verify a proof.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class AccessControlEntryRecord:
    """One ACL binding, under a controller-chosen UUID ``id``."""
    type: ClassVar[str] = "access_control_entry"
    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class RemoveAccessControlEntryRecord:
    type: ClassVar[str] = "remove_access_control_entry"
    id: str


@dataclass(frozen=True)
class UserScramCredentialRecord:
    """A user's credential for one mechanism (replaces any earlier one)."""
    type: ClassVar[str] = "user_scram_credential"
    name: str
    mechanism: int
    salt: str  # base64
    stored_key: str  # base64
    server_key: str  # base64
    iterations: int

    @classmethod
    def of(cls, name: str, mechanism: int, salt: bytes, stored_key: bytes, server_key: bytes,
           iterations: int) -> UserScramCredentialRecord:
        b64 = base64.b64encode
        return cls(name, mechanism, b64(salt).decode(), b64(stored_key).decode(), b64(server_key).decode(),
                   iterations)

    @property
    def salt_bytes(self) -> bytes:
        return base64.b64decode(self.salt)

    @property
    def stored_key_bytes(self) -> bytes:
        return base64.b64decode(self.stored_key)

    @property
    def server_key_bytes(self) -> bytes:
        return base64.b64decode(self.server_key)


@dataclass(frozen=True)
class RemoveUserScramCredentialRecord:
    type: ClassVar[str] = "remove_user_scram_credential"
    name: str
    mechanism: int


SECURITY_RECORD_TYPES = (AccessControlEntryRecord, RemoveAccessControlEntryRecord, UserScramCredentialRecord,
                         RemoveUserScramCredentialRecord)
SecurityRecord = (AccessControlEntryRecord | RemoveAccessControlEntryRecord | UserScramCredentialRecord
                  | RemoveUserScramCredentialRecord)
