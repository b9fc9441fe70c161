"""Broker-only processes against a controller-only process (issue 13): registration →
caught up → unfenced; kill -9 → fenced within the session timeout and gone from Metadata;
SIGSTOP/SIGCONT → fenced, then unfenced again; the controller restarted → the brokers
come back unfenced and writes through them work; SIGTERM → controlled shutdown."""

from __future__ import annotations

import time

from tests.waiting import wait_until

from .harness import SESSION_MS


def _metadata_brokers(c, via: int) -> set[int]:
    async def main() -> set[int]:
        async with c.admin(via) as admin:
            return set((await admin.metadata([])).brokers)
    return c.run(main())


def test_brokers_register_catch_up_and_are_unfenced(cluster) -> None:
    c = cluster(3)  # returns once every broker is unfenced in every broker's view
    assert c.states() == {b: {0: "unfenced", 1: "unfenced", 2: "unfenced"} for b in (0, 1, 2)}
    for b in (0, 1, 2):
        out = c.node(b).output()
        assert "registered with the controller: epoch" in out
        assert "metadata log caught up with the controller" in out
        assert f"broker {b} is unfenced" in out


def test_kill_9_fences_within_the_session_timeout_and_leaves_metadata(cluster) -> None:
    c = cluster(3)
    t0 = time.monotonic()
    c.kill(2)
    c.wait_until(lambda: all(view.get(2) == "fenced" for view in c.states([0, 1]).values()),
                 timeout=SESSION_MS / 1000 + 10, what="broker 2 fenced in the other brokers' views")
    elapsed = time.monotonic() - t0
    assert elapsed < SESSION_MS / 1000 + 5, elapsed  # session timeout plus a timer tick and a heartbeat
    assert _metadata_brokers(c, 0) == {0, 1} == _metadata_brokers(c, 1)


def test_sigstop_fences_and_sigcont_unfences(cluster) -> None:
    c = cluster(2)
    c.pause(1)
    try:
        c.wait_until(lambda: c.states([0]).get(0, {}).get(1) == "fenced", timeout=SESSION_MS / 1000 + 15,
                     what="the paused broker fenced")
    finally:
        c.resume(1)
    c.wait_unfenced(timeout=30)
    assert "was fenced by the controller" in c.node(1).output()


def test_restarted_controller_brokers_come_back_and_forward_writes(cluster) -> None:
    c = cluster(2)
    c.restart(c.controller.spec.node_id, kill=True)
    c.wait_unfenced(timeout=60)

    async def create_and_list() -> list[str]:
        async with c.admin(0) as admin:
            await admin.create_topics(["after-restart"])
        async with c.admin(1) as admin:
            return await admin.list_topics()
    assert "after-restart" in c.run(create_and_list())


def test_sigterm_is_a_controlled_shutdown(cluster) -> None:
    c = cluster(2)
    assert c.terminate(1) == 0
    out = c.node(1).output()
    assert "fenced for its controlled shutdown" in out or "stopped cleanly" in out
    c.wait_until(lambda: c.states([0]).get(0, {}).get(1) == "fenced", timeout=10,
                 what="the stopped broker fenced at once (not after its session)")


def test_a_replaced_controller_log_makes_brokers_resync_and_register_again(cluster) -> None:
    import shutil

    c = cluster(2)

    async def create(name: str, via: int) -> None:
        async with c.admin(via) as admin:
            await admin.create_topics([name])
    c.run(create("before", 0))
    ctl = c.controller
    ctl.kill()
    shutil.rmtree(ctl.spec.data_dir / "__cluster_metadata-0")  # a new, empty log (same cluster id)
    ctl.start().wait_listening(30)
    # the brokers' own images still show them unfenced until they notice the new log, so
    # wait for what they do about it before waiting for unfenced
    for b in (0, 1):
        wait_until(lambda: (out := c.node(b).output()).count("registered with the controller") >= 2
                   and "local metadata copy truncated to offset 0" in out and "STALE_BROKER_EPOCH" in out,
                   60, what=f"broker {b} to resync and register again")
    c.wait_unfenced(timeout=60)
    c.run(create("after", 1))

    async def topics(via: int) -> list[str]:
        async with c.admin(via) as admin:
            return await admin.list_topics()
    assert c.run(topics(0)) == ["after"] == c.run(topics(1))  # the old history is gone everywhere


def test_a_broker_with_an_empty_data_dir_adopts_the_controllers_cluster_id(cluster) -> None:
    import shutil

    c = cluster(1)
    node = c.node(0)
    node.stop()
    shutil.rmtree(node.spec.data_dir)  # no meta.properties: Kafka would need kafka-storage format
    node.spec.data_dir.mkdir()
    node.start().wait_listening(30)
    c.wait_unfenced(timeout=60)
    props = (node.spec.data_dir / "meta.properties").read_text()
    assert f"cluster.id={c.cluster_id}\n" in props
