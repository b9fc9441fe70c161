"""Authorization of requests, as Kafka's ``KafkaApis``/``AuthHelper`` do it.

Theory of operation
-------------------
Kafka authorizes only when an authorizer is configured (``authorizer.class.name``). Here
the one authorizer is Kafka's ``StandardAuthorizer``
(:class:`hightide.security.authorizer.Authorizer` over the image's ACLs), selected by
its Kafka class name or the alias ``standard``; an empty value (the default) means *no
authorizer*: every action is allowed, authorized-operations fields carry every
operation of the resource type, and the ACL APIs answer SECURITY_DISABLED, exactly as a
Kafka broker without ``authorizer.class.name``.

Every handler asks through the functions here, with its :class:`RequestContext`:

* :func:`authorizer` — the authorizer for this request, or None when authorization is
  off. It is built from the metadata image *current at the call* (``image.security.acls``,
  which is replaced/updated when ACL records are applied), so a decision never uses ACLs
  older than the image the request reads; nothing is cached across metadata changes
  except the parsed ``super.users`` (a static config). Off costs one dict look-up.
* :func:`authorize` — one action on one resource (Kafka's ``authHelper.authorize``);
* :func:`allowed_names` / :func:`refused_names` — the names allowed / refused
  (``filterByAuthorized``: each distinct name decided once);
* :func:`authorize_cluster`, :func:`authorize_by_type`, :func:`authorized_operations`
  (the KIP-430 bit field; INT32_MIN is for callers that did not ask).

The principal and host are the context's ``principal`` (``"User:alice"``,
``"User:ANONYMOUS"`` unauthenticated) and ``client_host``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..config import AUTHORIZER_CLASS, AUTHORIZER_CLASS_NAMES
from ..protocol.acl import all_operations, to_bit_field
from ..protocol.errors import ErrorCode
from ..security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ..security.authorizer import AclIndex, Authorizer
from ..security.settings import authorizer_settings

if TYPE_CHECKING:
    from .context import RequestContext

__all__ = ["AUTHORIZER_CLASS", "AUTHORIZER_CLASS_NAMES", "allowed_names", "authorize", "authorize_by_type",
           "authorize_cluster", "authorized_operations", "authorizer", "config_resource_refused", "enabled",
           "refused_names"]

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)


@functools.lru_cache(maxsize=8)
def _settings(super_users: str, allow_everyone: bool) -> tuple[frozenset[str], bool]:
    return authorizer_settings({"super.users": super_users, "allow.everyone.if.no.acl.found": allow_everyone})


def enabled(ctx: RequestContext) -> bool:
    """Whether this broker authorizes requests (``authorizer.class.name`` is set)."""
    return bool(ctx.services.config.values.get("authorizer.class.name"))


def authorizer(ctx: RequestContext) -> Authorizer | None:
    """The authorizer for this request over the current image's ACLs, or None when the
    broker has no authorizer configured (everything is allowed).

    The last one built is reused while the image holds the same ACL index object and the
    settings are unchanged: an :class:`Authorizer` reads the index it references at each
    call (ACL records mutate that index in place, and a new image with another index gets
    a new authorizer), so reuse never serves old ACLs."""
    global _last
    values = ctx.services.config.values
    if not values.get("authorizer.class.name"):
        return None
    acls = ctx.image.security.acls
    supers_raw, allow = values.get("super.users") or "", bool(values.get("allow.everyone.if.no.acl.found"))
    last = _last
    if last is not None and last[0] is acls and last[1] == supers_raw and last[2] is allow:
        return last[3]
    supers, allow = _settings(supers_raw, allow)
    a = Authorizer(acls, supers, allow)
    _last = (acls, supers_raw, allow, a)
    return a


_last: tuple[AclIndex, str, bool, Authorizer] | None = None


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request's principal may perform ``operation`` on the LITERAL resource
    ``(resource_type, name)``; True without an authorizer."""
    a = authorizer(ctx)
    return a is None or a.authorize(ctx.principal, ctx.client_host, operation, resource_type, name)


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    """:func:`authorize` on the cluster resource (``kafka-cluster``)."""
    return authorize(ctx, operation, CLUSTER, CLUSTER_NAME)


def authorize_by_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Whether the principal may perform ``operation`` on *some* resource of the type
    (Kafka's ``authorizeByResourceType``); True without an authorizer."""
    a = authorizer(ctx)
    return a is None or a.authorize_by_resource_type(ctx.principal, ctx.client_host, operation, resource_type)


def allowed_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
    """The distinct names among ``names`` the principal may perform ``operation`` on
    (each decided once, as Kafka's ``filterByAuthorized``); all of them without an
    authorizer."""
    a = authorizer(ctx)
    distinct = set(names)
    if a is None:
        return distinct
    principal, host = ctx.principal, ctx.client_host
    return {n for n in distinct if a.authorize(principal, host, operation, resource_type, n)}


def refused_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> frozenset[str]:
    """The distinct names among ``names`` the principal may *not* perform ``operation``
    on; empty without an authorizer (and then ``names`` is not even iterated)."""
    a = authorizer(ctx)
    if a is None:
        return _NOTHING
    principal, host = ctx.principal, ctx.client_host
    return frozenset(n for n in set(names) if not a.authorize(principal, host, operation, resource_type, n))


_NOTHING: frozenset[str] = frozenset()

#: Kafka's default messages of the authorization errors (``Errors.message()``), what its
#: ``new ApiError(error)`` answers with.
MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}

#: Config resource types (Kafka's ConfigResource.Type) -> the ACL resource checked and
#: the error when refused (ConfigHelper / ControllerApis.authorizeAlterResource).
_CONFIG_RESOURCES = {
    2: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    4: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),  # BROKER
    8: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),  # BROKER_LOGGER
    16: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),  # CLIENT_METRICS
    32: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
}


def config_resource_refused(ctx: RequestContext, operation: AclOperation, config_type: int,
                            name: str) -> tuple[ErrorCode, str] | None:
    """DescribeConfigs (``DESCRIBE_CONFIGS``) / AlterConfigs and IncrementalAlterConfigs
    (``ALTER_CONFIGS``) on one config resource: broker, broker-logger and client-metrics
    resources are checked on the cluster, topics and groups on themselves. Returns
    (error, Kafka's message) when refused, None when allowed or the type is not one of
    those (the handler answers it)."""
    a = authorizer(ctx)
    checked = _CONFIG_RESOURCES.get(config_type)
    if a is None or checked is None:
        return None
    rtype, error = checked
    target = CLUSTER_NAME if rtype == ResourceType.CLUSTER else name
    if a.authorize(ctx.principal, ctx.client_host, operation, rtype, target):
        return None
    return error, MESSAGES[error]


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """The KIP-430 bit field of the operations the principal may perform on the resource
    (without an authorizer, every operation the type supports, as answered before ACLs:
    :func:`hightide.protocol.acl.all_operations`; topic, group, cluster, transactional_id)."""
    a = authorizer(ctx)
    if a is None:
        return all_operations(resource_type.name.lower())
    ops = a.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)
    return to_bit_field(set(ops))
