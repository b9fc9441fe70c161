"""Unformatted voters (issue 26, item 2): a voter whose storage was not formatted for the
voter set (``can_vote=False``: a new or wiped data dir, no quorum-state) never votes or
stands for election until it follows a leader the other voters elected. So two new, empty
voters added next to a controller that has the cluster's log elect nobody (they used to
elect one of themselves and make the old controller truncate its log to 0)."""

from __future__ import annotations

import random
from collections import deque

from hightide.cluster.raft import (
    ElectionState, Entry, Flush, FlushDone, RaftConfig, RaftCore, RaftLog, Received, Send, Tick, Truncate,
)
from hightide.cluster.raft import messages as m

VOTERS = (1, 2, 3)


def node(nid: int, *, epochs: tuple[int, ...] = (), election: ElectionState | None = None,
         can_vote: bool = True) -> RaftCore:
    log = RaftLog.restore(None, [(i, Entry(e, b"x%d" % i)) for i, e in enumerate(epochs)])
    return RaftCore(nid, VOTERS, RaftConfig(), random.Random(nid), 0, election=election, log=log,
                    can_vote=can_vote)


def run(nodes: dict[int, RaftCore], until_ms: int, step_ms: int = 10) -> list[tuple[int, object]]:
    """Deliver every message at once and complete every flush, ticking every ``step_ms``;
    returns every (node, action) emitted."""
    seen: list[tuple[int, object]] = []
    queue: deque[tuple[int, object]] = deque()
    for now in range(0, until_ms, step_ms):
        for nid, c in nodes.items():
            queue.extend((nid, a) for a in c.step(now, Tick()))
        while queue:
            nid, action = queue.popleft()
            seen.append((nid, action))
            if isinstance(action, Send) and action.dest in nodes:
                out = nodes[action.dest].step(now, Received(nid, action.message, action.correlation_id))
                queue.extend((action.dest, a) for a in out)
            elif isinstance(action, Flush):
                queue.extend((nid, a) for a in nodes[nid].step(now, FlushDone(action.end_offset)))
    return seen


def test_two_empty_unformatted_voters_never_elect_one_of_themselves() -> None:
    nodes = {1: node(1, epochs=(0,) * 20, election=ElectionState(0)),  # the old controller's log
             2: node(2, can_vote=False), 3: node(3, can_vote=False)}
    seen = run(nodes, 30_000)
    assert all(c.role != "leader" for c in nodes.values()), {n: c.role for n, c in nodes.items()}
    assert not [a for n, a in seen if isinstance(a, Truncate)]
    assert nodes[1].log.end_offset == 20
    granted = [a.message for n, a in seen if n in (2, 3) and isinstance(a, Send)
               and isinstance(a.message, m.VoteResponse) and a.message.vote_granted]
    assert not granted
    assert not [a for n, a in seen if n in (2, 3) and isinstance(a, Send) and isinstance(a.message, m.VoteRequest)]


def test_the_same_two_formatted_voters_would_elect_an_empty_leader() -> None:
    """The case the rule exists for (and what the old shell did: every voter could vote)."""
    nodes = {1: node(1, epochs=(0,) * 20, election=ElectionState(0)), 2: node(2), 3: node(3)}
    run(nodes, 30_000)
    leader = next((n for n, c in nodes.items() if c.role == "leader"), None)
    assert leader is not None


def test_an_unformatted_voter_follows_the_elected_leader_and_then_votes() -> None:
    nodes = {1: node(1), 2: node(2), 3: node(3, can_vote=False)}
    run(nodes, 10_000)
    leader = next(n for n, c in nodes.items() if c.role == "leader")
    assert leader in (1, 2)
    assert nodes[3].role == "follower" and nodes[3].leader_id == leader and nodes[3].can_vote
    assert nodes[3].log.end_offset == nodes[leader].log.end_offset


def test_an_unformatted_voter_refuses_votes_and_pre_votes() -> None:
    c = node(2, can_vote=False)
    for pre in (True, False):
        out = c.step(0, Received(1, m.VoteRequest(1, 1, 0, 0, pre), 7))
        [resp] = [a.message for a in out if isinstance(a, Send) and isinstance(a.message, m.VoteResponse)]
        assert not resp.vote_granted
