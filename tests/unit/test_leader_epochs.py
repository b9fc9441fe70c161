"""The leader-epoch cache (log/leader_epochs.py): Kafka's LeaderEpochFileCache semantics
(the cases of its LeaderEpochFileCacheTest, restated) and the checkpoint file format."""

from __future__ import annotations

import pytest

from hightide.log.leader_epochs import (
    CheckpointCorrupt,
    EpochEntry,
    LeaderEpochCache,
    parse_checkpoint,
)

U = (-1, -1)  # (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache()
    for e, s in entries:
        c.assign(e, s)
    return c


def test_assign_and_latest_epoch_answers_the_log_end() -> None:
    c = cache((2, 10))
    assert c.latest_epoch == 2 and c.entries() == [EpochEntry(2, 10)]
    assert c.end_offset_for(2, 11) == (2, 11)
    c.assign(2, 12)  # the latest epoch again, later: nothing changes
    assert c.entries() == [EpochEntry(2, 10)] and c.end_offset_for(2, 14) == (2, 14)


def test_undefined_and_unknown_epochs() -> None:
    assert LeaderEpochCache().end_offset_for(0, 0) == U
    assert LeaderEpochCache().end_offset_for(-1, 73) == U
    assert LeaderEpochCache().latest_epoch is None
    c = cache((2, 11), (3, 12))
    assert c.end_offset_for(-1, 0) == U
    assert cache((2, 100)).end_offset_for(3, 100) == U  # newer than the latest


def test_monotonic_start_offsets_and_epochs_enforced() -> None:
    assert cache((2, 9), (3, 9)).entries() == [EpochEntry(3, 9)]
    assert cache((2, 6), (2, 10)).entries() == [EpochEntry(2, 6)]
    assert cache((2, 6), (3, 5)).entries() == [EpochEntry(3, 5)]
    c = cache((1, 5), (2, 6), (1, 7))  # an old epoch again at a later offset: the conflict goes
    assert c.latest_epoch == 1 and c.entries() == [EpochEntry(1, 7)]
    assert c.end_offset_for(1, 8) == (1, 8) and c.end_offset_for(2, 8) == U


def test_requested_epoch_older_than_every_entry() -> None:
    assert cache((5, 11), (6, 12), (7, 13)).end_offset_for(4, 0) == (4, 11)


def test_matching_epoch_with_earlier_start_truncates() -> None:
    c = cache((5, 11), (6, 12), (7, 13))
    c.assign(7, 12)
    assert c.entries() == [EpochEntry(5, 11), EpochEntry(7, 12)]
    assert c.end_offset_for(5, 0) == (5, 12) and c.end_offset_for(6, 0) == (5, 12)


def test_end_offset_is_the_next_epochs_start() -> None:
    c = cache((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert c.end_offset_for(2, 17) == (2, 15)
    c = cache((0, 10), (2, 13), (4, 17))
    assert c.end_offset_for(1, 0) == (0, 13)  # largest epoch <= requested
    assert c.end_offset_for(2, 0) == (2, 17)
    assert c.end_offset_for(3, 0) == (2, 17)


def test_epochs_tracked_as_leaders_change() -> None:
    c = cache((0, 0), (1, 0))
    assert c.entries() == [EpochEntry(1, 0)]  # epoch 0 never had data
    assert c.end_offset_for(1, 0) == (1, 0) and c.end_offset_for(0, 0) == (0, 0)
    assert c.end_offset_for(1, 5) == (1, 5) and c.end_offset_for(0, 5) == (0, 0)
    c.assign(2, 5)
    assert c.end_offset_for(2, 10) == (2, 10) and c.end_offset_for(1, 10) == (1, 5)
    c = cache((0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8))
    assert c.end_offset_for(2, 9) == (2, 9)
    assert c.end_offset_for(0, 9) == (0, 3) and c.end_offset_for(1, 9) == (1, 6)


def test_truncate_from_end() -> None:
    c = cache((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_end(8) == [EpochEntry(3, 8), EpochEntry(4, 11)]
    assert c.entries() == [EpochEntry(2, 6)]
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_end(9)
    assert c.latest_epoch == 3 and c.entries() == [EpochEntry(2, 6), EpochEntry(3, 8)]
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_end(-1)
    assert len(c) == 3
    LeaderEpochCache().truncate_from_end(7)  # empty: nothing to do


@pytest.mark.parametrize(("start", "expected"), [
    (8, [(3, 8), (4, 11)]),
    (1, [(2, 6), (3, 8), (4, 11)]),
    (6, [(2, 6), (3, 8), (4, 11)]),
    (11, [(4, 11)]),
    (9, [(3, 9), (4, 11)]),
    (15, [(4, 15)]),
    (-1, [(2, 6), (3, 8), (4, 11)]),
])
def test_truncate_from_start(start: int, expected: list[tuple[int, int]]) -> None:
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(start)
    assert c.entries() == [EpochEntry(*e) for e in expected]


def test_truncate_from_start_between_the_first_two() -> None:
    c = cache((0, 0), (1, 7), (2, 10))
    c.truncate_from_start(5)
    assert c.entries() == [EpochEntry(0, 5), EpochEntry(1, 7), EpochEntry(2, 10)]
    LeaderEpochCache().truncate_from_start(7)


def test_clear_and_epoch_for_offset() -> None:
    c = cache((2, 6), (3, 8), (4, 11))
    assert [c.epoch_for_offset(o) for o in (5, 6, 7, 8, 10, 11, 99)] == [None, 2, 2, 3, 3, 4, 4]
    c.clear()
    assert c.entries() == [] and c.dirty


def test_invalid_entries_refused() -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(-1, 0)
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(0, -1)


def test_checkpoint_text_is_kafkas_format_and_round_trips() -> None:
    c = cache((0, 0), (3, 120), (7, 5000))
    assert c.checkpoint_text() == "0\n3\n0 0\n3 120\n7 5000\n"
    assert parse_checkpoint(c.checkpoint_text()) == c.entries()
    assert LeaderEpochCache(parse_checkpoint(c.checkpoint_text())).entries() == c.entries()
    assert parse_checkpoint("0\n0\n") == []


def test_take_checkpoint_only_when_changed() -> None:
    c = cache((1, 0))
    assert c.take_checkpoint() == "0\n1\n1 0\n"
    assert c.take_checkpoint() is None
    c.assign(1, 10)
    assert c.take_checkpoint() is None
    c.assign(2, 10)
    assert c.take_checkpoint() == "0\n2\n1 0\n2 10\n"
    c.truncate_from_start(0)  # nothing moves: not dirty
    assert c.take_checkpoint() is None


@pytest.mark.parametrize("text", [
    "", "0\n", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\n1\nx 0\n", "0\n2\n3 10\n2 20\n", "0\n2\n1 10\n2 10\n",
    "0\n1\n-1 0\n",
])
def test_corrupt_checkpoints_refused(text: str) -> None:
    with pytest.raises(CheckpointCorrupt):
        parse_checkpoint(text)
