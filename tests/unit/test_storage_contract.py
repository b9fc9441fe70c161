"""The storage contract (``hightide.log.storage``), run against every engine: POSIX on
a temporary directory, in-memory, and the fault-injecting engine (with no rule firing)
over each of them, and the descriptor cache (``hightide.log.storage_cache``) over POSIX
and in-memory with a budget of two open files, so every test runs through evictions and
reopens. Engine-specific behaviour (faults, power cuts) is tested below the
contract."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.log.storage import POSIX, make_dirs_durable, read_small_file, remove_tree, write_small_file
from hightide.log.storage_cache import DescriptorCache
from hightide.log.storage_faulty import Fault, FaultyStorage
from hightide.log.storage_memory import MemoryStorage
from hightide.protocol.records import build_batch, validate_batches

ENGINES = ["posix", "memory", "faulty-posix", "faulty-memory", "cached-posix", "cached-memory"]


@pytest.fixture(params=ENGINES)
def engine(request, tmp_path):
    """(storage, root directory that exists)."""
    kind = request.param
    if kind.endswith("posix"):
        storage, root = POSIX, str(tmp_path)
    else:
        storage, root = MemoryStorage(), "/data"
        make_dirs_durable(storage, root)
    if kind.startswith("faulty"):
        storage = FaultyStorage(storage, Fault("write", "EIO", path="never-matches"))
    if kind.startswith("cached"):
        storage = DescriptorCache(storage, 2)
    return storage, root


def _oserror(code: int):
    return pytest.raises(OSError, match=os.strerror(code))


# ---------------------------------------------------------------------------- files


def test_write_read_round_trip(engine):
    st, root = engine
    f = st.open(f"{root}/a")
    assert f.size() == 0 and f.pread(10, 0) == b""
    f.pwritev([b"hello ", memoryview(b"big world")[4:], bytearray(b"!")], 0)
    assert f.size() == 12 and f.pread(100, 0) == b"hello world!"
    assert f.pread(5, 6) == b"world" and f.pread(5, 20) == b""
    f.pwrite(b"W", 6)
    assert f.pread(12, 0) == b"hello World!"
    f.pwrite(b"x", 15)  # past the end: a hole of zeros
    assert f.pread(100, 0) == b"hello World!\0\0\0x"
    f.close()
    f.close()  # idempotent


def test_many_buffers_in_one_pwritev(engine):
    st, root = engine
    f = st.open(f"{root}/a")
    f.pwritev([bytes([i % 256]) for i in range(3000)], 0)  # more than IOV_MAX
    assert f.pread(3000, 0) == bytes(i % 256 for i in range(3000))
    f.close()


def test_truncate_fsync_and_reopen(engine):
    st, root = engine
    f = st.open(f"{root}/a")
    f.pwrite(b"0123456789", 0)
    f.fsync()
    f.truncate(4)
    assert f.size() == 4 and f.pread(10, 0) == b"0123"
    f.truncate(6)
    assert f.pread(10, 0) == b"0123\0\0"
    f.close()
    g = st.open(f"{root}/a", create=False)
    assert g.pread(10, 0) == b"0123\0\0"
    g.close()
    h = st.open(f"{root}/a", truncate=True)
    assert h.size() == 0
    h.close()


def test_open_errors(engine):
    st, root = engine
    with _oserror(errno.ENOENT):
        st.open(f"{root}/missing", create=False)
    with _oserror(errno.ENOENT):
        st.open(f"{root}/no-dir/a")


def test_dup_is_independent_and_survives_unlink(engine):
    st, root = engine
    f = st.open(f"{root}/a")
    f.pwrite(b"data", 0)
    d = f.dup()
    f.close()
    assert d.pread(4, 0) == b"data"
    st.unlink(f"{root}/a")
    assert not st.exists(f"{root}/a")
    d.pwrite(b"more", 4)
    d.fsync()  # fsync of an unlinked file is fine
    assert d.pread(8, 0) == b"datamore"
    d.close()


def test_mtime(engine):
    st, root = engine
    f = st.open(f"{root}/a")
    f.pwrite(b"x", 0)
    st.set_mtime_ns(f"{root}/a", 1_600_000_000_000_000_000)
    assert f.mtime_ns() == 1_600_000_000_000_000_000
    f.close()


# ---------------------------------------------------------------------------- names


def test_replace_unlink_listdir(engine):
    st, root = engine
    for name, data in (("a", b"A"), ("b", b"B")):
        f = st.open(f"{root}/{name}")
        f.pwrite(data, 0)
        f.close()
    assert sorted(st.listdir(root)) == ["a", "b"]
    held = st.open(f"{root}/b", create=False)
    st.replace(f"{root}/a", f"{root}/b")  # replaces b
    assert sorted(st.listdir(root)) == ["b"]
    assert read_small_file(st, f"{root}/b") == b"A"
    assert held.pread(1, 0) == b"B"  # the old file lives on while open
    held.close()
    st.unlink(f"{root}/b")
    assert st.listdir(root) == []
    with _oserror(errno.ENOENT):
        st.unlink(f"{root}/b")
    with _oserror(errno.ENOENT):
        st.replace(f"{root}/b", f"{root}/c")
    with _oserror(errno.ENOENT):
        st.listdir(f"{root}/nope")


def test_directories(engine):
    st, root = engine
    st.mkdir(f"{root}/d")
    assert st.is_dir(f"{root}/d") and st.exists(f"{root}/d") and not st.is_dir(f"{root}/x")
    with _oserror(errno.EEXIST):
        st.mkdir(f"{root}/d")
    with _oserror(errno.ENOENT):
        st.mkdir(f"{root}/x/y")
    st.open(f"{root}/d/f").close()
    assert not st.is_dir(f"{root}/d/f") and st.exists(f"{root}/d/f")
    with _oserror(errno.ENOTEMPTY):
        st.rmdir(f"{root}/d")
    st.fsync_dir(f"{root}/d")
    remove_tree(st, f"{root}/d")
    assert not st.exists(f"{root}/d")
    assert make_dirs_durable(st, f"{root}/p/q/r") and st.is_dir(f"{root}/p/q/r")
    assert not make_dirs_durable(st, f"{root}/p/q/r")


def test_small_files(engine):
    st, root = engine
    write_small_file(st, f"{root}/n", "42\n")
    write_small_file(st, f"{root}/n", "43\n", sync=False)
    assert read_small_file(st, f"{root}/n") == b"43\n"
    assert st.listdir(root) == ["n"]  # no temp file left


def test_concurrent_writers_on_distinct_files(engine):
    st, root = engine

    def work(i: int) -> None:
        f = st.open(f"{root}/t{i}")
        for k in range(200):
            f.pwrite(b"%04d" % k, 4 * k)
        f.fsync()
        f.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert read_small_file(st, f"{root}/t{i}") == b"".join(b"%04d" % k for k in range(200))


def test_a_partition_log_runs_on_every_engine(engine):
    """The real log code over the engine: append, roll, read, flush, reopen."""
    st, root = engine
    cfg = LogConfig(segment_bytes=300, index_interval_bytes=64)
    plog = PartitionLog.open(f"{root}/t-0", cfg, 0, clean_shutdown=False, storage=st)
    for i in range(20):
        b = build_batch([(b"k%d" % i, b"v" * 40, [], 1000 + i)])
        plog.append(b, validate_batches(b), 0)
    assert len(plog.segments) > 3
    plog.close()
    again = PartitionLog.open(f"{root}/t-0", cfg, 0, clean_shutdown=True, storage=st)
    assert again.log_end_offset == 20 and again.read(7, 1).first_offset == 7
    again.close()


# ---------------------------------------------------------------------------- in-memory: power cuts


def test_crash_keeps_only_what_was_fsynced():
    st = MemoryStorage()
    make_dirs_durable(st, "/d")
    f = st.open("/d/a")
    f.pwrite(b"durable", 0)
    f.fsync()
    f.pwrite(b"+lost", 7)
    st.fsync_dir("/d")
    st.open("/d/unsynced-name").close()  # created after the directory fsync
    lost = st.crash()
    assert lost == 5
    assert st.listdir("/d") == ["a"]
    assert read_small_file(st, "/d/a") == b"durable"
    with _oserror(errno.EBADF):
        f.pread(1, 0)  # handles die with the power


def test_crash_forgets_renames_and_unlinks_until_the_directory_is_fsynced():
    st = MemoryStorage()
    make_dirs_durable(st, "/d")
    write_small_file(st, "/d/n", "1")
    st.fsync_dir("/d")
    write_small_file(st, "/d/n", "2")  # renamed over, directory not fsynced
    st.crash()
    assert read_small_file(st, "/d/n") == b"1"
    st.unlink("/d/n")
    st.crash()
    assert st.exists("/d/n")
    st.unlink("/d/n")
    st.fsync_dir("/d")
    st.crash()
    assert not st.exists("/d/n")


def test_a_new_directory_needs_its_parent_fsynced():
    st = MemoryStorage()
    make_dirs_durable(st, "/data")
    st.mkdir("/data/t-0")
    st.crash()
    assert not st.exists("/data/t-0")
    st.mkdir("/data/t-0")
    st.fsync_dir("/data")
    st.crash()
    assert st.is_dir("/data/t-0")


# ---------------------------------------------------------------------------- faults


def test_faults_fire_by_op_path_and_count():
    st = FaultyStorage(MemoryStorage())
    make_dirs_durable(st, "/d")
    f = st.open("/d/seg.log")
    st.set_rules(Fault("write", "ENOSPC", path="seg", partial=True, count=1), Fault("fsync", "EIO", path="/d/"),
                 Fault("read", "EIO", path="other"), Fault("open", "EMFILE", path="x-"))
    with _oserror(errno.ENOSPC):
        f.pwritev([b"abcd", b"efgh"], 0)
    assert f.pread(100, 0) == b"abcd"  # the torn half
    f.pwrite(b"ok", 0)  # count used up
    with _oserror(errno.EIO):
        f.fsync()
    with _oserror(errno.EIO):
        st.fsync_dir("/d")
    with _oserror(errno.EMFILE):
        st.open("/d/x-0")
    assert f.pread(2, 0) == b"ok"  # the read rule is for another path
    assert st.injected == 4
    st.clear()
    f.fsync()
    st.crash()  # passed through to the in-memory engine
    with pytest.raises(ValueError):
        Fault("rename")
    with pytest.raises(ValueError):
        Fault("write", "ENOTANERRNO")
