"""Security half of :class:`hightide.client.AdminClient` (a mixin): ACLs —
DescribeAcls (29), CreateAcls (30), DeleteAcls (31) — and SCRAM credentials —
DescribeUserScramCredentials (50), AlterUserScramCredentials (51) — as Kafka's
``Admin.describeAcls``/``createAcls``/``deleteAcls``/``describeUserScramCredentials``/
``alterUserScramCredentials`` use them (``kafka-acls.sh``, ``kafka-configs.sh``).

Requests go to any broker (a broker forwards the writes to the controller). The SCRAM
salted password is derived here, as Kafka's admin client does: the password never leaves
this process; the broker receives the salt, the iteration count and the salted password.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..security.acl import AclBinding, AclBindingFilter
from ..security.scram import MAX_ITERATIONS, ScramMechanism, salted_password
from .errors import ErrorCode, KafkaError, error_for

if TYPE_CHECKING:
    from .connection import BrokerConnection

__all__ = ["ScramCredentialInfo", "ScramUpsert", "SecurityMixin"]


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism | None  # None: a mechanism code this client does not know
    iterations: int


@dataclass(frozen=True, slots=True)
class ScramUpsert:
    """Set ``user``'s credential for ``mechanism`` to ``password`` (random 32-byte salt
    unless ``salt`` is given)."""
    user: str
    mechanism: ScramMechanism
    password: str
    iterations: int = 4096
    salt: bytes | None = None


def _filter_body(f: AclBindingFilter) -> dict[str, Any]:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.resource_name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
            "operation": int(f.operation), "permission_type": int(f.permission)}


class SecurityMixin:
    """ACL and SCRAM-credential calls for :class:`~hightide.client.AdminClient`."""

    async def _security_request(self, api_key: int, wanted_max: int, our_min: int, body: dict[str, Any]) -> Any:
        async def attempt() -> Any:
            conn: BrokerConnection = await self._any_conn()  # type: ignore[attr-defined]
            return await conn.request(api_key, conn.pick_version(api_key, wanted_max, our_min), body)
        return await self._with_retries(attempt)  # type: ignore[attr-defined]

    async def describe_acls(self, f: AclBindingFilter) -> list[AclBinding]:
        """Every ACL binding ``f`` matches. Raises the broker's :class:`KafkaError`
        (INVALID_REQUEST for an invalid filter, SECURITY_DISABLED on a Kafka broker
        without an authorizer)."""
        resp = await self._security_request(29, 3, 1, _filter_body(f))
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, resp.error_message)
        return [AclBinding.of(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                              a.permission_type) for r in resp.resources for a in r.acls]

    async def create_acls(self, bindings: list[AclBinding], *, raise_on_error: bool = True
                          ) -> dict[AclBinding, KafkaError | None]:
        """Create ``bindings`` (an existing one is left as it is and counts as created)."""
        resp = await self._security_request(30, 3, 1, {"creations": [
            {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
             "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
             "operation": int(b.operation), "permission_type": int(b.permission)} for b in bindings]})
        out: dict[AclBinding, KafkaError | None] = {}
        for b, r in zip(bindings, resp.results):
            out[b] = None if r.error_code == ErrorCode.none else error_for(r.error_code, r.error_message)
        return _finish(out, raise_on_error)

    async def delete_acls(self, filters: list[AclBindingFilter], *, raise_on_error: bool = True
                          ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete every binding each filter matches; per filter, the bindings deleted."""
        resp = await self._security_request(31, 3, 1, {"filters": [_filter_body(f) for f in filters]})
        out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
        for f, r in zip(filters, resp.filter_results):
            if r.error_code != ErrorCode.none:
                out[f] = error_for(r.error_code, r.error_message)
            else:
                out[f] = [AclBinding.of(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                        m.operation, m.permission_type) for m in r.matching_acls]
        return _finish(out, raise_on_error)

    async def describe_user_scram_credentials(self, users: list[str] | None = None, *, raise_on_error: bool = True
                                              ) -> dict[str, list[ScramCredentialInfo] | KafkaError]:
        """Mechanisms and iteration counts per user (every user with a credential when
        ``users`` is None); an unknown user is RESOURCE_NOT_FOUND."""
        body = {"users": None if users is None else [{"name": u} for u in users]}
        resp = await self._security_request(50, 0, 0, body)
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, resp.error_message)
        out: dict[str, list[ScramCredentialInfo] | KafkaError] = {}
        for r in resp.results:
            if r.error_code != ErrorCode.none:
                out[r.user] = error_for(r.error_code, r.error_message)
            else:
                out[r.user] = [ScramCredentialInfo(ScramMechanism.from_type(c.mechanism), c.iterations)
                               for c in r.credential_infos]
        return _finish(out, raise_on_error)

    async def alter_user_scram_credentials(self, upserts: list[ScramUpsert],
                                           deletions: list[tuple[str, ScramMechanism]] | None = None,
                                           *, raise_on_error: bool = True) -> dict[str, KafkaError | None]:
        """Set and/or delete SCRAM credentials; per user, None or the broker's error
        (UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, ...)."""
        ups = []
        for u in upserts:
            salt = u.salt if u.salt is not None else secrets.token_bytes(32)
            # A count outside Kafka's bounds is refused by the broker (UNACCEPTABLE_CREDENTIAL)
            # whatever the salted password; clamping only keeps a typo from spinning here.
            rounds = min(max(u.iterations, 1), MAX_ITERATIONS)
            ups.append({"name": u.user, "mechanism": u.mechanism.type, "iterations": u.iterations, "salt": salt,
                        "salted_password": salted_password(u.mechanism.hash_name, u.password, salt, rounds)})
        resp = await self._security_request(51, 0, 0, {
            "deletions": [{"name": n, "mechanism": m.type} for n, m in deletions or ()], "upsertions": ups})
        out: dict[str, KafkaError | None] = {}
        for r in resp.results:
            out[r.user] = None if r.error_code == ErrorCode.none else error_for(r.error_code, r.error_message)
        return _finish(out, raise_on_error)


def _finish(out: dict, raise_on_error: bool) -> dict:
    if raise_on_error:
        for v in out.values():
            if isinstance(v, KafkaError):
                raise v
    return out
