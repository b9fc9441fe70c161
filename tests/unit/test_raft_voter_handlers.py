"""AddRaftVoter (80) and RemoveRaftVoter (81) handlers (KIP-853), in-process: the single
node's answer (UNSUPPORTED_VERSION: a static lone voter), the authorization and cluster
id checks, the controller's request checks and how the Raft shell's outcomes become
Kafka's error codes; the broker forwards both; and a dynamic quorum's data dirs and
``storage format`` flags (the refusal of a static/dynamic mix, the bootstrap snapshot)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from hightide import Broker, BrokerConfig
from hightide.cli import main
from hightide.client.connection import decode_response
from hightide.cluster.lifecycle import LifecycleConfig
from hightide.cluster.raft import AddVoter, RemoveVoter, VoterChangeError, VoterNode, VoterSet
from hightide.cluster.raft.batches import read_voters_batches, uuid_bytes, uuid_text
from hightide.cluster.snapshot import BOOTSTRAP_SNAPSHOT, decode_snapshot, encode_bootstrap_snapshot, encode_snapshot
from hightide.log.data_dir import (
    BOOTSTRAP_CHECKPOINT, METADATA_DIR, DataDirMismatch, check_identity, format_dir, is_dynamic_quorum,
)
from hightide.node.controller_service import ControllerService
from hightide.node.forwarding import FORWARDED
from hightide.node.raft_shell import WriteOutcomeUnknown
from hightide.protocol.build import materialize
from hightide.protocol.codec import RequestHeader, request_schema
from hightide.protocol.errors import ErrorCode as E
from hightide.server.context import RequestContext
from hightide.server.handlers import controller_routes

DIR = uuid.uuid4()


class Env:
    def __init__(self, loop: asyncio.AbstractEventLoop, broker: Broker) -> None:
        self.loop, self.b = loop, broker

    def call(self, routes: Any, api_key: int, version: int, body: dict) -> Any:
        ctx = RequestContext(self.b.services, RequestHeader(api_key, version, 7, "t"), "10.0.0.1:5555", {},
                             principal="User:alice")
        result = routes[api_key].fn(ctx, materialize(request_schema(api_key, version), body))
        if hasattr(result, "__await__"):
            result = self.loop.run_until_complete(result)
        if isinstance(result, bytes):
            return decode_response(api_key, version, result[4:])[1]
        return result


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    loop = asyncio.new_event_loop()
    b = Broker(BrokerConfig.load(), data_dir=str(tmp_path_factory.mktemp("voters")), listen=("127.0.0.1", 0))
    loop.run_until_complete(b.start())
    try:
        yield Env(loop, b)
    finally:
        loop.run_until_complete(b.stop())
        loop.close()


def add_body(directory: uuid.UUID | None = DIR, listeners: list | None = None, **extra: Any) -> dict:
    return {"cluster_id": None, "timeout": 5000, "voter_id": 3003, "voter_directory_id": directory,
            "listeners": [{"name": "CONTROLLER", "host": "h", "port": 9099}] if listeners is None else listeners,
            **extra}


def test_the_single_node_answers_unsupported_version_and_brokers_forward_both(env: Env) -> None:
    assert FORWARDED[80] == "AddRaftVoter" and FORWARDED[81] == "RemoveRaftVoter"
    routes = env.b.routes
    assert (routes[80].min_version, routes[80].max_version, routes[81].max_version) == (0, 1, 0)
    answer = env.call(routes, 80, 0, add_body())
    assert answer.error_code == E.unsupported_version and "static" in answer.error_message
    answer = env.call(routes, 81, 0, {"cluster_id": None, "voter_id": 1, "voter_directory_id": DIR})
    assert answer.error_code == E.unsupported_version
    answer = env.call(routes, 81, 0, {"cluster_id": "another", "voter_id": 1, "voter_directory_id": DIR})
    assert answer.error_code == E.inconsistent_cluster_id


class FakeShell:
    """The Raft shell as ControllerService.change_voters sees it."""

    def __init__(self, outcome: BaseException | None = None) -> None:
        self.outcome = outcome
        self.calls: list[tuple[Any, float, bool]] = []
        self.core = SimpleNamespace(voter_set=VoterSet.of((3000, 3001, 3003)), kraft_version=1)

    async def change_voters(self, change: Any, timeout_s: float, *, wait_commit: bool = True) -> int:
        self.calls.append((change, timeout_s, wait_commit))
        if self.outcome is not None:
            raise self.outcome
        return 10


def service(env: Env, shell: FakeShell | None) -> ControllerService:
    b = env.b
    assert b.metadata is not None
    metadata = b.metadata
    return ControllerService(node_id=3000, cluster_id=b.cluster_id or "c", config=LifecycleConfig(),
                             write=b.metadata_writer.write_metadata, image=lambda: b.image, metadata_log=lambda: metadata.log,
                             committed_end=lambda: b.image.offset + 1, raft=shell)  # type: ignore[arg-type]


def test_the_controller_checks_the_request_and_passes_it_to_the_raft_shell(env: Env) -> None:
    shell = FakeShell()
    routes = controller_routes(service(env, shell))
    assert env.call(routes, 80, 0, add_body(directory=None)).error_code == E.invalid_request
    assert env.call(routes, 80, 0, add_body(directory=uuid.UUID(int=0))).error_code == E.invalid_request
    assert env.call(routes, 80, 0, add_body(listeners=[])).error_code == E.invalid_request
    assert not shell.calls
    assert env.call(routes, 80, 0, add_body()).error_code == E.none
    change, timeout_s, wait = shell.calls[-1]
    assert change == AddVoter(VoterNode(3003, uuid_text(DIR.bytes), (("CONTROLLER", "h", 9099),)))
    assert timeout_s == 5.0 and wait
    assert env.call(routes, 80, 1, add_body(ack_when_committed=False)).error_code == E.none
    assert shell.calls[-1][2] is False                       # v1: answer once appended
    assert env.call(routes, 81, 0, {"cluster_id": None, "voter_id": 3001, "voter_directory_id": DIR}
                    ).error_code == E.none
    assert shell.calls[-1][0] == RemoveVoter(3001, uuid_text(DIR.bytes))


@pytest.mark.parametrize("outcome,code", [
    (VoterChangeError(int(E.duplicate_voter), "The voter id for 3003 is already part of the set"), E.duplicate_voter),
    (VoterChangeError(int(E.voter_not_found), "Cannot remove voter 9"), E.voter_not_found),
    (VoterChangeError(int(E.not_leader_or_follower), "not the leader"), E.not_leader_or_follower),
    (WriteOutcomeUnknown("lost the leadership"), E.request_timed_out),
    (TimeoutError(), E.request_timed_out),
])
def test_the_shells_outcomes_are_kafkas_error_codes(env: Env, outcome: BaseException, code: E) -> None:
    routes = controller_routes(service(env, FakeShell(outcome)))
    answer = env.call(routes, 80, 0, add_body())
    assert answer.error_code == code and answer.error_message
    assert env.call(routes, 81, 0, {"cluster_id": None, "voter_id": 9, "voter_directory_id": DIR}).error_code == code


def test_a_controller_without_a_quorum_shell_is_static(env: Env) -> None:
    routes = controller_routes(service(env, None))
    assert env.call(routes, 80, 0, add_body()).error_code == E.unsupported_version


# --- data dirs and format -----------------------------------------------------------------

def test_static_and_dynamic_dirs_refuse_each_other_and_a_dynamic_dir_compares_no_voters(tmp_path: Path) -> None:
    static, dynamic = str(tmp_path / "s"), str(tmp_path / "d")
    format_dir(static, cluster_id="c", node_id=1, voters=(1, 2, 3))
    format_dir(dynamic, cluster_id="c", node_id=1, dynamic=True,
               bootstrap=encode_bootstrap_snapshot(VoterSet.of((1, 2, 3)), 0))
    assert is_dynamic_quorum(dynamic) and not is_dynamic_quorum(static)
    check_identity(dynamic, node_id=1, cluster_id="c", voters=(), dynamic=True)     # no voter set compared
    with pytest.raises(DataDirMismatch, match="dynamic controller quorum.*bootstrap.servers"):
        check_identity(dynamic, node_id=1, cluster_id="c", voters=(1, 2, 3))
    with pytest.raises(DataDirMismatch, match="static controller quorum.*cannot become dynamic"):
        check_identity(static, node_id=1, cluster_id="c", voters=(), dynamic=True)
    check_identity(static, node_id=1, cluster_id="c", voters=(1, 2, 3))              # unchanged
    with pytest.raises(DataDirMismatch, match="configured voters are 1,2"):
        check_identity(static, node_id=1, cluster_id="c", voters=(1, 2))
    assert (tmp_path / "d" / METADATA_DIR / BOOTSTRAP_CHECKPOINT).exists()


def test_snapshots_carry_a_dynamic_quorums_voter_set() -> None:
    voters = VoterSet.of([VoterNode(1, uuid_text(DIR.bytes), (("CONTROLLER", "h", 1),))])
    boot = encode_bootstrap_snapshot(voters, 0)
    assert decode_snapshot(boot).records == [] and read_voters_batches(boot) == voters
    assert BOOTSTRAP_SNAPSHOT.offset == 0
    from hightide.cluster.raft import OffsetAndEpoch
    data = encode_snapshot([], OffsetAndEpoch(10, 2), 5, 6, voters)
    assert read_voters_batches(data) == voters and decode_snapshot(data).last_contained_ms == 5
    assert read_voters_batches(encode_snapshot([], OffsetAndEpoch(10, 2), 5, 6)) is None


def _format(tmp_path: Path, *flags: str, node: int = 3000) -> Any:
    dynamic = ["--set", "process.roles=controller", "--set", "controller.listener.names=CONTROLLER",
               "--set", f"listeners=CONTROLLER://127.0.0.1:{9095 + node - 3000}",
               "--set", "controller.quorum.bootstrap.servers=127.0.0.1:9095,127.0.0.1:9096"]
    return CliRunner().invoke(main, ["storage", "format", "-t", "c1", "--data-dir", str(tmp_path / f"n{node}"),
                                     "--node-id", str(node), *dynamic, *flags])


def test_format_flags_of_a_dynamic_quorum(tmp_path: Path) -> None:
    d0, d1 = uuid_text(uuid.uuid4().bytes), uuid_text(uuid.uuid4().bytes)
    initial = f"3000@127.0.0.1:9095:{d0},3001@127.0.0.1:9096:{d1}"
    done = _format(tmp_path, "--initial-controllers", initial)
    assert done.exit_code == 0, done.output
    boot = (tmp_path / "n3000" / METADATA_DIR / BOOTSTRAP_CHECKPOINT).read_bytes()
    got = read_voters_batches(boot)
    assert got is not None and got.ids == (3000, 3001) and got.get(3000) == VoterNode(
        3000, d0, (("CONTROLLER", "127.0.0.1", 9095),))
    assert f"directory.id={d0}" in (tmp_path / "n3000" / "meta.properties").read_text()
    joining = _format(tmp_path, "--no-initial-controllers", node=3002)
    assert joining.exit_code == 0 and "joins as an observer" in joining.output
    assert not (tmp_path / "n3002" / METADATA_DIR / BOOTSTRAP_CHECKPOINT).exists()
    alone = _format(tmp_path, "--standalone", node=3003)
    assert alone.exit_code == 0, alone.output
    for flags, says in ((("--standalone", "--no-initial-controllers"), "exactly one of"),
                        ((), "exactly one of"),
                        (("--initial-controllers", "3000@h:1:short"), "invalid --initial-controllers"),
                        (("--initial-controllers", initial), "not in --initial-controllers")):
        refused = _format(tmp_path, *flags, node=3004)
        assert refused.exit_code == 1 and says in refused.output and len(refused.output.strip().splitlines()) == 1
    static = CliRunner().invoke(main, ["storage", "format", "-t", "c1", "--data-dir", str(tmp_path / "s"),
                                       "--node-id", "1", "--standalone"])
    assert static.exit_code == 1 and "dynamic quorum's controller" in static.output
    assert uuid_bytes(d0) != bytes(16)
