"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

The decisions are the controller's sans-IO functions in
:mod:`hightide.cluster.security_control` (Kafka's ``AclControlManager``), run as metadata
writes: the answer waits until the ACL records are durable and applied to the image's
:class:`~hightide.security.authorizer.AclIndex`. DescribeAcls reads the image.

As Kafka's ``AclApis``: without an authorizer (``authorizer.class.name`` empty, the
default) the three APIs answer SECURITY_DISABLED "No Authorizer is configured."; with
one, Describe needs DESCRIBE on the cluster and Create/Delete ALTER
(CLUSTER_AUTHORIZATION_FAILED). Every API enforces the ACLs through
:mod:`hightide.server.authorization`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.security_control import DeleteResult, create_acls, delete_acls, describe_acls
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...security.acl import AclBinding, AclBindingFilter
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster, enabled
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.create_acls import CreateAclsRequest
    from ...protocol.views.delete_acls import DeleteAclsFilter, DeleteAclsRequest
    from ...protocol.views.describe_acls import DescribeAclsRequest
    from ...cluster.image import MetadataImage

CLUSTER_DENIED = (ErrorCode.cluster_authorization_failed, MESSAGES[ErrorCode.cluster_authorization_failed])
SECURITY_DISABLED = (ErrorCode.security_disabled, "No Authorizer is configured.")


def _binding_dict(acl: AclBinding) -> dict:
    return {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
            "permission_type": int(acl.permission)}


def _filter(f: DescribeAclsRequest | DeleteAclsFilter) -> AclBindingFilter:
    return AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                               f.principal_filter, f.host_filter, f.operation, f.permission_type)


def _refused(ctx: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without
    ``operation`` on the cluster, else None (Kafka's AclApis order)."""
    if not enabled(ctx):
        return SECURITY_DISABLED
    if not authorize_cluster(ctx, operation):
        return CLUSTER_DENIED
    return None


@handles(29, 1, 3)
def describe_acls_handler(ctx: RequestContext, req: DescribeAclsRequest) -> Any:
    """The matching bindings grouped by resource pattern (Kafka's ``aclsResources``).
    Needs DESCRIBE on the cluster (else a top-level CLUSTER_AUTHORIZATION_FAILED)."""
    refused = _refused(ctx, AclOperation.DESCRIBE)
    if refused is not None:
        return materialize(response_schema(29, ctx.version), {
            "throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "resources": []})
    (code, message), acls = describe_acls(ctx.image.security, _filter(req))
    groups: dict[tuple[int, str, int], list[dict]] = {}
    for acl in acls:
        groups.setdefault((int(acl.resource_type), acl.resource_name, int(acl.pattern_type)), []).append(
            _binding_dict(acl))
    resources = [{"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": entries}
                 for (rt, name, pt), entries in groups.items()]
    return materialize(response_schema(29, ctx.version), {"throttle_time": 0, "error_code": code,
                                                          "error_message": message, "resources": resources})


@handles(30, 1, 3)
async def create_acls_handler(ctx: RequestContext, req: CreateAclsRequest) -> Any:
    """Needs ALTER on the cluster (else every creation CLUSTER_AUTHORIZATION_FAILED)."""
    refused = _refused(ctx, AclOperation.ALTER)
    if refused is not None:
        return materialize(response_schema(30, ctx.version), {"throttle_time": 0, "results": [
            {"error_code": refused[0], "error_message": refused[1]} for _ in req.creations]})
    bindings = [AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                              c.operation, c.permission_type) for c in req.creations]

    def op(image: MetadataImage) -> tuple[list, list]:
        return create_acls(image.security, bindings)
    try:
        results = await ctx.metadata.write_metadata(op)
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing was created
        results = [(exc.error_code, str(exc))] * len(bindings)
    return materialize(response_schema(30, ctx.version), {
        "throttle_time": 0, "results": [{"error_code": c, "error_message": m} for c, m in results]})


def _delete_result(r: DeleteResult) -> dict:
    matching = [{"error_code": 0, "error_message": None, "resource_type": int(a.resource_type),
                 "resource_name": a.resource_name, "pattern_type": int(a.pattern_type), **_binding_dict(a)}
                for a in r.matched]
    return {"error_code": r.error[0], "error_message": r.error[1], "matching_acls": matching}


@handles(31, 1, 3)
async def delete_acls_handler(ctx: RequestContext, req: DeleteAclsRequest) -> Any:
    """Needs ALTER on the cluster (else every filter CLUSTER_AUTHORIZATION_FAILED)."""
    refused = _refused(ctx, AclOperation.ALTER)
    if refused is not None:
        return materialize(response_schema(31, ctx.version), {"throttle_time": 0, "filter_results": [
            _delete_result(DeleteResult(refused, [])) for _ in req.filters]})
    filters = [_filter(f) for f in req.filters]

    def op(image: MetadataImage) -> tuple[list[DeleteResult], list]:
        return delete_acls(image.security, filters)
    try:
        results: list[DeleteResult] = await ctx.metadata.write_metadata(op)
    except CoordinatorUnavailable as exc:
        results = [DeleteResult((exc.error_code, str(exc)), []) for _ in filters]
    return materialize(response_schema(31, ctx.version), {
        "throttle_time": 0, "filter_results": [_delete_result(r) for r in results]})
