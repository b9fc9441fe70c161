"""A descriptor budget: a :class:`~.storage.Storage` engine that keeps at most
``max_open`` files of another engine open, closing the least recently used and reopening
on demand (Redpanda's and Kafka's lazily opened segments, one cache for every file the
log opens: segments, indexes, transaction indexes, snapshots, the metadata log).

:class:`DescriptorCache` wraps any engine (POSIX, in-memory, fault-injecting) and keeps
its contract (``tests/unit/test_storage_contract.py`` runs the suite on it too, with a
budget small enough to force evictions):

* :meth:`DescriptorCache.open` returns a :class:`CachedFile`. Its real handle is opened
  at once (so ``open`` fails as the engine's would: ENOENT, EMFILE...) and may be closed
  later when the budget is exceeded; every operation pins the handle while it runs (a
  pinned handle is never closed; a ``sendfile`` region holds a descriptor of its own),
  reopening the file by name if it was closed (without create or truncate).
* POSIX semantics are kept across closes: before a file is unlinked, or replaced by a
  rename, every handle on it is opened and *held* (never closed by the cache: its name no
  longer leads to it); a rename moves the handles of the renamed file (or of every file
  under a renamed directory) to the new name. Renames and unlinks must therefore go
  through this engine (the log's always do; see :mod:`.storage`).
* ``dup()`` is another :class:`CachedFile` on the same file: independent of its
  original (closing one leaves the other usable) and inside the same budget (the flusher
  takes a dup of every dirty file; with many partitions that must not cost a descriptor
  each).
* Durability is per file, not per descriptor (Linux's ``fsync`` flushes the inode's
  dirty pages whichever descriptor wrote them; the in-memory engine models the same), so
  closing a handle loses nothing and an fsync through a reopened handle covers the
  earlier writes. (A write-back error of a file that had no open descriptor when it
  happened is reported by Linux to the next opener only if nobody has seen it yet; the
  log takes a partition offline on the first fsync error either way.)
* Running out of descriptors while reopening (EMFILE/ENFILE: connections took them)
  closes half of the unpinned handles and tries once more before raising.

The budget is soft: when every open handle is pinned or held, a further open goes over it
rather than fail; it shrinks back as handles are released. Thread-safe: one lock guards
the bookkeeping (never held during reads, writes or fsyncs).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from .storage import Buffer, FileRegion, Storage, StorageFile, StorageWrapper

__all__ = ["CachedFile", "CachedRegionFile", "DescriptorCache", "default_max_open_files", "raise_nofile_limit",
           "with_descriptor_budget"]

_log = logging.getLogger("hightide.log")
_RETRY_ERRNOS = (errno.EMFILE, errno.ENFILE)
#: Descriptors :func:`default_max_open_files` leaves to everything but the log's files:
#: connections, listeners, the event loop, threads' pipes, imports.
CONNECTION_HEADROOM_FRACTION = 2  # half the limit
MIN_HEADROOM = 256
MIN_BUDGET = 16


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (as Kafka's start scripts ask of
    ``ulimit -n``); returns (soft before, soft now). Never raises."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return -1, -1
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return soft, soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    for candidate in (target, 1 << 20):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (candidate, hard))
            return soft, candidate
        except (OSError, ValueError):
            continue
    return soft, soft


def default_max_open_files(nofile_limit: int | None = None) -> int:
    """The default budget for a soft ``RLIMIT_NOFILE`` of ``nofile_limit`` (the current
    one if None): half of it, and at least :data:`MIN_HEADROOM` descriptors left for the
    rest of the process (connections), never below :data:`MIN_BUDGET`."""
    if nofile_limit is None:
        try:
            nofile_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (OSError, ValueError):
            nofile_limit = 1024
        if nofile_limit == resource.RLIM_INFINITY:
            nofile_limit = 1 << 20
    return max(MIN_BUDGET, min(nofile_limit // CONNECTION_HEADROOM_FRACTION, nofile_limit - MIN_HEADROOM))


class CachedFile:
    """A handle of :class:`DescriptorCache` (see the module doc). ``path`` is the name it
    was opened under; ``region`` exists when the wrapped engine's files have it."""

    __slots__ = ("path", "_cache", "_name", "_file", "_pins", "_held", "_closed", "__weakref__")

    def __init__(self, cache: DescriptorCache, path: str, name: str, file: StorageFile | None) -> None:
        self.path = path
        self._cache = cache
        self._name = name  # where the file is now (renames tracked)
        self._file = file  # the open real handle, None while closed by the cache
        self._pins = 0
        self._held = False  # unlinked or replaced: never closed by the cache
        self._closed = False

    def pwritev(self, buffers: Sequence[Buffer], offset: int) -> None:
        f = self._cache._pin(self)
        try:
            f.pwritev(buffers, offset)
        finally:
            self._cache._unpin(self)

    def pwrite(self, data: Buffer, offset: int) -> None:
        f = self._cache._pin(self)
        try:
            f.pwrite(data, offset)
        finally:
            self._cache._unpin(self)

    def pread(self, size: int, offset: int) -> bytes:
        f = self._cache._pin(self)
        try:
            return f.pread(size, offset)
        finally:
            self._cache._unpin(self)

    def fsync(self) -> None:
        f = self._cache._pin(self)
        try:
            f.fsync()
        finally:
            self._cache._unpin(self)

    def truncate(self, size: int) -> None:
        f = self._cache._pin(self)
        try:
            f.truncate(size)
        finally:
            self._cache._unpin(self)

    def size(self) -> int:
        f = self._cache._pin(self)
        try:
            return f.size()
        finally:
            self._cache._unpin(self)

    def mtime_ns(self) -> int:
        f = self._cache._pin(self)
        try:
            return f.mtime_ns()
        finally:
            self._cache._unpin(self)

    def dup(self) -> CachedFile:
        return self._cache._dup(self)

    def close(self) -> None:
        self._cache._close(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._file is not None else "evicted"
        return f"CachedFile({self.path!r}, {state})"


class CachedRegionFile(CachedFile):
    """A :class:`CachedFile` of an engine whose files make ``sendfile`` regions (POSIX)."""

    __slots__ = ()

    def region(self, size: int, offset: int) -> FileRegion:
        """The wrapped handle's region (its own descriptor: a ``dup`` taken now)."""
        f = self._cache._pin(self)
        try:
            return f.region(size, offset)  # type: ignore[attr-defined]
        finally:
            self._cache._unpin(self)


class DescriptorCache(StorageWrapper):
    """``inner`` with at most ``max_open`` of its files open (see the module doc). Any
    other attribute of the inner engine (``crash()``, ``check()``) is passed through."""

    def __init__(self, inner: Storage, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be positive, not {max_open}")
        self.inner = inner
        self.max_open = max_open
        self.budget_line = f"up to {max_open} partition files kept open"  # see with_descriptor_budget
        self._lock = threading.Lock()
        self._lru: OrderedDict[CachedFile, None] = OrderedDict()  # open real handles, least recent first
        self._held: set[CachedFile] = set()  # open real handles the cache never closes (see _hold)
        self._file_class: type[CachedFile] | None = None  # CachedRegionFile when the engine's files have region()
        self._by_name: dict[str, CachedFile | list[CachedFile]] = {}  # every live handle by its current name
        self.evictions = 0  # real handles closed to stay in the budget (tests, metrics)
        self.reopens = 0

    @property
    def open_files(self) -> int:
        """Real handles open now."""
        return len(self._lru) + len(self._held)

    # -------------------------------------------------------------- Storage

    def open(self, path: str, *, create: bool = True, truncate: bool = False) -> CachedFile:
        with self._lock:
            real = self._open_real(path, create, truncate)
            cls = self._file_class
            if cls is None:
                cls = self._file_class = CachedRegionFile if hasattr(real, "region") else CachedFile
            f = cls(self, path, path, real)
            self._index(f)
            self._lru[f] = None
            self._shrink()
            return f

    def replace(self, src: str, dst: str) -> None:
        with self._lock:
            for f in self._named(dst):
                self._hold(f)  # the replaced file lives on in its handles
            moved = self._named(src)
            prefix = src.rstrip("/") + "/"
            if self.inner.is_dir(src):
                moved += [f for name in list(self._by_name) if name.startswith(prefix) for f in self._named(name)]
            self.inner.replace(src, dst)
            for f in moved:
                self._unindex(f)
                f._name = dst if f._name == src else dst.rstrip("/") + "/" + f._name[len(prefix):]
                self._index(f)

    def unlink(self, path: str) -> None:
        with self._lock:
            for f in self._named(path):
                self._hold(f)
            self.inner.unlink(path)

    def __repr__(self) -> str:
        return f"DescriptorCache({self.inner!r}, max_open={self.max_open}, open={self.open_files})"

    # -------------------------------------------------------------- handles

    def _pin(self, f: CachedFile) -> StorageFile:
        with self._lock:
            real = f._file
            if real is None:
                if f._closed:
                    raise OSError(errno.EBADF, os.strerror(errno.EBADF), f.path)
                real = f._file = self._open_real(f._name, False, False)
                self.reopens += 1
                self._lru[f] = None
                f._pins += 1
                self._shrink()
                return real
            if not f._held:
                self._lru.move_to_end(f)
            f._pins += 1
            return real

    def _unpin(self, f: CachedFile) -> None:
        with self._lock:
            f._pins -= 1
            if f._closed and not f._pins:
                self._release(f)
            elif len(self._lru) + len(self._held) > self.max_open:
                self._shrink()

    def _dup(self, f: CachedFile) -> CachedFile:
        with self._lock:
            if f._closed:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF), f.path)
            if f._held:  # its name no longer leads to it: a real dup, held too
                assert f._file is not None
                d = type(f)(self, f.path, f._name, f._file.dup())
                d._held = True
                self._held.add(d)
                return d
            d = type(f)(self, f.path, f._name, None)  # opened by name when first used
            self._index(d)
            return d

    def _close(self, f: CachedFile) -> None:
        with self._lock:
            if f._closed:
                return
            f._closed = True
            if not f._held:
                self._unindex(f)
            if not f._pins:
                self._release(f)

    def _release(self, f: CachedFile) -> None:
        real, f._file = f._file, None
        self._lru.pop(f, None)
        self._held.discard(f)
        if real is not None:
            real.close()

    def _hold(self, f: CachedFile) -> None:
        """``f``'s name is about to lead elsewhere: open it now and never close it."""
        if f._file is None:
            f._file = self._open_real(f._name, False, False)
        else:
            self._lru.pop(f, None)
        f._held = True
        self._held.add(f)
        self._unindex(f)

    def _open_real(self, name: str, create: bool, truncate: bool) -> StorageFile:
        try:
            return self.inner.open(name, create=create, truncate=truncate)
        except OSError as exc:
            if exc.errno not in _RETRY_ERRNOS or not self._evict(max(1, len(self._lru) // 2)):
                raise
        return self.inner.open(name, create=create, truncate=truncate)

    def _shrink(self) -> None:
        over = len(self._lru) + len(self._held) - self.max_open
        if over > 0:
            self._evict(over)

    def _evict(self, n: int) -> int:
        """Close up to ``n`` unpinned handles, least recently used first (the scan stops
        as soon as it has them: pinned handles are few)."""
        victims = []
        for f in self._lru:
            if not f._pins:
                victims.append(f)
                if len(victims) >= n:
                    break
        for f in victims:
            real, f._file = f._file, None
            del self._lru[f]
            if real is not None:
                try:
                    real.close()
                except OSError:
                    pass
        self.evictions += len(victims)
        return len(victims)

    # -------------------------------------------------------------- name index

    def _index(self, f: CachedFile) -> None:
        cur = self._by_name.get(f._name)
        if cur is None:
            self._by_name[f._name] = f
        elif isinstance(cur, list):
            cur.append(f)
        else:
            self._by_name[f._name] = [cur, f]

    def _unindex(self, f: CachedFile) -> None:
        cur = self._by_name.get(f._name)
        if cur is f:
            del self._by_name[f._name]
        elif isinstance(cur, list):
            try:
                cur.remove(f)
            except ValueError:
                return
            if len(cur) == 1:
                self._by_name[f._name] = cur[0]
            elif not cur:
                del self._by_name[f._name]

    def _named(self, name: str) -> list[CachedFile]:
        cur = self._by_name.get(name)
        if cur is None:
            return []
        return list(cur) if isinstance(cur, list) else [cur]


def with_descriptor_budget(storage: Storage, max_open_files: int) -> DescriptorCache:
    """``storage`` behind a :class:`DescriptorCache` (itself if it already is one):
    ``max_open_files`` (``log.max.open.files``), or -1 for :func:`default_max_open_files`
    after raising the soft ``RLIMIT_NOFILE`` to the hard limit. The cache's
    ``budget_line`` says the limits and the budget (the broker logs it once its data dir
    is locked: a refused start prints only its one error line)."""
    if isinstance(storage, DescriptorCache):
        return storage
    before, now = raise_nofile_limit()
    budget = max_open_files if max_open_files > 0 else default_max_open_files(now if now > 0 else None)
    cache = DescriptorCache(storage, budget)
    cache.budget_line = (f"open files: limit {now}{f' (raised from {before})' if now != before else ''}; up to "
                         f"{budget} partition files kept open (log.max.open.files{'' if max_open_files > 0 else ' default'})")
    return cache
