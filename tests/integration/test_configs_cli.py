"""`hightide configs` (issue 12 item 9): kafka-configs.sh's options and output for topic,
group and broker configs, against a real `hightide serve`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hightide.cli import main

pytestmark = pytest.mark.integration


def run(server, *args):
    return CliRunner().invoke(main, ["configs", *args, "-b", server.bootstrap], catch_exceptions=False)


def ok(server, *args) -> list[str]:
    r = run(server, *args)
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


def test_topic_configs_describe_alter_delete(server, topic_name):
    assert CliRunner().invoke(main, ["topics", "create", topic_name, "-b", server.bootstrap]).exit_code == 0
    t = ["--entity-type", "topics", "--entity-name", topic_name]
    assert ok(server, "--describe", *t) == [f"Dynamic configs for topic {topic_name} are:"]
    assert ok(server, "--alter", *t, "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]") == [
        f"Completed updating config for topic {topic_name}."]
    assert ok(server, "--describe", *t) == [
        f"Dynamic configs for topic {topic_name} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # as kafka-configs.sh shows it: log.retention.ms has no default of its own (issue 20)
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    every = ok(server, "--describe", "--topic", topic_name, "--all")
    assert every[0] == f"All configs for topic {topic_name} are:"
    assert "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}" in every
    ok(server, "--alter", "--topic", topic_name, "--delete-config", "retention.ms")
    doc = json.loads(run(server, "--describe", "--topic", topic_name, "-o", "json").stdout)
    assert [(c["name"], c["value"], c["source"]) for c in doc["configs"]] == [
        ("cleanup.policy", "compact,delete", "DYNAMIC_TOPIC_CONFIG")]


def test_group_config_for_share_groups(server):
    g = ["--entity-type", "groups", "--entity-name", "cfg-share-readers"]
    ok(server, "--alter", *g, "--add-config", "share.auto.offset.reset=earliest")
    assert ok(server, "--describe", *g) == [
        "Dynamic configs for group cfg-share-readers are:",
        "  share.auto.offset.reset=earliest sensitive=false synonyms={GROUP_CONFIG:share.auto.offset.reset=earliest, "
        "DEFAULT_CONFIG:share.auto.offset.reset=latest}",
    ]


def test_broker_configs(server):
    every = ok(server, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
    assert every[0] == "All configs for broker 1 are:"
    assert any(line.startswith("  num.partitions=") for line in every)
    r = run(server, "--alter", "--broker", "1", "--add-config", "num.partitions=3")
    assert r.exit_code == 1 and "Cannot update these configs dynamically: Set(num.partitions)" in r.stderr


@pytest.mark.parametrize("args, code, text", [
    (["--describe", "--topic", "no-such-topic-cfg"], 1, "does not exist"),
    (["--alter", "--topic", "no-such-topic-cfg", "--add-config", "retention.ms=1"], 1, "no-such-topic-cfg"),
    (["--alter", "--group", "g", "--add-config", "share.auto.offset.rest=earliest"], 1,
     "did you mean 'share.auto.offset.reset'?"),
    (["--alter", "--group", "g", "--add-config", "share.auto.offset.reset"], 2, 'format "key=val"'),
    (["--alter", "--group", "g"], 2, "--alter needs --add-config or --delete-config"),
    (["--describe"], 2, "give one entity"),
    (["--describe", "--entity-type", "ips", "--entity-name", "10.0.0.1"], 2, "not supported by hightide configs"),
    (["--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"], 2,
     "--alter of users/clients needs --entity-name or --entity-default"),
    (["--describe", "--entity-type", "users", "--topic", "t"], 2, "give one entity"),
    (["--describe", "--entity-type", "users", "--entity-type", "topics"], 2, "users and clients can only be combined"),
])
def test_errors(server, args, code, text):
    r = run(server, *args)
    assert r.exit_code == code, r.output
    assert text in r.output
    assert "Traceback" not in r.output
