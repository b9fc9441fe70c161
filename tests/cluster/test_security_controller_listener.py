"""A SASL controller listener in cluster mode (issue 17): brokers authenticate to the
controller with ``sasl.mechanism.controller.protocol`` and the controller listener's JAAS
``username``/``password`` (Kafka's way), register and are unfenced; a client's write to a
broker is forwarded in an Envelope under the client's principal; an unauthenticated
connection to the controller gets nothing but ApiVersions and the SASL requests."""

from __future__ import annotations

import pytest

from hightide.client.connection import BrokerConnection
from hightide.client.errors import KafkaConnectionError

from .test_read_after_write import _connect, create

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret";')
SETTINGS = {
    "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.controller.plain.sasl.jaas.config": JAAS,
    "sasl.mechanism.controller.protocol": "PLAIN",
    "authorizer.class.name": "standard",
    "super.users": "User:broker;User:ANONYMOUS",
}


def test_brokers_authenticate_to_a_sasl_controller_listener(cluster) -> None:
    c = cluster(2, settings=SETTINGS)  # returns once both brokers registered (over SASL) and are unfenced

    async def forwarded_write() -> None:
        conn = await _connect(c.address(0))
        try:
            await create(conn, "through-sasl-controller")
        finally:
            await conn.close()

    async def unauthenticated_on_controller() -> None:
        host, port = c.controller.spec.address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "raw", request_timeout_s=10)
        await conn.connect()  # ApiVersions is served before authentication
        try:
            with pytest.raises(KafkaConnectionError):
                await conn.request(55, 0, {"topics": [{"topic_name": "__cluster_metadata",
                                                       "partitions": [{"partition_index": 0}]}]})
        finally:
            await conn.close()

    c.run(forwarded_write())
    c.run(unauthenticated_on_controller())
    # never logged by a node (the harness's own "--- start" lines echo the command line)
    logged = [line for line in c.logs().splitlines() if not line.startswith("--- start")]
    assert not [line for line in logged if "broker-secret" in line]
