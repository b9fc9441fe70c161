"""ACLs and SCRAM credentials in cluster mode: written on the controller (which owns the
metadata log), they reach every broker's image through the observer Fetch and are served
by DescribeAcls/DescribeUserScramCredentials there, also after a broker is killed and
restarts from its local copy of the log."""

from __future__ import annotations

from hightide.client.connection import BrokerConnection
from hightide.protocol.errors import ErrorCode
from hightide.security.scram import salted_password

from ..waiting import async_wait_until
from .test_read_after_write import _connect

ACL = {"resource_type": 2, "resource_name": "orders-", "resource_pattern_type": 4, "principal": "User:cl",
       "host": "*", "operation": 4, "permission_type": 3}


async def _seen(conn: BrokerConnection) -> tuple[list[str], list[int]]:
    acls = await conn.request(29, conn.pick_version(29, 3, 1), {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": "User:cl", "host_filter": None, "operation": 1, "permission_type": 1})
    users = await conn.request(50, 0, {"users": [{"name": "cluser"}]})
    return ([r.resource_name for r in acls.resources],
            [c.iterations for r in users.results if r.error_code == ErrorCode.none for c in r.credential_infos])


def test_acls_and_credentials_written_on_the_controller_reach_every_broker(cluster) -> None:
    c = cluster(2, authorizer_class_name="standard", super_users="User:ANONYMOUS")  # ACL APIs need an authorizer

    async def write() -> None:
        conn = await _connect(c.controller.spec.address)
        try:
            created = await conn.request(30, conn.pick_version(30, 3, 1), {"creations": [ACL]})
            assert created.results[0].error_code == ErrorCode.none, created
            salt = b"cluster-salt"
            altered = await conn.request(51, 0, {"deletions": [], "upsertions": [{
                "name": "cluser", "mechanism": 2, "iterations": 8192, "salt": salt,
                "salted_password": salted_password("sha512", "pw", salt, 8192)}]})
            assert altered.results[0].error_code == ErrorCode.none, altered
        finally:
            await conn.close()

    async def seen_on(broker: int) -> tuple[list[str], list[int]]:
        conn = await _connect(c.address(broker))
        try:
            return await async_wait_until(lambda: _nonempty(conn), timeout=20,
                                          what=f"broker {broker} serving the ACL and the credential")
        finally:
            await conn.close()

    c.run(write())
    assert [c.run(seen_on(b)) for b in (0, 1)] == [(["orders-"], [8192])] * 2
    c.restart(1, kill=True)
    assert c.run(seen_on(1)) == (["orders-"], [8192])


async def _nonempty(conn: BrokerConnection) -> tuple[list[str], list[int]] | None:
    seen = await _seen(conn)
    return seen if seen[0] and seen[1] else None
