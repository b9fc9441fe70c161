"""The descriptor cache (``hightide.log.storage_cache``) beyond the shared storage
contract (which runs on it too): the budget holds, evicted handles keep POSIX semantics
across unlink and rename, an fsync through a reopened handle makes earlier writes durable,
concurrent readers, running out of descriptors, sendfile regions, and a partition log
with many more segments than open files surviving a power cut."""

from __future__ import annotations

import os
import threading

import pytest

from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.log.storage import POSIX, make_dirs_durable
from hightide.log.storage_cache import DescriptorCache, default_max_open_files, raise_nofile_limit
from hightide.log.storage_faulty import Fault, FaultyStorage
from hightide.log.storage_memory import MemoryStorage
from hightide.protocol.records import build_batch, decode_records, iter_headers, validate_batches


@pytest.fixture(params=["posix", "memory"])
def root_and_inner(request, tmp_path):
    if request.param == "posix":
        return str(tmp_path), POSIX
    mem = MemoryStorage()
    make_dirs_durable(mem, "/data")
    return "/data", mem


def test_the_budget_holds_and_evicted_files_reopen(root_and_inner):
    root, inner = root_and_inner
    st = DescriptorCache(inner, 3)
    files = [st.open(f"{root}/f{i}") for i in range(10)]
    assert st.open_files == 3
    for i, f in enumerate(files):
        f.pwrite(f"file {i}".encode(), 0)
        assert st.open_files <= 3
    for i, f in enumerate(files):
        assert f.pread(100, 0) == f"file {i}".encode() and f.size() == len(f"file {i}")
    assert st.evictions > 0 and st.reopens > 0 and st.open_files <= 3
    for f in files:
        f.close()
    assert st.open_files == 0


def test_an_evicted_file_unlinked_keeps_its_bytes(root_and_inner):
    root, inner = root_and_inner
    st = DescriptorCache(inner, 1)
    a = st.open(f"{root}/a")
    a.pwrite(b"old a", 0)
    st.open(f"{root}/b").close()  # evicts a
    st.unlink(f"{root}/a")
    st.open(f"{root}/a").pwrite(b"new", 0)  # a new file under the name
    for i in range(3):
        st.open(f"{root}/c{i}")  # the budget is exceeded only by the held handle
    assert a.pread(100, 0) == b"old a"


def test_rename_moves_evicted_handles_and_keeps_the_replaced_file(root_and_inner):
    root, inner = root_and_inner
    st = DescriptorCache(inner, 1)
    src, dst = st.open(f"{root}/src"), st.open(f"{root}/dst")
    src.pwrite(b"source", 0)
    dst.pwrite(b"replaced", 0)
    st.open(f"{root}/x")  # both evicted
    st.replace(f"{root}/src", f"{root}/dst")
    st.open(f"{root}/y")
    assert dst.pread(100, 0) == b"replaced"  # the handle on the replaced file
    assert src.pread(100, 0) == b"source"  # reopened under its new name
    src.pwrite(b"S", 0)
    assert st.open(f"{root}/dst").pread(100, 0) == b"Source"


def test_a_renamed_directory_carries_its_evicted_handles(root_and_inner):
    root, inner = root_and_inner
    st = DescriptorCache(inner, 1)
    st.mkdir(f"{root}/p-0")
    f = st.open(f"{root}/p-0/seg")
    f.pwrite(b"data", 0)
    st.open(f"{root}/other")
    st.replace(f"{root}/p-0", f"{root}/p-0.moved")
    assert f.pread(10, 0) == b"data"


def test_a_dup_is_independent_and_inside_the_budget(root_and_inner):
    root, inner = root_and_inner
    st = DescriptorCache(inner, 2)
    f = st.open(f"{root}/a")
    f.pwrite(b"abc", 0)
    dups = [f.dup() for _ in range(20)]
    for d in dups:
        assert d.pread(3, 0) == b"abc"
        assert st.open_files <= 2
    f.close()
    assert dups[0].pread(3, 0) == b"abc"
    st.unlink(f"{root}/a")
    assert dups[1].pread(3, 0) == b"abc"
    for d in dups:
        d.close()
    assert st.open_files == 0


def test_fsync_through_a_reopened_handle_covers_earlier_writes():
    mem = MemoryStorage()
    make_dirs_durable(mem, "/data")
    st = DescriptorCache(mem, 1)
    a = st.open("/data/a")
    mem.fsync_dir("/data")
    a.pwrite(b"written before the eviction", 0)
    st.open("/data/b")  # evicts a: the bytes are in the (modelled) page cache only
    a.fsync()  # reopens a
    unsynced = st.open("/data/c")
    mem.fsync_dir("/data")
    unsynced.pwrite(b"never fsynced", 0)
    st.open("/data/d")
    mem.crash()
    assert mem.open("/data/a").pread(100, 0) == b"written before the eviction"
    assert mem.open("/data/c").pread(100, 0) == b""


def test_concurrent_readers_see_their_files(tmp_path):
    st = DescriptorCache(POSIX, 4)
    files = []
    for i in range(40):
        f = st.open(str(tmp_path / f"f{i}"))
        f.pwrite(bytes([i]) * 4096, 0)
        files.append(f)
    errors: list[str] = []

    def reader(seed: int) -> None:
        for n in range(400):
            i = (seed * 7 + n * 13) % len(files)
            if files[i].pread(4096, 0) != bytes([i]) * 4096:
                errors.append(f"file {i}")

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert st.open_files <= 4


def test_out_of_descriptors_on_a_reopen_evicts_and_retries(tmp_path):
    faulty = FaultyStorage(POSIX)
    st = DescriptorCache(faulty, 100)
    files = [st.open(str(tmp_path / f"f{i}")) for i in range(10)]
    files[0].pwrite(b"x", 0)  # f0 the most recently used: f1 the least
    st.max_open = 5
    st.open(str(tmp_path / "g"))  # shrinks to 5: f1..f6 are evicted
    assert files[1]._file is None and files[0]._file is not None
    faulty.set_rules(Fault("open", "EMFILE", count=1))
    assert files[1].pread(1, 0) == b""  # EMFILE once: half the handles closed, reopened
    assert faulty.injected == 1
    assert st.open_files < 5
    st.max_open = 1
    st.open(str(tmp_path / "h"))  # every other handle evicted
    faulty.set_rules(Fault("open", "EMFILE"))
    with pytest.raises(OSError, match="Too many open files"):
        files[2].pread(1, 0)  # evicting did not help: the error is the caller's


def test_a_region_keeps_its_descriptor_when_the_file_is_evicted(tmp_path):
    st = DescriptorCache(POSIX, 1)
    f = st.open(str(tmp_path / "seg"))
    f.pwrite(b"0123456789", 0)
    region = f.region(4, 3)
    st.open(str(tmp_path / "other"))  # f evicted
    try:
        assert region.read() == b"3456"
    finally:
        region.close()


def test_a_memory_engine_file_has_no_region():
    mem = MemoryStorage()
    make_dirs_durable(mem, "/data")
    assert getattr(DescriptorCache(mem, 2).open("/data/a"), "region", None) is None


def test_a_partition_log_with_more_segments_than_descriptors_survives_a_power_cut():
    mem = MemoryStorage()
    make_dirs_durable(mem, "/data")
    st = DescriptorCache(mem, 4)
    cfg = LogConfig(segment_bytes=300, flush_interval_messages=1)
    plog = PartitionLog.open("/data/t-0", cfg, 0, clean_shutdown=False, storage=st)
    values = [f"value {i}".encode() * 5 for i in range(60)]
    for i, v in enumerate(values):
        batch = build_batch([(None, v, [], 1_700_000_000_000 + i)])
        plog.append(batch, validate_batches(batch, client_origin=False), 1_700_000_000_000 + i)
        plog.flush()
    assert len(plog.segments) > 10 and st.open_files <= 4 + 2
    plog.abandon()
    mem.crash()
    st2 = DescriptorCache(mem, 4)
    plog2 = PartitionLog.open("/data/t-0", cfg, 0, clean_shutdown=False, storage=st2)
    got = []
    offset = 0
    while offset < plog2.log_end_offset:
        data = plog2.read(offset, 1 << 20).data
        for h in iter_headers(data):
            got += [r.value for r in decode_records(data[h.position:h.position + h.length + 12])]
            offset = h.base_offset + h.last_offset_delta + 1
    assert got == values
    assert st2.open_files <= 4 + 2
    plog2.close()


def test_the_default_budget_leaves_room_for_connections():
    assert default_max_open_files(20_000) == 10_000
    assert default_max_open_files(1024) == 512
    assert default_max_open_files(300) == 44
    assert default_max_open_files(64) == 16


def test_raising_the_soft_limit_reaches_the_hard_limit():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        before, now = raise_nofile_limit()
        assert before == min(soft, 256)
        assert now == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert now == hard or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_closed_handles_raise_ebadf(tmp_path):
    st = DescriptorCache(POSIX, 2)
    f = st.open(str(tmp_path / "a"))
    f.close()
    with pytest.raises(OSError, match=os.strerror(9)):
        f.pread(1, 0)
