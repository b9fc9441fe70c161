"""The whole-cluster simulation's optional clients (issue 28, items 2 and 4): each
invariant's ledger rejects what it exists to reject and accepts what Kafka allows; a
seed with every client holds every invariant and replays exactly. (Their planted bugs
are searched with the others' in tests/unit/test_sim_seeds.py, in worker processes.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hightide.sim.admin_client import MetadataLedger
from hightide.sim.checker import Anomaly
from hightide.sim.client_set import CLIENT_KINDS, group_epoch_of
from hightide.sim.group_clients import CoordinatorWitness, assigned_partitions, assignment
from hightide.sim.run import simulate
from hightide.sim.share_client import ACCEPT, RELEASE, REJECT, ShareLedger
from hightide.sim.txn_client import TxnLedger

OUT0, OUT1, IN0 = ("out", 0), ("out", 1), ("in", 0)


def _v(n: int, q: int, i: int) -> bytes:
    return f"tx0:{n}:{q}:{i}".encode()


def _txn(ledger: TxnLedger, n: int, offsets: dict, commit: bool | None, position: int = 5) -> None:
    values = {tp: [_v(n, tp[1], i) for i in range(2)] for tp in offsets}
    ledger.begin(n, values, ("g", IN0, position))
    ledger.produced(n, offsets)
    if commit is not None:
        ledger.ending(n, commit)
        ledger.ended(n, commit)


# --- transactions ----------------------------------------------------------------------------
def test_read_committed_accepts_committed_and_skips_aborted():
    ledger = TxnLedger()
    _txn(ledger, 1, {OUT0: 0}, commit=True)
    _txn(ledger, 2, {OUT0: 3}, commit=False)
    snap = ledger.committed_snapshot()
    ledger.read_committed(OUT0, [(0, _v(1, 0, 0)), (1, _v(1, 0, 1))], 6, snap)
    assert ledger.unseen_commits() == []


@pytest.mark.parametrize("commit", [False, None])
def test_read_committed_showing_aborted_or_open_data_is_an_anomaly(commit):
    ledger = TxnLedger()
    _txn(ledger, 1, {OUT0: 0}, commit=commit)
    with pytest.raises(Anomaly, match="commit was never sent"):
        ledger.read_committed(OUT0, [(0, _v(1, 0, 0))], 3, [])


def test_a_committed_transaction_missing_below_the_lso_is_an_anomaly():
    ledger = TxnLedger()
    _txn(ledger, 1, {OUT0: 0}, commit=True)
    with pytest.raises(Anomaly, match="committed transaction 1"):
        ledger.read_committed(OUT0, [(0, _v(1, 0, 0))], 3, ledger.committed_snapshot())
    ledger2 = TxnLedger()
    _txn(ledger2, 1, {OUT0: 0}, commit=True)
    ledger2.read_committed(OUT0, [], 1, ledger2.committed_snapshot())  # the LSO has not passed it yet


def test_a_transaction_in_doubt_must_be_all_or_nothing():
    ledger = TxnLedger()
    _txn(ledger, 1, {OUT0: 0, OUT1: 0}, commit=None)
    ledger.ending(1, True)
    ledger.reinitialized()  # EndTxn(commit) never answered: in doubt
    assert ledger.txns[1].state == "in-doubt"
    ledger.read_committed(OUT0, [(0, _v(1, 0, 0)), (1, _v(1, 0, 1))], 3, [])
    with pytest.raises(Anomaly, match="visible in some of its partitions only"):
        ledger.read_committed(OUT1, [], 3, [])


def test_reinitializing_aborts_an_open_transaction():
    ledger = TxnLedger()
    _txn(ledger, 1, {OUT0: 0}, commit=None)
    ledger.reinitialized()
    assert ledger.txns[1].state == "aborted"


def test_transactional_offsets():
    ledger = TxnLedger()
    _txn(ledger, 1, {OUT0: 0}, commit=True, position=5)
    _txn(ledger, 2, {OUT0: 3}, commit=False, position=9)
    floor = ledger.commit_floor("g", IN0)
    assert floor == 5
    ledger.fetched_offset("g", IN0, 5, floor=floor)
    with pytest.raises(Anomaly, match="after the transaction that committed 5"):
        ledger.fetched_offset("g", IN0, -1, floor=floor)
    with pytest.raises(Anomaly, match="committed only by aborted"):
        ledger.fetched_offset("g", IN0, 9, floor=floor)
    with pytest.raises(Anomaly, match="which no transaction committed"):
        ledger.fetched_offset("g", IN0, 7, floor=floor)


# --- share groups ----------------------------------------------------------------------------
def test_an_acknowledged_record_acquired_again_is_an_anomaly():
    ledger = ShareLedger()
    sent_before = ledger.tick()
    ledger.acknowledged(IN0, [(0, 4, ACCEPT), (5, 5, RELEASE), (6, 6, REJECT)], "m1")
    ledger.acquired(IN0, 0, 6, sent_before, "m2")  # its request went out before the answer: allowed
    sent_after = ledger.tick()
    ledger.acquired(IN0, 5, 5, sent_after, "m2")  # released: may come back
    with pytest.raises(Anomaly, match="offset 3: acknowledged"):
        ledger.acquired(IN0, 3, 3, sent_after, "m2")
    with pytest.raises(Anomaly, match="offset 6: acknowledged"):
        ledger.acquired(IN0, 6, 8, sent_after, "m2")


# --- coordinators ----------------------------------------------------------------------------
def test_two_coordinators_in_one_epoch_is_an_anomaly():
    epochs = {(1, "g"): (0, 4, 1), (2, "g"): (0, 5, 2), (3, "g"): (0, 5, 3), (4, "g"): None}
    witness = CoordinatorWitness(lambda node, group: epochs[(node, group)])
    witness.answer(1, "g", "Heartbeat")  # its image lags (epoch 4): not flagged, as in Kafka
    witness.answer(2, "g", "Heartbeat")
    witness.answer(2, "g", "OffsetCommit")
    witness.answer(4, "g", "OffsetCommit")  # no longer serving it when the answer came: not recorded
    with pytest.raises(Anomaly, match="broker 2 answered Heartbeat and broker 3"):
        witness.answer(3, "g", "JoinGroup")


def test_a_broker_serving_a_partition_its_own_image_gives_to_another_is_a_second_coordinator():
    """The check could not fire before: a broker was looked up only if its own image named
    it leader, and two images never name two leaders in one leader epoch (one metadata
    log). A broker that keeps a coordinator partition loaded after applying the metadata
    that moved it away (the ``coordinator-not-unloaded`` planted bug) answers in the new
    leader's epoch."""
    offsets = SimpleNamespace(partitions={0: SimpleNamespace(leader=2, leader_epoch=7)})
    broker = SimpleNamespace(groups=SimpleNamespace(partition_for=lambda group: 0,
                                                    runtime=SimpleNamespace(partitions={0: object()})),
                             image=SimpleNamespace(topics={"__consumer_offsets": offsets}))
    world = SimpleNamespace(nodes={1: SimpleNamespace(broker=broker)})
    assert group_epoch_of(world, 1, "g") == (0, 7, 2)  # type: ignore[arg-type]
    witness = CoordinatorWitness(lambda node, group: group_epoch_of(world, node, group))  # type: ignore[arg-type]
    with pytest.raises(Anomaly, match="broker 1 answered Heartbeat .* in leader epoch 7, whose leader in its own "
                                      "image is broker 2"):
        witness.answer(1, "g", "Heartbeat")


def test_consumer_protocol_assignment_round_trips():
    assert assigned_partitions(assignment("sim", [0, 2])) == [0, 2]
    assert assigned_partitions(b"") == []


# --- metadata --------------------------------------------------------------------------------
def test_metadata_reads_never_go_backwards():
    ledger = MetadataLedger()
    ledger.wrote("adm-1", stage=1)
    before = ledger.snapshot()
    ledger.read_topics(0, set(), before, guarded=False)  # a broker that answered past its wait: not checked
    with pytest.raises(Anomaly, match="adm-1 as not created after it was exists"):
        ledger.read_topics(0, set(), before, guarded=True)
    ledger.read_topics(1, {"adm-1", "adm-2"}, before, guarded=True)  # adm-2 seen: now its floor
    with pytest.raises(Anomaly, match="adm-2 as not created"):
        ledger.read_topics(2, {"adm-1"}, ledger.snapshot(), guarded=True)
    ledger.delete_sent.add("adm-1")
    ledger.read_topics(2, {"adm-2"}, ledger.snapshot(), guarded=True)  # deleted: gone
    with pytest.raises(Anomaly, match="adm-1 as exists after it was deleted"):
        ledger.read_topics(0, {"adm-1", "adm-2"}, ledger.snapshot(), guarded=True)


def test_config_reads_never_go_backwards():
    ledger = MetadataLedger()
    ledger.wrote("adm-1", stage=1, retention=100)
    ledger.read_retention(0, "adm-1", 120, ledger.snapshot(), guarded=True)
    with pytest.raises(Anomaly, match="retention.ms=110 after 120"):
        ledger.read_retention(1, "adm-1", 110, ledger.snapshot(), guarded=True)


def test_a_config_change_after_one_in_doubt_still_raises_the_value():
    """Seed 34 (``--faults cut-off --clients admin``): a forwarded IncrementalAlterConfigs
    lost its answer but was applied (retention.ms=864001933); the admin's next change was
    computed from the last *answered* value and set 864001420, so a read of it was taken
    for a read going backwards. Every value sent must be above every value sent before."""
    import asyncio
    import random
    from types import SimpleNamespace

    from hightide.client.errors import KafkaTimeoutError
    from hightide.sim.admin_client import AdminWorker
    from hightide.sim.checker import Checker

    sent: list[int] = []

    async def send(node, api, wanted, low, body):
        sent.append(int(body["resources"][0]["configs"][0]["value"]))
        if len(sent) == 1:
            raise KafkaTimeoutError("the answer was lost")
        return SimpleNamespace(responses=[SimpleNamespace(error_code=0)]), True

    w = AdminWorker("ad0", [], None, Checker(), random.Random(0), lambda _: None, lambda: 0.0,
                    ledger=MetadataLedger(), gate_of=lambda _: None, brokers=[0], replicas=1)
    w._send = send  # type: ignore[method-assign]
    with pytest.raises(KafkaTimeoutError):
        asyncio.run(w._alter(0, "adm-1"))
    asyncio.run(w._alter(0, "adm-1"))
    assert sent[1] > sent[0]  # Random(0) draws 865, then 395


# --- the whole run ---------------------------------------------------------------------------
def test_a_seed_with_every_client_holds_and_replays_exactly():
    first = simulate(4, duration_s=8, clients=CLIENT_KINDS)
    assert first.ok, "\n".join(first.trace[-40:])
    c = first.counts
    assert c["txns committed"] > 5 and c["read_committed reads"] > 3
    assert c["member commits acked"] > 5 and c["coordinator answers witnessed"] > 10
    assert c["share records acknowledged"] > 10
    assert c["admin writes acked"] > 3 and c["metadata reads checked"] > 3
    again = simulate(4, duration_s=8, clients=CLIENT_KINDS)
    assert again.trace == first.trace and again.digest == first.digest


def test_a_broker_behind_the_lao_does_not_answer_metadata_from_its_stale_copy():
    """Seed 8 (found by the admin client): broker 0's local metadata copy failed an fsync
    at 11.7 s, so it stopped applying metadata (image at offset 81) but kept running and
    answering; the controller fenced it and the lowest acknowledged offset went on
    without it (126, 147, ...). A topic deleted through broker 2 (answered at 16.6 s)
    then still showed in a Metadata answer of broker 0: its read gate only checked that
    the LAO covered what broker 0 held, which a broker behind always passes."""
    _holds(8)


def test_a_committed_transaction_is_not_aborted_by_a_marker_the_new_leader_never_got():
    """Seed 21 (found by the transactional client): the leader of sim-tx-1 was paused
    while transaction 25 committed; on resuming, deposed but not knowing it yet, it
    appended the COMMIT marker and answered WriteTxnMarkers at once; the coordinator
    completed the transaction, the new leader never got the marker, and the producer's
    next transaction (aborted) aborted transaction 25's records there."""
    _holds(21)


def _holds(seed: int) -> None:
    r = simulate(seed, duration_s=12, clients=CLIENT_KINDS)
    assert r.ok, (f"{r.anomaly}\nreplay: python -m hightide.sim --seed {seed} --duration 12 --clients all --trace "
                  "--logs\n" + "\n".join(r.trace[-30:]))
