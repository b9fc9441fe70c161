"""Issue 33: after a clean shutdown no segment is recovered, the active one included, as
Kafka's LogLoader trusts the clean-shutdown marker; after an unclean one the active
segment is CRC-scanned and a torn or corrupt tail cut off."""

from __future__ import annotations

from pathlib import Path

from hightide.log import LogConfig, PartitionLog
from hightide.protocol.records import build_batch, validate_batches

CFG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=300)


def _filled(tmp_path: Path) -> Path:
    plog = PartitionLog.open(str(tmp_path / "t-0"), CFG, 0, clean_shutdown=False)
    for i in range(20):
        b = build_batch([(None, bytes([i]) * 100, [], 1000 + i)])
        plog.append(b, validate_batches(b), 0)
    plog.close()  # flushed: what a clean shutdown leaves
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[-10] ^= 0xFF  # a payload byte of the last batch: its CRC no longer matches
    seg.write_bytes(bytes(data))
    return seg


def test_a_clean_start_loads_the_active_segment_without_scanning_it(tmp_path):
    _filled(tmp_path)
    plog = PartitionLog.open(str(tmp_path / "t-0"), CFG, 0, clean_shutdown=True)
    assert plog.log_end_offset == 20  # not scanned: the flipped byte is not looked at
    assert plog.segments[0].max_timestamp == 1019
    plog.close()


def test_an_unclean_start_scans_the_active_segment(tmp_path):
    _filled(tmp_path)
    plog = PartitionLog.open(str(tmp_path / "t-0"), CFG, 0, clean_shutdown=False)
    assert plog.log_end_offset == 19  # the corrupt last batch cut off
    plog.close()
