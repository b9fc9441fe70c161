"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

Alter runs :func:`hightide.cluster.security_control.alter_scram_credentials` (Kafka's
``ScramControlManager``) as one metadata write: the client sends the salt and the salted
password (the admin client derives it, as Kafka's does), the controller keeps only the
salt, iterations, StoredKey and ServerKey. Describe reads the image and returns
mechanisms and iteration counts only, never salts or keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.security_control import (
    ScramDeletion,
    ScramUpsertion,
    alter_scram_credentials,
    describe_scram_credentials,
)
from ...protocol.build import materialize
from ...protocol.codec import response_schema
from ...protocol.errors import ErrorCode
from ...security.acl import AclOperation
from ..authorization import MESSAGES, authorize_cluster
from ..context import RequestContext
from ...coordinator.runtime import CoordinatorUnavailable
from ..registry import handles

if TYPE_CHECKING:
    from ...protocol.views.alter_user_scram_credentials import AlterUserScramCredentialsRequest
    from ...protocol.views.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
    from ...cluster.image import MetadataImage


@handles(50, 0, 0)
def describe_user_scram_credentials(ctx: RequestContext, req: DescribeUserScramCredentialsRequest) -> Any:
    """Needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED, top level and per user)."""
    users = None if req.users is None else [u.name for u in req.users]
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        code, msg = ErrorCode.cluster_authorization_failed, MESSAGES[ErrorCode.cluster_authorization_failed]
        return materialize(response_schema(50, ctx.version), {
            "throttle_time": 0, "error_code": code, "error_message": msg, "results": [
                {"user": u, "error_code": code, "error_message": msg, "credential_infos": []} for u in users or ()]})
    results = [{"user": d.user, "error_code": d.error[0], "error_message": d.error[1],
                "credential_infos": [{"mechanism": m, "iterations": i} for m, i in d.credentials]}
               for d in describe_scram_credentials(ctx.image.security, users)]
    return materialize(response_schema(50, ctx.version), {"throttle_time": 0, "error_code": 0,
                                                          "error_message": None, "results": results})


@handles(51, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, req: AlterUserScramCredentialsRequest) -> Any:
    """Needs ALTER on the cluster (else every user CLUSTER_AUTHORIZATION_FAILED)."""
    deletions = [ScramDeletion(d.name, d.mechanism) for d in req.deletions]
    upsertions = [ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                  for u in req.upsertions]
    if not authorize_cluster(ctx, AclOperation.ALTER):
        code, msg = ErrorCode.cluster_authorization_failed, MESSAGES[ErrorCode.cluster_authorization_failed]
        users = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions])
        return materialize(response_schema(51, ctx.version), {"throttle_time": 0, "results": [
            {"user": user, "error_code": code, "error_message": msg} for user in users]})

    def op(image: MetadataImage) -> tuple[list, list]:
        return alter_scram_credentials(image.security, deletions, upsertions)
    try:
        results = await ctx.metadata.write_metadata(op)
    except CoordinatorUnavailable as exc:  # the metadata log failed: nothing changed
        users = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions])
        results = [(user, (exc.error_code, str(exc))) for user in users]
    return materialize(response_schema(51, ctx.version), {
        "throttle_time": 0,
        "results": [{"user": user, "error_code": code, "error_message": msg} for user, (code, msg) in results]})
