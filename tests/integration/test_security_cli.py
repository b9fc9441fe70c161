"""`hightide acls` (kafka-acls.sh's options and output) and `hightide users` (the SCRAM
part of kafka-configs.sh) against a real `hightide serve`, cross-checked with
confluent-kafka's AdminClient."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from hightide.cli import main

from ..conftest import ServerProcess

pytestmark = pytest.mark.integration


#: The ACL APIs answer SECURITY_DISABLED without an authorizer (as Kafka's): these tests
#: run a broker with the StandardAuthorizer, where the test's own User:ANONYMOUS is a
#: super user.
AUTHORIZER = ("--set", "authorizer.class.name=standard", "--set", "super.users=User:ANONYMOUS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("acls") / "data", args=AUTHORIZER).start()
    yield srv
    code = srv.stop()
    assert code == 0, srv.output()[-4000:]


def run(server, command: str, *args: str, input: str | None = None):
    return CliRunner().invoke(main, [command, *args, "-b", server.bootstrap], catch_exceptions=False, input=input)


def ok(server, command: str, *args: str) -> list[str]:
    r = run(server, command, *args)
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


def test_acls_add_list_remove(server):
    p = f"User:cli-{uuid.uuid4().hex[:6]}"
    topic = f"t-{uuid.uuid4().hex[:6]}"
    out = ok(server, "acls", "--add", "--allow-principal", p, "--operation", "Read", "--operation", "Describe",
             "--topic", topic)
    assert out[0] == f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`: "
    assert f" \t(principal={p}, host=*, operation=READ, permissionType=ALLOW) " in out
    ok(server, "acls", "--add", "--deny-principal", p, "--deny-host", "10.0.0.9", "--topic", "sec-",
       "--resource-pattern-type", "prefixed")  # --operation defaults to All
    ok(server, "acls", "--add", "--allow-principal", p, "--consumer", "--topic", topic, "--group", "g1")
    listed = json.loads(ok(server, "acls", "--list", "--principal", p, "-o", "json")[0])
    assert sorted((a["resource_type"], a["resource_name"], a["operation"], a["permission_type"]) for a in listed) == [
        ("GROUP", "g1", "READ", "ALLOW"), ("TOPIC", "sec-", "ALL", "DENY"),
        ("TOPIC", topic, "DESCRIBE", "ALLOW"), ("TOPIC", topic, "READ", "ALLOW")]
    match = ok(server, "acls", "--list", "--topic", "sec-ret", "--resource-pattern-type", "match", "--principal", p)
    assert match[0].startswith("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=sec-, "
                               "patternType=PREFIXED)`")
    removed = ok(server, "acls", "--remove", "--allow-principal", p, "--operation", "Read", "--topic", topic, "--force")
    assert f" \t(principal={p}, host=*, operation=READ, permissionType=ALLOW) " in removed
    ok(server, "acls", "--remove", "--topic", topic, "--force")  # every remaining ACL on the topic
    left = json.loads(ok(server, "acls", "--list", "--principal", p, "-o", "json")[0])
    assert sorted(a["resource_name"] for a in left) == ["g1", "sec-"]
    r = run(server, "acls", "--remove", "--group", "g1", input="n\n")  # asks first, answer no
    assert r.exit_code == 0 and len(json.loads(ok(server, "acls", "--list", "--principal", p, "-o", "json")[0])) == 2


def test_acls_usage_errors(server):
    r = run(server, "acls", "--add", "--allow-principal", "User:x", "--operation", "Read", "--cluster")
    assert r.exit_code != 0 and "ResourceType CLUSTER only supports operations" in r.output
    r = run(server, "acls", "--add", "--allow-principal", "alice", "--topic", "t")
    assert r.exit_code != 0 and "principalType:principalName" in r.output
    r = run(server, "acls", "--add", "--allow-principal", "User:x", "--topic", "t", "--resource-pattern-type", "match")
    assert r.exit_code != 0 and "'literal' or 'prefixed'" in r.output


def test_users_alter_describe_delete(server):
    user = f"cli{uuid.uuid4().hex[:6]}"
    assert ok(server, "users", "--alter", "--entity-name", user, "--add-config",
              "SCRAM-SHA-256=[iterations=8192,password=s3cret],SCRAM-SHA-512=[password=s3cret]") == [
        f"Completed updating config for user {user}."]
    assert ok(server, "users", "--describe", "--entity-name", user) == [
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096"]
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    desc = admin.describe_user_scram_credentials([user])[user].result(10)
    assert sorted(c.iterations for c in desc.scram_credential_infos) == [4096, 8192]
    ok(server, "users", "--alter", "--entity-name", user, "--delete-config", "SCRAM-SHA-256")
    assert ok(server, "users", "--describe", "--entity-name", user) == [
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=4096"]
    r = run(server, "users", "--alter", "--entity-name", user, "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]")
    assert r.exit_code != 0 and "Too few iterations" in r.output
    r = run(server, "users", "--describe", "--entity-name", "nobody-" + user)
    assert r.exit_code != 0 and "Attempt to describe a user credential that does not exist" in r.output
    r = run(server, "users", "--alter", "--entity-name", user, "--add-config", "SCRAM-SHA-1=[password=x]")
    assert r.exit_code != 0 and "unknown SCRAM mechanism" in r.output
