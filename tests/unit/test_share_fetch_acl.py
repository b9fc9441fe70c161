"""ShareFetch / ShareAcknowledge refuse, partition by partition, the topics the principal
may not READ (TOPIC_AUTHORIZATION_FAILED), and serve the others in the same request."""

from __future__ import annotations

import uuid
from typing import Any

from hightide.protocol.errors import ErrorCode
from hightide.security.acl import AclOperation, ResourceType
from tests.unit.test_authorization_matrix import ALICE, PRE, Env, env, module_env  # noqa: F401 (fixtures)


def _codes(resp: Any, field: str) -> dict[tuple[uuid.UUID, int], int]:
    return {(t.topic_id, p.partition_index): int(getattr(p, field)) for t in resp.responses for p in t.partitions}


def test_share_fetch_and_acknowledge_refuse_topics_without_read(env: Env) -> None:
    env.acl(ALICE, AclOperation.READ, ResourceType.GROUP, "sg-topics")
    env.acl(ALICE, AclOperation.READ, ResourceType.TOPIC, "orders")
    member = uuid.uuid4().hex[:22]
    hb = env.call(76, 1, {"group_id": "sg-topics", "member_id": member, "member_epoch": 0, "rack_id": None,
                          "subscribed_topic_names": ["orders"]})
    assert hb.error_code == ErrorCode.none
    orders, secret = (env.b.image.topics[n].topic_id for n in ("orders", "secret"))
    r = env.call(78, 1, {"group_id": "sg-topics", "member_id": member, "share_session_epoch": 0, "max_wait": 0,
                         "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                         "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                                      "acknowledgement_batches": []}]}
                                    for tid in (orders, secret)],
                         "forgotten_topics_data": []})
    assert r.error_code == ErrorCode.none
    assert _codes(r, "error_code") == {(orders, 0): ErrorCode.none, (secret, 0): ErrorCode.topic_authorization_failed}
    a = env.call(79, 1, {"group_id": "sg-topics", "member_id": member, "share_session_epoch": 1, "topics": [
        {"topic_id": secret, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]})
    assert a.error_code == ErrorCode.none
    assert _codes(a, "error_code") == {(secret, 0): ErrorCode.topic_authorization_failed}


def test_a_null_group_id_is_refused_not_crashed_on_a_prefixed_acl(env: Env) -> None:
    """GroupId is nullable in ShareFetch / ShareAcknowledge: a null one is authorized as
    ``""`` (no ACL matches it: GROUP_AUTHORIZATION_FAILED), never handed to the authorizer
    as None, which failed on a PREFIXED group ACL (the handler raised, the connection
    closed). Found by typing the handlers with the request views."""
    env.acl(ALICE, AclOperation.READ, ResourceType.GROUP, "app-", PRE)
    r = env.call(78, 1, {"group_id": None, "member_id": "m", "share_session_epoch": 0, "max_wait": 0,
                         "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                         "topics": [], "forgotten_topics_data": []})
    assert r.error_code == ErrorCode.group_authorization_failed
    a = env.call(79, 1, {"group_id": None, "member_id": "m", "share_session_epoch": 1, "topics": []})
    assert a.error_code == ErrorCode.group_authorization_failed
