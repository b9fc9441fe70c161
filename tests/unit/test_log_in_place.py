"""PartitionLog.append from a writable memoryview (a Produce request's receive buffer):
the batch header is patched in place and written from there, producing exactly the
bytes the copying path writes; bytes and bytearrays are never modified."""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.log import LogConfig, PartitionLog
from hightide.log.storage_memory import MemoryStorage
from hightide.protocol.records import build_batch, scan_batches, validate_batches

CONFIGS = [LogConfig(segment_bytes=5000, index_interval_bytes=300),
           LogConfig(segment_bytes=5000, index_interval_bytes=300, message_timestamp_type="LogAppendTime")]


def _batches(n: int) -> list[bytes]:
    return [build_batch([(b"k%d" % i, bytes([i]) * (50 + 30 * i), [], 1_000 + i)], producer_id=7, producer_epoch=0,
                        base_sequence=i) for i in range(n)]


def _segment_bytes(lg: PartitionLog) -> bytes:
    return b"".join(s.read_at(0, s.size) for s in lg.segments)


def _open(tmp_path: Path, name: str, cfg: LogConfig) -> PartitionLog:
    return PartitionLog.open(str(tmp_path / name), cfg, 0, clean_shutdown=True)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["create-time", "log-append-time"])
def test_in_place_append_writes_the_same_bytes_as_the_copying_path(tmp_path: Path, cfg: LogConfig) -> None:
    copying, in_place = _open(tmp_path, "a-0", cfg), _open(tmp_path, "b-0", cfg)
    for i, b in enumerate(_batches(40)):  # rolls segments, adds index entries
        rc = copying.append(b, validate_batches(b), 5_000 + i, 3)
        frame = bytearray(b"junk" + b + b"tail")  # a receive buffer: the batch is a slice of it
        view = memoryview(frame)[4:4 + len(b)]
        ri = in_place.append(view, validate_batches(view), 5_000 + i, 3)
        assert (rc.base_offset, rc.last_offset, rc.log_append_time_ms) == (
            ri.base_offset, ri.last_offset, ri.log_append_time_ms)
        assert bytes(frame[4:4 + len(b)]) != b  # patched in place (base offset / epoch at least)
        assert frame[:4] == b"junk" and frame[-4:] == b"tail"
    assert _segment_bytes(in_place) == _segment_bytes(copying)
    assert [(s.base_offset, s.size, len(s.offset_index), len(s.time_index)) for s in in_place.segments] == [
        (s.base_offset, s.size, len(s.offset_index), len(s.time_index)) for s in copying.segments]
    assert len(in_place.segments) > 1
    scan = scan_batches(_segment_bytes(in_place))  # CRCs valid, offsets consecutive
    assert [h.base_offset for h in scan.headers] == list(range(40))
    validate_batches(_segment_bytes(in_place), client_origin=False)
    if cfg.log_append_time:
        assert {h.max_timestamp for h in scan.headers} == set(range(5_000, 5_040))


def test_adjacent_batches_of_one_append_are_patched_and_written_together(tmp_path: Path) -> None:
    copying, in_place = _open(tmp_path, "a-0", CONFIGS[1]), _open(tmp_path, "b-0", CONFIGS[1])
    several = b"".join(build_batch([(None, b"v" * n, [], 7)]) for n in (10, 20, 30))
    copying.append(several, validate_batches(several, client_origin=False), 9)
    frame = bytearray(several)
    in_place.append(memoryview(frame), validate_batches(frame, client_origin=False), 9)
    assert _segment_bytes(in_place) == _segment_bytes(copying) == bytes(frame)


@pytest.mark.parametrize("kind", [bytes, bytearray, lambda b: memoryview(bytearray(b)).toreadonly()])
def test_other_buffers_are_never_modified(tmp_path: Path, kind: type) -> None:
    lg = _open(tmp_path, "a-0", CONFIGS[1])
    for b in _batches(3):
        buf = kind(b)
        lg.append(buf, validate_batches(buf), 100, 2)
        assert bytes(buf) == b


def test_memory_storage_keeps_a_copy_not_the_view() -> None:
    """The in-memory engine retains written bytes: it must copy them, since the view's
    buffer is reused by the next receive."""
    storage = MemoryStorage()
    lg = PartitionLog.open("/m/t-0", CONFIGS[0], 0, clean_shutdown=True, storage=storage)
    b = _batches(1)[0]
    frame = bytearray(b)
    lg.append(memoryview(frame), validate_batches(frame), 0)
    written = _segment_bytes(lg)
    frame[:] = bytes(len(frame))  # the receive buffer is reused
    assert _segment_bytes(lg) == written and written[16:] == b[16:]
