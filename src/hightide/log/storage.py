"""The storage seam: the only way the partition log reaches files (tansu's shape).

Everything under :mod:`hightide.log` opens, writes, reads, renames and deletes files
through a :class:`Storage` engine and the :class:`StorageFile` handles it returns; no
module of the log calls ``os`` file functions itself. Three engines implement it:

* :class:`PosixStorage` (this module): plain ``os`` calls, the production engine. A
  handle is an fd; ``pwritev`` hands memoryviews to the kernel without copying them and
  ``pread`` returns the bytes the fetch response carries; :meth:`PosixFile.region`
  gives a :class:`FileRegion` instead, for the network shell to ``sendfile``.
* :class:`~.storage_memory.MemoryStorage`: files in memory, modelling the page cache
  against what an fsync made durable, so ``crash()`` can drop everything not fsynced
  (file bytes and directory entries) — a power cut.
* :class:`~.storage_faulty.FaultyStorage`: wraps another engine and fails chosen
  operations (full disk, I/O errors, torn writes, out of descriptors).

``tests/unit/test_storage_contract.py`` runs one contract suite against all three.

Contract shared by every engine:

* Paths are strings; directories are flat enough for the log (a partition directory
  holds files only, the data directory holds partition directories and a few files).
* Errors are ``OSError`` with the errno the kernel would give (``ENOENT`` for a missing
  file or directory, ``ENOSPC``, ``EIO``, ``EMFILE``...).
* A handle stays usable after its file is unlinked or renamed (POSIX semantics), until
  ``close()``; ``dup()`` gives an independent handle on the same file, so another
  thread can fsync it while the owner closes its own.
* Handles and the engine may be used from several threads at once, as long as no two
  threads write the same byte range of the same file concurrently.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, Union

__all__ = [
    "Buffer",
    "FileRegion",
    "RegionTruncated",
    "Storage",
    "StorageFile",
    "StorageWrapper",
    "PosixStorage",
    "PosixFile",
    "POSIX",
    "make_dirs_durable",
    "read_small_file",
    "remove_tree",
    "write_small_file",
]

Buffer = Union[bytes, bytearray, memoryview]
_IOV_MAX = 1024


class StorageFile(Protocol):
    """An open file (read-write). ``path`` is the name it was opened under."""

    path: str

    def pwritev(self, buffers: Sequence[Buffer], offset: int) -> None:
        """Write the buffers back to back at ``offset``. All or raise OSError; on an
        error a prefix of the bytes may have reached the file (a torn write)."""

    def pwrite(self, data: Buffer, offset: int) -> None:
        """Write ``data`` at ``offset`` (all or raise, like :meth:`pwritev`)."""

    def pread(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer at the end of the file)."""

    def fsync(self) -> None:
        """Make the file's bytes durable (its directory entry needs ``fsync_dir``)."""

    def truncate(self, size: int) -> None:
        """Cut (or extend with zeros) the file to ``size`` bytes."""

    def size(self) -> int:
        """Current length in bytes."""

    def mtime_ns(self) -> int:
        """Last modification time (ns since the epoch)."""

    def dup(self) -> StorageFile:
        """An independent handle on the same file (closed separately)."""

    def close(self) -> None:
        """Release the handle (idempotent). Never fsyncs."""


class Storage(Protocol):
    """A file system as the log needs it."""

    def open(self, path: str, *, create: bool = True, truncate: bool = False) -> StorageFile:
        """Open ``path`` read-write; create it if missing and ``create`` (else ENOENT);
        empty it if ``truncate``. The parent directory must exist (ENOENT)."""

    def replace(self, src: str, dst: str) -> None:
        """Atomically rename ``src`` to ``dst``, replacing ``dst`` if it exists."""

    def unlink(self, path: str) -> None:
        """Remove a file (ENOENT if missing)."""

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path`` (ENOENT if missing), in no particular order."""

    def mkdir(self, path: str) -> None:
        """Create directory ``path`` (EEXIST if it exists, ENOENT without the parent)."""

    def rmdir(self, path: str) -> None:
        """Remove the empty directory ``path``."""

    def exists(self, path: str) -> bool:
        """Whether a file or directory is at ``path``."""

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory."""

    def fsync_dir(self, path: str) -> None:
        """Make the entries of directory ``path`` (creations, renames, unlinks) durable."""

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None:
        """Set a file's modification time (the cleaner keeps a segment's)."""


class StorageWrapper:
    """A :class:`Storage` engine around another (``inner``): every operation is passed to
    it, and so is any other attribute (``crash()`` of a wrapped in-memory engine). The
    wrappers (the descriptor budget, the fault injector) override what they change."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def open(self, path: str, *, create: bool = True, truncate: bool = False) -> StorageFile:
        return self.inner.open(path, create=create, truncate=truncate)

    def replace(self, src: str, dst: str) -> None:
        self.inner.replace(src, dst)

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def mkdir(self, path: str) -> None:
        self.inner.mkdir(path)

    def rmdir(self, path: str) -> None:
        self.inner.rmdir(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None:
        self.inner.set_mtime_ns(path, mtime_ns)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# ---------------------------------------------------------------------------- POSIX


class RegionTruncated(OSError):
    """A :class:`FileRegion`'s file ended before the region did (it was truncated after
    the region was taken): the bytes promised cannot be sent."""


class FileRegion:
    """``size`` bytes at ``offset`` of a file, held by a descriptor of its own (a
    ``dup`` taken when the region was made), so the region keeps the file it was read
    from even if the segment is deleted, replaced by the cleaner or closed meanwhile,
    and never reads a file that reused the descriptor number. The network shell sends
    it with ``os.sendfile`` (``fd``/``offset``/``size``) or :meth:`read`'s bytes.
    ``len()`` is ``size``. The owner must :meth:`close` it (idempotent) when sent or
    dropped; only :class:`PosixFile` makes regions."""

    __slots__ = ("fd", "offset", "size")

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self.fd = fd
        self.offset = offset
        self.size = size

    def __len__(self) -> int:
        return self.size

    def read(self, start: int = 0) -> bytes:
        """The region's bytes from ``start`` (relative to the region) to its end.
        Raises :class:`RegionTruncated` if the file is now shorter, OSError on IO errors
        or a closed region."""
        want = self.size - start
        data = os.pread(self.fd, want, self.offset + start)
        while len(data) < want:  # pread may return short only at the end of the file
            more = os.pread(self.fd, want - len(data), self.offset + start + len(data))
            if not more:
                raise RegionTruncated(errno.EIO, f"file ended {want - len(data)} bytes before the region "
                                      f"({self.offset}+{self.size})")
            data += more
        return data

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, size={self.size})"


class PosixFile:
    """A file descriptor. Methods are thin wrappers over ``os`` calls."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    def pwritev(self, buffers: Sequence[Buffer], offset: int) -> None:
        fd = self.fd
        for i in range(0, len(buffers), _IOV_MAX):
            group = buffers[i : i + _IOV_MAX]
            n = os.pwritev(fd, group, offset)
            expected = sum(len(b) for b in group)
            if n != expected:  # short write (disk full, signal): finish it the slow way
                self._finish(b"".join(bytes(b) for b in group)[n:], offset + n)
            offset += expected

    def pwrite(self, data: Buffer, offset: int) -> None:
        n = os.pwrite(self.fd, data, offset)
        if n != len(data):
            self._finish(bytes(data[n:]), offset + n)

    def _finish(self, rest: bytes, offset: int) -> None:
        while rest:
            m = os.pwrite(self.fd, rest, offset)
            if m == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
            offset += m
            rest = rest[m:]

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def region(self, size: int, offset: int) -> FileRegion:
        """``size`` bytes at ``offset`` as a :class:`FileRegion` on a ``dup`` of this
        descriptor (no bytes are read; the caller closes it). Raises OSError (EMFILE)."""
        return FileRegion(os.dup(self.fd), offset, size)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def mtime_ns(self) -> int:
        return os.fstat(self.fd).st_mtime_ns

    def dup(self) -> PosixFile:
        return PosixFile(self.path, os.dup(self.fd))

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __repr__(self) -> str:
        return f"PosixFile({self.path!r}, fd={self.fd})"


class PosixStorage:
    """The real file system through ``os`` calls."""

    def open(self, path: str, *, create: bool = True, truncate: bool = False) -> PosixFile:
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | (os.O_TRUNC if truncate else 0)
        return PosixFile(path, os.open(path, flags, 0o644))

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path, 0o755)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None:
        os.utime(path, ns=(mtime_ns, mtime_ns))

    def __repr__(self) -> str:
        return "PosixStorage()"


POSIX = PosixStorage()
"""The default engine."""


# ---------------------------------------------------------------------------- helpers over any engine

_tmp_counter = itertools.count()
_tmp_lock = threading.Lock()


def _tmp_name(path: str) -> str:
    with _tmp_lock:
        n = next(_tmp_counter)
    return f"{path}.{os.getpid()}-{n}.tmp"  # unique: concurrent writers never share one


def write_small_file(storage: Storage, path: str, data: str | bytes, *, sync: bool = True) -> None:
    """Atomically replace ``path`` with ``data``: write a uniquely named ``.tmp`` file
    (fsynced if ``sync``), rename it over ``path``. The rename itself becomes durable
    with the next ``fsync_dir`` of the parent. Raises OSError (the temp file removed)."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = _tmp_name(path)
    try:
        f = storage.open(tmp, truncate=True)
        try:
            f.pwrite(raw, 0)
            if sync:
                f.fsync()
        finally:
            f.close()
        storage.replace(tmp, path)
    except OSError:
        try:
            storage.unlink(tmp)
        except OSError:
            pass
        raise


def read_small_file(storage: Storage, path: str) -> bytes:
    """The whole content of a small file. Raises OSError (ENOENT when missing)."""
    f = storage.open(path, create=False)
    try:
        return f.pread(f.size(), 0)
    finally:
        f.close()


def remove_tree(storage: Storage, path: str) -> None:
    """Delete directory ``path`` and everything in it, ignoring errors (a partition
    directory holds files only; subdirectories are removed recursively)."""
    try:
        names = storage.listdir(path)
    except OSError:
        return
    for name in names:
        child = os.path.join(path, name)
        try:
            if storage.is_dir(child):
                remove_tree(storage, child)
            else:
                storage.unlink(child)
        except OSError:
            pass
    try:
        storage.rmdir(path)
    except OSError:
        pass


def make_dirs_durable(storage: Storage, path: str) -> bool:
    """Create ``path`` and any missing parents, fsyncing the parent of each directory
    created so the new entries survive a power cut (Kafka flushes a new log dir's
    parent the same way). Returns whether anything was created."""
    path = os.path.abspath(path)
    if storage.is_dir(path):
        return False
    parent = os.path.dirname(path)
    if parent != path:
        make_dirs_durable(storage, parent)
    try:
        storage.mkdir(path)
    except FileExistsError:
        return False
    storage.fsync_dir(parent)
    return True
