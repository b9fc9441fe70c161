"""Dynamic voters in the Raft core (KIP-853): the voter set in the log, AddVoter /
RemoveVoter on the leader with Kafka's refusals, a removed leader resigning once its
removal commits, a truncation taking an uncommitted change back; the VotersRecord codec
against kio's; and seeded simulations that add and remove voters (the leader too) under
every fault with the invariants checked after every step."""

from __future__ import annotations

import io
import random
import uuid

import pytest
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter, VotersRecord
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, u16
from kio.schema.types import BrokerId

from hightide.cluster.raft import (
    AddVoter, ClientAppend, Committed, ElectionState, Entry, FlushDone, RaftConfig, RaftCore, RaftLog,
    Received, RemoveVoter, RoleChanged, Send, Tick, VoterChangeError, VoterNode, VoterSet,
)
from hightide.cluster.raft import messages as m
from hightide.cluster.raft.batches import (
    parse_voters_record, read_voters_batches, uuid_bytes, uuid_text, voters_batch, voters_record,
)
from hightide.cluster.raft.voters import read_voters, voters_payload
from tests.unit.raft_simulator import SimConfig, simulate

E = m.ErrorCode
VOTERS = (1, 2, 3)


def dyn_core(node: int, voters: tuple[int, ...] = VOTERS, *, kraft_version: int = 1, epoch: int = 0,
             leader: int = -1, entries: tuple[Entry, ...] = ()) -> RaftCore:
    log = RaftLog.restore(None, [(i, e) for i, e in enumerate(entries)])
    return RaftCore(node, voters, RaftConfig(), random.Random(node), 0, election=ElectionState(epoch, -1, leader),
                    log=log, kraft_version=kraft_version)


def sends(actions: list, kind: type) -> list[Send]:
    return [a for a in actions if isinstance(a, Send) and isinstance(a.message, kind)]


def elect(c: RaftCore, now: int = 5000) -> None:
    """Make ``c`` the leader: pre-vote and vote granted by every voter it asks."""
    c.step(0, Tick())
    out = c.step(now, Tick())
    for _ in range(2):
        nxt: list = []
        for s in sends(out, m.VoteRequest):
            nxt += c.step(now, Received(s.dest, m.VoteResponse(0, -1, s.message.replica_epoch, True),  # type: ignore[union-attr]
                                        s.correlation_id))
        out = nxt
    assert c.role == "leader"
    while c._pending_flushes:                    # LeaderChange (and the bootstrap voter set)
        c.step(now, FlushDone(c._pending_flushes[0]))


def fetch(node: int, epoch: int, offset: int, last_epoch: int, directory: str = "") -> Received:
    return Received(node, m.FetchRequest(node, epoch, offset, last_epoch, 0, 0, directory))


def committed_leader(voters: tuple[int, ...] = VOTERS, kraft_version: int = 1) -> RaftCore:
    """Node 1 leading epoch 1 with everything committed (every voter fetched to the end)."""
    c = dyn_core(1, voters, kraft_version=kraft_version)
    elect(c)
    for v in voters[1:]:
        c.step(5001, fetch(v, 1, c.log.end_offset, 1))
    assert c.high_watermark == c.log.end_offset
    return c


def test_the_first_leader_writes_the_bootstrap_voter_set_after_its_leader_change() -> None:
    c = dyn_core(1)
    elect(c)
    lc, vs = c.log.entry_at(0), c.log.entry_at(1)
    assert lc is not None and lc.control and vs is not None and vs.control and vs.epoch == 1
    assert read_voters(vs.payload) == VoterSet.of(VOTERS)
    assert c.voter_change_offset == 1
    static = dyn_core(1, kraft_version=0)
    elect(static)
    assert static.log.end_offset == 1          # a static quorum writes no voter set


def test_a_static_quorum_refuses_voter_changes_with_unsupported_version() -> None:
    c = committed_leader(kraft_version=0)
    with pytest.raises(VoterChangeError) as e:
        c.step(6000, RemoveVoter(3))
    assert e.value.error_code == E.unsupported_version


def test_a_voter_change_needs_the_leader_and_a_committed_entry_of_its_epoch() -> None:
    follower = dyn_core(2, epoch=1, leader=1)
    follower.step(0, Tick())
    with pytest.raises(VoterChangeError) as e:
        follower.step(1, RemoveVoter(3))
    assert e.value.error_code == E.not_leader_or_follower
    c = dyn_core(1)
    elect(c)                                    # elected; nothing of epoch 1 committed yet
    with pytest.raises(VoterChangeError) as e:
        c.step(6000, RemoveVoter(3))
    assert e.value.error_code == E.request_timed_out and "establish HWM" in e.value.message
    assert c.log.end_offset == 2                # nothing appended


def test_add_voter_needs_a_caught_up_observer_and_refuses_a_duplicate() -> None:
    c = committed_leader()
    end = c.log.end_offset
    with pytest.raises(VoterChangeError) as e:
        c.step(6000, AddVoter(VoterNode(2)))
    assert e.value.error_code == E.duplicate_voter
    with pytest.raises(VoterChangeError) as e:
        c.step(6000, AddVoter(VoterNode(4)))     # never fetched
    assert e.value.error_code == E.request_timed_out and "lagging" in e.value.message
    c.step(6001, fetch(4, 1, 0, 0, "dir-of-4"))  # fetching, but not at the end yet
    with pytest.raises(VoterChangeError):
        c.step(6002, AddVoter(VoterNode(4, "dir-of-4")))
    c.step(6003, fetch(4, 1, end, 1, "dir-of-4"))
    with pytest.raises(VoterChangeError):       # another directory: another replica
        c.step(6004, AddVoter(VoterNode(4, "other-dir")))
    c.step(6005, AddVoter(VoterNode(4, "dir-of-4", (("CONTROLLER", "h4", 9004),))))
    assert c.voters == (1, 2, 3, 4) and c.majority == 3
    assert c.voter_set.get(4) == VoterNode(4, "dir-of-4", (("CONTROLLER", "h4", 9004),))
    # one change at a time: the next waits for this one to commit
    with pytest.raises(VoterChangeError) as e:
        c.step(6006, RemoveVoter(3))
    assert e.value.error_code == E.request_timed_out and "commit the latest voter change" in e.value.message
    new_end = c.log.end_offset
    c.step(6007, FlushDone(new_end))
    c.step(6008, fetch(2, 1, new_end, 1))
    assert c.high_watermark < new_end           # 2 of 4: not a majority of the new set
    c.step(6009, fetch(4, 1, new_end, 1))       # the new voter counts at once
    assert c.high_watermark == new_end
    c.step(6010, RemoveVoter(3))
    assert c.voters == (1, 2, 4)


def test_remove_voter_refuses_an_unknown_voter_and_the_last_one() -> None:
    c = committed_leader()
    with pytest.raises(VoterChangeError) as e:
        c.step(6000, RemoveVoter(9))
    assert e.value.error_code == E.voter_not_found
    lone = committed_leader(voters=(1,))
    with pytest.raises(VoterChangeError) as e:
        lone.step(6000, RemoveVoter(1))
    assert e.value.error_code == E.voter_not_found


def test_a_leader_that_removes_itself_leads_until_the_change_commits_then_resigns() -> None:
    c = committed_leader()
    c.step(6000, RemoveVoter(1))
    assert c.voters == (2, 3) and not c.is_voter and c.role == "leader"
    end = c.log.end_offset
    c.step(6001, FlushDone(end))
    c.step(6002, fetch(2, 1, end, 1))
    assert c.role == "leader" and c.high_watermark < end   # it does not count itself any more
    out = c.step(6003, fetch(3, 1, end, 1))
    assert Committed(end) in out
    assert c.role == "resigned"
    ends = sends(out, m.EndQuorumEpochRequest)
    assert sorted(s.dest for s in ends) == [2, 3]
    # it never stands for election again: an observer
    c.step(20_000, Tick())
    assert c.role == "unattached" and not c.is_voter
    assert not sends(c.step(40_000, Tick()), m.VoteRequest)


def test_a_follower_uses_an_appended_voter_set_and_a_truncation_takes_it_back() -> None:
    f = dyn_core(4, epoch=1, leader=1, entries=(Entry(1, b"lc", control=True),
                                                Entry(1, voters_payload(VoterSet.of(VOTERS)), control=True)))
    assert f.voters == VOTERS and not f.is_voter
    f.step(0, Tick())
    added = Entry(1, voters_payload(VoterSet.of((1, 2, 3, 4))), control=True)
    f.step(1, Received(1, m.FetchResponse(0, 1, 1, 2, 0, records=(added,)), f._in_flight_cid))
    assert f.voters == (1, 2, 3, 4) and f.is_voter
    f.step(2, FlushDone(3))
    out = f.step(3, Received(1, m.FetchResponse(0, 1, 1, 2, 0, diverging_epoch=m.OffsetAndEpoch(2, 1)),
                             f._in_flight_cid))
    assert f.log.end_offset == 2 and f.voters == VOTERS and not f.is_voter
    del out


def test_a_restarted_replica_reads_its_voter_set_from_its_log() -> None:
    entries = (Entry(1, b"lc", control=True), Entry(1, voters_payload(VoterSet.of((1, 2, 3, 4))), control=True))
    c = dyn_core(4, kraft_version=0, entries=entries)
    assert c.voters == (1, 2, 3, 4) and c.is_voter and c.kraft_version == 1


def test_a_replica_that_is_not_a_voter_grants_votes_in_a_dynamic_quorum_only() -> None:
    req = Received(1, m.VoteRequest(1, 1, 0, 0))
    dyn = dyn_core(4)
    assert sends(dyn.step(0, req), m.VoteResponse)[0].message.vote_granted  # type: ignore[union-attr]
    static = dyn_core(4, kraft_version=0)
    answer = sends(static.step(0, req), m.VoteResponse)[0].message
    assert answer.error_code == E.inconsistent_voter_set and not answer.vote_granted  # type: ignore[union-attr]


# --- records ---------------------------------------------------------------------------

def _kio_bytes(obj: VotersRecord) -> bytes:
    buf = io.BytesIO()
    entity_writer(VotersRecord)(buf, obj)
    return buf.getvalue()


def test_voters_record_is_the_bytes_kio_writes_and_reads() -> None:
    d = uuid.uuid4()
    text = uuid_text(d.bytes)
    vs = VoterSet.of([VoterNode(3001, text, (("CONTROLLER", "127.0.0.1", 19093),)), VoterNode(3000)])
    kio_obj = VotersRecord(version=i16(0), voters=(
        Voter(voter_id=BrokerId(3000), voter_directory_id=uuid.UUID(int=0), endpoints=(),
              k_raft_version_feature=KRaftVersionFeature(min_supported_version=i16(0), max_supported_version=i16(1))),
        Voter(voter_id=BrokerId(3001), voter_directory_id=d,
              endpoints=(Endpoint(name="CONTROLLER", host="127.0.0.1", port=u16(19093)),),
              k_raft_version_feature=KRaftVersionFeature(min_supported_version=i16(0), max_supported_version=i16(1))),
    ))
    assert voters_record(vs) == _kio_bytes(kio_obj)
    back, _ = entity_reader(VotersRecord)(voters_record(vs), 0)
    assert back.voters[1].voter_directory_id == d
    assert parse_voters_record(_kio_bytes(kio_obj)) == vs
    assert uuid_bytes(text) == d.bytes and uuid_text(bytes(16)) == "" and uuid_bytes("") == bytes(16)


def test_the_voters_control_batch_is_found_among_other_batches() -> None:
    from hightide.cluster.raft.batches import leader_change_batch
    vs1 = VoterSet.of((1, 2, 3))
    vs2 = VoterSet.of((1, 2))
    data = leader_change_batch(1, 1, (1, 2, 3)) + voters_batch(vs1, 1) + voters_batch(vs2, 2)
    assert read_voters_batches(data) == vs2
    assert read_voters_batches(leader_change_batch(1, 1, (1, 2, 3))) is None


# --- simulation --------------------------------------------------------------------------

HEAVY = {"fault_interval_ms": 300, "kill_prob": 0.4, "partition_prob": 0.3, "snapshot_every": 10}


@pytest.mark.parametrize("voters,observers,profile,seeds", [
    (3, 2, {}, 60),
    (1, 2, {}, 30),
    (3, 2, HEAVY, 40),
    (5, 1, {"pre_vote": False, "fetch_max_entries": 1}, 30),
])
def test_simulated_voter_changes_keep_every_invariant(voters: int, observers: int, profile: dict, seeds: int) -> None:
    changes = removals = committed = 0
    for seed in range(seeds):
        sim = simulate(seed, SimConfig(voters=voters, observers=observers, kraft_version=1,
                                       reconfig_interval_ms=600, duration_ms=15_000, **profile))
        changes += sim.stats.voter_changes
        removals += sim.stats.leader_removals
        committed += sim.stats.committed
    # the runs did commit, and change voters (the leader removing itself too)
    assert committed > 20 * seeds and changes >= seeds // 2 and removals > 0


def test_with_kafkas_control_batches_the_voter_entries_are_whole_batches() -> None:
    """The production hooks: the voter-set entry is one control batch of two records (its
    count is 2), read back from the log and from a restart."""
    from hightide.cluster.raft.batches import encode_entries, leader_change_batch, voters_entry
    from hightide.cluster.raft.wire import decode_entries
    cfg = RaftConfig(leader_change_payload=leader_change_batch, voters_payload=voters_entry,
                     read_voters=read_voters_batches)
    c = RaftCore(1, VOTERS, cfg, random.Random(1), 0, kraft_version=1)
    elect(c)
    for v in (2, 3):
        c.step(5001, fetch(v, 1, c.log.end_offset, 1))
    c.step(5002, fetch(4, 1, c.log.end_offset, 1, uuid_text(uuid.uuid4().bytes)))
    c.step(5003, AddVoter(VoterNode(4, c.observer_directory[4], (("CONTROLLER", "h", 1),))))
    entries = c.log.entries()
    data = b"".join(encode_entries(base, (e,)) for base, e in entries)   # raises if a count is wrong
    assert [e.count for _, e in entries] == [1, 2, 2]
    back = decode_entries(data)
    restarted = RaftCore(2, VOTERS, cfg, random.Random(2), 0,
                         log=RaftLog.restore(None, [(b, e) for b, e in zip((0, 1, 3), back)]))
    assert restarted.voters == (1, 2, 3, 4) and restarted.kraft_version == 1
    assert restarted.voter_set.get(4) == VoterNode(4, c.observer_directory[4], (("CONTROLLER", "h", 1),))


def test_a_fetch_carries_the_fetchers_directory_id_over_the_wire() -> None:
    from hightide.cluster.raft.wire import from_kio, to_kio
    text = uuid_text(uuid.uuid4().bytes)
    buf = io.BytesIO()
    req = to_kio(m.FetchRequest(3, 7, 120, 6, 0, 500, text))
    entity_writer(type(req))(buf, req)
    decoded, _ = entity_reader(type(req))(buf.getvalue(), 0)
    assert from_kio(decoded) == m.FetchRequest(3, 7, 120, 6, 0, 500, text)


def test_check_quorum_follows_the_voter_set() -> None:
    """A leader left alone by a removal does not resign for want of fetches (it is a lone
    voter now); a lone voter that adds one resigns if the new voter never fetches."""
    c = committed_leader(voters=(1, 2))
    c.step(6000, RemoveVoter(2))
    end = c.log.end_offset
    c.step(6001, FlushDone(end))
    assert c.high_watermark == end and c.voters == (1,)
    c.step(60_000, Tick())
    assert c.role == "leader"
    lone = committed_leader(voters=(1,))
    lone.step(6000, fetch(2, 1, lone.log.end_offset, 1, "dir-2"))
    lone.step(6001, AddVoter(VoterNode(2, "dir-2")))
    assert lone.voters == (1, 2)
    lone.step(6001 + 3 * RaftConfig().fetch_timeout_ms, Tick())
    assert lone.role == "resigned"
