"""Client quotas in cluster mode: AlterClientQuotas sent to a broker is forwarded to the
controller (which owns the metadata log); every broker then serves the quota with
DescribeClientQuotas and enforces it from its own image, also after a restart from its
local copy of the log."""

from __future__ import annotations

from hightide.client.connection import BrokerConnection

from ..waiting import async_wait_until
from .test_read_after_write import _connect

ENTITY = [{"entity_type": "client-id", "entity_name": "cluster-app"}]
FILTER = {"components": [{"entity_type": "client-id", "match_type": 0, "match": "cluster-app"}], "strict": True}


async def _quota(conn: BrokerConnection) -> float | None:
    r = await conn.request(48, 1, FILTER)
    assert r.error_code == 0, r
    return r.entries[0].values[0].value if r.entries else None


def test_alter_through_a_broker_reaches_every_broker(cluster) -> None:
    c = cluster(2)

    async def alter() -> None:
        conn = await _connect(c.address(0))  # a broker: forwarded to the controller
        try:
            r = await conn.request(49, 1, {"entries": [{"entity": ENTITY, "ops": [
                {"key": "producer_byte_rate", "value": 4096.0, "remove": False}]}], "validate_only": False})
            assert r.entries[0].error_code == 0, r
            bad = await conn.request(49, 1, {"entries": [{"entity": ENTITY, "ops": [
                {"key": "producer_byte_rate", "value": 0.5, "remove": False}]}], "validate_only": False})
            assert (bad.entries[0].error_code, bad.entries[0].error_message) == (
                42, "producer_byte_rate cannot be a fractional value.")
        finally:
            await conn.close()

    async def seen_on(broker: int) -> float:
        conn = await _connect(c.address(broker))
        try:
            return await async_wait_until(lambda: _quota(conn), timeout=20, what=f"broker {broker} serving the quota")
        finally:
            await conn.close()

    c.run(alter())
    assert [c.run(seen_on(b)) for b in (0, 1)] == [4096.0, 4096.0]
    c.restart(1, kill=True)
    assert c.run(seen_on(1)) == 4096.0
