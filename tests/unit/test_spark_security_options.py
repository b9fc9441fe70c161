"""Spark's Kafka security options (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*)
map to the client's ClientSecurity, as Spark's Kafka connector passes them to Kafka."""

from __future__ import annotations

import pytest

from hightide.spark import kafkaio
from hightide.spark.options import OptionError, SinkOptions, SourceOptions

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="Secret";'


def test_source_and_sink_options_carry_the_security():
    opts = {"kafka.bootstrap.servers": "h:9093", "subscribe": "t", "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": JAAS,
            "kafka.ssl.truststore.location": "/etc/ca.pem", "kafka.ssl.endpoint.identification.algorithm": ""}
    src = SourceOptions.parse(opts, streaming=False)
    sec = src.security
    assert sec is not None and (sec.protocol, sec.mechanism, sec.username, sec.password, sec.ca_file) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice", "Secret", "/etc/ca.pem")
    assert sec.check_hostname is False and "Secret" not in repr(src)
    sink = SinkOptions.parse({k: v for k, v in opts.items() if k != "subscribe"})
    assert sink.security == sec
    # the driver's progress commits to the same servers use it
    assert kafkaio._SECURITY["h:9093"] == sec


def test_plaintext_and_refusals():
    assert SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False).security is None
    with pytest.raises(OptionError, match="sasl.mechanism=GSSAPI"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                             "kafka.security.protocol": "SASL_PLAINTEXT"}, streaming=False)
    with pytest.raises(OptionError, match="PEM"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SSL",
                           "kafka.ssl.keystore.type": "JKS"})
