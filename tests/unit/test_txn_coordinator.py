"""The transaction coordinator shard (sans-IO): Kafka's answers for each request, and a
seeded simulation of producers against the shard with reloads from the encoded log."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from hightide.txn.coordinator import NEED_PRODUCER_ID, InitResponse, TxnConfig, TxnResult, TxnShard
from hightide.txn.records import decode_key, decode_value, encode_key, encode_value
from hightide.txn.state import MAX_EPOCH, TxnMetadata, TxnState

E = ErrorCode


class Ctx:
    """A shard, its log (encoded records) and a clock: run an op, append, replay."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.shard = TxnShard(self.config)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.now = 1_000_000
        self.next_pid = 100

    def run(self, op) -> TxnResult:
        result = op(self.shard)
        for tid, meta in result.records:
            self.log.append((encode_key(tid), encode_value(meta)))
            self.shard.replay(tid, meta)
        return result

    def reload(self) -> None:
        fresh = TxnShard(self.config)
        for k, v in self.log:
            tid = decode_key(k)
            assert tid is not None
            fresh.replay(tid, decode_value(tid, v))
        assert {t: _persisted(m) for t, m in fresh.txns.items()} == \
            {t: _persisted(m) for t, m in self.shard.txns.items()}
        self.shard = fresh

    def init(self, tid: str, timeout: int = 60000, expected: tuple[int, int] | None = None) -> InitResponse:
        r = self.run(lambda s: s.init_producer_id(tid, timeout, expected, None, self.now))
        if r.response is NEED_PRODUCER_ID:
            self.next_pid += 1
            r = self.run(lambda s: s.init_producer_id(tid, timeout, expected, self.next_pid, self.now))
        assert isinstance(r.response, InitResponse)
        return r.response

    def add(self, tid: str, pid: int, epoch: int, *parts: tuple[str, int]) -> ErrorCode:
        return self.run(lambda s: s.add_partitions(tid, pid, epoch, parts, self.now)).response

    def end(self, tid: str, pid: int, epoch: int, commit: bool, complete: bool = True) -> ErrorCode:
        r = self.run(lambda s: s.end_txn(tid, pid, epoch, commit, self.now))
        if complete and r.markers is not None:
            self.run(lambda s: s.complete(r.markers, self.now))
        return r.response


def _persisted(m: TxnMetadata) -> tuple:
    return (m.producer_id, m.producer_epoch, m.timeout_ms, m.state, m.partitions, m.start_ms, m.update_ms)


def test_new_id_gets_a_producer_id_then_epoch_bumps():
    c = Ctx()
    first = c.init("t")
    assert (first.error, first.producer_epoch) == (E.none, 0)
    second = c.init("t")
    assert (second.error, second.producer_id, second.producer_epoch) == (E.none, first.producer_id, 1)


def test_commit_flow_and_retries():
    c = Ctx()
    r = c.init("t")
    pid = r.producer_id
    assert c.add("t", pid, 0, ("a", 0)) == E.none
    assert c.shard.txns["t"].state is TxnState.ONGOING
    n = len(c.log)
    assert c.add("t", pid, 0, ("a", 0)) == E.none and len(c.log) == n  # already in: nothing written
    prepare = c.run(lambda s: s.end_txn("t", pid, 0, True, c.now))
    assert prepare.response == E.none and prepare.markers is not None
    assert prepare.markers.partitions == (("a", 0),) and prepare.markers.commit
    assert c.add("t", pid, 0, ("b", 0)) == E.concurrent_transactions  # markers being written
    assert c.end("t", pid, 0, True, complete=False) == E.concurrent_transactions
    assert c.end("t", pid, 0, False, complete=False) == E.invalid_txn_state
    c.run(lambda s: s.complete(prepare.markers, c.now))
    m = c.shard.txns["t"]
    assert (m.state, m.partitions) == (TxnState.COMPLETE_COMMIT, frozenset())
    assert c.end("t", pid, 0, True) == E.none  # a retried EndTxn after completion
    assert c.end("t", pid, 0, False) == E.invalid_txn_state
    c.reload()


def test_producer_errors_as_kafka():
    c = Ctx()
    pid = c.init("t").producer_id
    c.init("t")  # epoch 1
    assert c.add("t", pid, 0, ("a", 0)) == E.producer_fenced
    assert c.add("t", pid + 1, 1, ("a", 0)) == E.invalid_producer_id_mapping
    assert c.add("nope", pid, 1, ("a", 0)) == E.invalid_producer_id_mapping
    assert c.end("t", pid, 1, True) == E.invalid_txn_state  # Empty: no transaction to end
    assert c.init("t", timeout=0).error == E.invalid_transaction_timeout
    assert c.init("t", timeout=c.config.max_timeout_ms + 1).error == E.invalid_transaction_timeout
    assert c.init("").error == E.invalid_request


def test_init_while_ongoing_fences_and_aborts():
    c = Ctx()
    pid = c.init("t").producer_id
    c.add("t", pid, 0, ("a", 0), ("b", 1))
    r = c.run(lambda s: s.init_producer_id("t", 60000, None, None, c.now))
    assert r.response.error == E.concurrent_transactions
    assert r.markers is not None and not r.markers.commit and r.markers.producer_epoch == 1
    assert c.shard.txns["t"].state is TxnState.PREPARE_ABORT
    assert c.init("t").error == E.concurrent_transactions  # until the markers are written
    c.run(lambda s: s.complete(r.markers, c.now))
    again = c.init("t")
    assert (again.error, again.producer_epoch) == (E.none, 2)
    assert c.add("t", pid, 0, ("a", 0)) == E.producer_fenced  # the zombie


def test_kip360_retry_and_fencing():
    c = Ctx()
    pid = c.init("t").producer_id
    bumped = c.init("t", expected=(pid, 0))
    assert (bumped.error, bumped.producer_epoch) == (E.none, 1)
    retry = c.init("t", expected=(pid, 0))  # the answer was lost: same answer again
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, pid, 1)
    assert c.init("t", expected=(pid + 7, 1)).error == E.producer_fenced
    c.init("t", expected=(pid, 1))
    assert c.init("t", expected=(pid, 0)).error == E.producer_fenced  # two bumps ago


def test_exhausted_epoch_rotates_the_producer_id():
    c = Ctx()
    pid = c.init("t").producer_id
    m = c.shard.txns["t"]
    c.shard.replay("t", TxnMetadata("t", pid, MAX_EPOCH - 1, m.timeout_ms, TxnState.COMPLETE_COMMIT,
                                    update_ms=c.now))
    r = c.init("t")
    assert r.error == E.none and r.producer_id != pid and r.producer_epoch == 0
    assert c.shard.txns["t"].prev_producer_id == pid


def test_timeout_abort_bumps_the_epoch():
    c = Ctx()
    pid = c.init("t", timeout=1000).producer_id
    c.add("t", pid, 0, ("a", 0))
    assert c.shard.timed_out(c.now + 1000) == []
    late = c.now + 1001
    assert [m.transactional_id for m in c.shard.timed_out(late)] == ["t"]
    r = c.run(lambda s: s.abort_timed_out("t", pid, 0, late))
    assert r.markers is not None and r.markers.producer_epoch == 1 and not r.markers.commit
    c.run(lambda s: s.complete(r.markers, late))
    assert c.shard.txns["t"].state is TxnState.COMPLETE_ABORT
    assert c.end("t", pid, 0, True) == E.producer_fenced
    assert c.run(lambda s: s.abort_timed_out("t", pid, 0, late)).records == []  # already done


def test_verify_is_kip890s_check():
    c = Ctx()
    pid = c.init("t").producer_id
    assert c.shard.verify("t", pid, 0, [("a", 0)]) == {("a", 0): E.invalid_txn_state}
    c.add("t", pid, 0, ("a", 0))
    assert c.shard.verify("t", pid, 0, [("a", 0), ("a", 1)]) == {("a", 0): E.none, ("a", 1): E.invalid_txn_state}
    assert c.shard.verify("t", pid, 1, [("a", 0)]) == {("a", 0): E.producer_fenced}  # not the current epoch
    c.init("t")  # fences and aborts
    assert c.shard.verify("t", pid, 0, [("a", 0)]) == {("a", 0): E.producer_fenced}
    assert c.shard.verify("x", pid, 0, [("a", 0)]) == {("a", 0): E.invalid_producer_id_mapping}


def test_idle_ids_expire_through_dead():
    c = Ctx(TxnConfig(id_expiration_ms=5000))
    pid = c.init("idle").producer_id
    c.init("busy")
    c.add("busy", c.shard.txns["busy"].producer_id, 0, ("a", 0))
    assert c.run(lambda s: s.expire(c.now + 4999)).records == []
    r = c.run(lambda s: s.expire(c.now + 5000))
    assert r.records == [("idle", None)] and "idle" not in c.shard.txns
    c.reload()
    assert "idle" not in c.shard.txns and "busy" in c.shard.txns
    assert pid > 0


@pytest.mark.parametrize("seed", range(8))
def test_seeded_simulation_with_reloads(seed):
    """Random producers (some zombies) and timers against one shard; after every step the
    state equals a reload of the log, and the invariants hold: one outcome per decided
    transaction, epochs never go down, completing transactions only in Prepare states."""
    rng = random.Random(seed)
    c = Ctx(TxnConfig(id_expiration_ms=50_000))
    ids = [f"t{i}" for i in range(4)]
    known: dict[str, tuple[int, int]] = {}  # what each "latest" producer believes
    zombies: list[tuple[str, int, int]] = []
    pending: list = []  # markers decided, not completed
    epochs: dict[str, tuple[int, int]] = {}
    for _ in range(300):
        c.now += rng.randint(0, 400)
        tid = rng.choice(ids)
        action = rng.random()
        if action < 0.2:
            r = c.init(tid, timeout=rng.choice([500, 5000]))
            if r.error == E.none:
                if tid in known:
                    zombies.append((tid, *known[tid]))
                known[tid] = (r.producer_id, r.producer_epoch)
        elif action < 0.5 and tid in known:
            pid, ep = known[tid]
            c.add(tid, pid, ep, (rng.choice("ab"), rng.randint(0, 2)))
        elif action < 0.65 and tid in known:
            pid, ep = known[tid]
            r = c.run(lambda s: s.end_txn(tid, pid, ep, rng.random() < 0.6, c.now))
            if r.markers is not None:
                pending.append(r.markers)
        elif action < 0.75 and zombies:
            z = rng.choice(zombies)
            assert c.add(z[0], z[1], z[2], ("a", 0)) in (E.producer_fenced, E.invalid_producer_id_mapping,
                                                         E.concurrent_transactions, E.none)
        elif action < 0.85 and pending:
            m = pending.pop(rng.randrange(len(pending)))
            c.run(lambda s: s.complete(m, c.now))
        elif action < 0.92:
            for meta in c.shard.timed_out(c.now):
                r = c.run(lambda s: s.abort_timed_out(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                                                      c.now))
                if r.markers is not None:
                    pending.append(r.markers)
        elif action < 0.95:
            c.run(lambda s: s.expire(c.now))
        else:
            c.reload()
            pending = c.shard.completing()  # what a restart resumes
        for t, m in c.shard.txns.items():
            if t in epochs and epochs[t][0] == m.producer_id:
                assert m.producer_epoch >= epochs[t][1]
            epochs[t] = (m.producer_id, m.producer_epoch)
            if m.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY):
                assert not m.partitions
        decided = {m.transactional_id for m in c.shard.completing()}
        assert decided == {t for t, m in c.shard.txns.items()
                           if m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)}
    c.reload()
