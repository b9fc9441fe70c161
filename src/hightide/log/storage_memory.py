"""An in-memory storage engine that models what a power cut keeps.

Each file (an inode) has its current bytes — what the page cache holds and every read
sees — and its *durable* bytes, the content as of its last ``fsync``. Each directory
has its current entries and its durable entries, as of its last ``fsync_dir``: a file
created, renamed or unlinked is only durable once its directory is fsynced. A new
directory's own entry lives in its parent, so it needs the parent fsynced too.

:meth:`MemoryStorage.crash` is the power cut: every directory goes back to its durable
entries and every file to its durable bytes; open handles become invalid (EBADF).
Between two fsyncs of a directory its entry changes are all kept or all lost together
(a journaling file system keeps them in order; one that reordered them could keep a
later change without an earlier one, which this model does not produce).
Everything else behaves like POSIX: handles survive unlink and rename, ``dup`` shares
the file. One lock serialises all operations, so several threads may use it.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Sequence

from .storage import Buffer

__all__ = ["MemoryStorage", "MemoryFile"]


def _err(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


class _Inode:
    __slots__ = ("data", "durable", "mtime_ns")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = b""
        self.mtime_ns = time.time_ns()


class _Dir:
    __slots__ = ("entries", "durable")

    def __init__(self) -> None:
        self.entries: dict[str, _Inode | _Dir] = {}
        self.durable: dict[str, _Inode | _Dir] = {}


class MemoryFile:
    """A handle on an in-memory file."""

    __slots__ = ("path", "_inode", "_storage", "_generation", "_closed")

    def __init__(self, storage: MemoryStorage, path: str, inode: _Inode) -> None:
        self.path = path
        self._inode = inode
        self._storage = storage
        self._generation = storage._generation
        self._closed = False

    def _live(self) -> _Inode:
        if self._closed or self._generation != self._storage._generation:
            raise _err(errno.EBADF, self.path)
        return self._inode

    def pwritev(self, buffers: Sequence[Buffer], offset: int) -> None:
        with self._storage._lock:
            inode = self._live()
            for b in buffers:
                n = len(b)
                self._write_at(inode, b, offset)
                offset += n

    def pwrite(self, data: Buffer, offset: int) -> None:
        with self._storage._lock:
            self._write_at(self._live(), data, offset)

    @staticmethod
    def _write_at(inode: _Inode, data: Buffer, offset: int) -> None:
        buf = inode.data
        end = offset + len(data)
        if offset > len(buf):
            buf.extend(bytes(offset - len(buf)))
        buf[offset:end] = data
        inode.mtime_ns = time.time_ns()

    def pread(self, size: int, offset: int) -> bytes:
        with self._storage._lock:
            return bytes(self._live().data[offset : offset + size])

    def fsync(self) -> None:
        with self._storage._lock:
            inode = self._live()
            inode.durable = bytes(inode.data)

    def truncate(self, size: int) -> None:
        with self._storage._lock:
            inode = self._live()
            if size < len(inode.data):
                del inode.data[size:]
            else:
                inode.data.extend(bytes(size - len(inode.data)))
            inode.mtime_ns = time.time_ns()

    def size(self) -> int:
        with self._storage._lock:
            return len(self._live().data)

    def mtime_ns(self) -> int:
        with self._storage._lock:
            return self._live().mtime_ns

    def dup(self) -> MemoryFile:
        with self._storage._lock:
            return MemoryFile(self._storage, self.path, self._live())

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"MemoryFile({self.path!r})"


class MemoryStorage:
    """Files and directories in memory; see the module docstring. ``/`` always exists
    (and is durable); everything else must be created (``make_dirs_durable``)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._root = _Dir()
        self._generation = 0

    # -------------------------------------------------------------- lookup

    @staticmethod
    def _parts(path: str) -> list[str]:
        return [p for p in os.path.abspath(path).split("/") if p]

    def _lookup(self, path: str) -> _Inode | _Dir | None:
        node: _Inode | _Dir = self._root
        for part in self._parts(path):
            if not isinstance(node, _Dir):
                return None
            nxt = node.entries.get(part)
            if nxt is None:
                return None
            node = nxt
        return node

    def _parent(self, path: str) -> tuple[_Dir, str]:
        parts = self._parts(path)
        if not parts:
            raise _err(errno.EEXIST, path)
        parent = self._lookup("/" + "/".join(parts[:-1]))
        if not isinstance(parent, _Dir):
            raise _err(errno.ENOENT, path)
        return parent, parts[-1]

    # -------------------------------------------------------------- Storage

    def open(self, path: str, *, create: bool = True, truncate: bool = False) -> MemoryFile:
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                if not create:
                    raise _err(errno.ENOENT, path)
                node = parent.entries[name] = _Inode()
            elif isinstance(node, _Dir):
                raise _err(errno.EISDIR, path)
            elif truncate:
                node.data.clear()
                node.mtime_ns = time.time_ns()
            return MemoryFile(self, path, node)

    def replace(self, src: str, dst: str) -> None:
        with self._lock:
            sparent, sname = self._parent(src)
            node = sparent.entries.get(sname)
            if node is None:
                raise _err(errno.ENOENT, src)
            dparent, dname = self._parent(dst)
            if isinstance(dparent.entries.get(dname), _Dir):
                raise _err(errno.EISDIR, dst)
            del sparent.entries[sname]
            dparent.entries[dname] = node

    def unlink(self, path: str) -> None:
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _err(errno.ENOENT, path)
            if isinstance(node, _Dir):
                raise _err(errno.EISDIR, path)
            del parent.entries[name]

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            node = self._lookup(path)
            if node is None:
                raise _err(errno.ENOENT, path)
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR, path)
            return list(node.entries)

    def mkdir(self, path: str) -> None:
        with self._lock:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise _err(errno.EEXIST, path)
            parent.entries[name] = _Dir()

    def rmdir(self, path: str) -> None:
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _err(errno.ENOENT, path)
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR, path)
            if node.entries:
                raise _err(errno.ENOTEMPTY, path)
            del parent.entries[name]

    def exists(self, path: str) -> bool:
        with self._lock:
            return self._lookup(path) is not None

    def is_dir(self, path: str) -> bool:
        with self._lock:
            return isinstance(self._lookup(path), _Dir)

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            node = self._lookup(path)
            if node is None:
                raise _err(errno.ENOENT, path)
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR, path)
            node.durable = dict(node.entries)

    def set_mtime_ns(self, path: str, mtime_ns: int) -> None:
        with self._lock:
            node = self._lookup(path)
            if not isinstance(node, _Inode):
                raise _err(errno.ENOENT, path)
            node.mtime_ns = mtime_ns

    # -------------------------------------------------------------- power cut

    def crash(self) -> int:
        """A power cut: keep only what fsync and fsync_dir made durable; invalidate
        every open handle. Returns the number of file bytes lost (bytes in the page
        cache of surviving files that were never fsynced, plus whole files whose
        directory entry was not durable)."""
        with self._lock:
            self._generation += 1
            lost = 0
            seen: set[int] = set()

            def walk(d: _Dir) -> None:
                nonlocal lost
                for name, node in d.entries.items():
                    if isinstance(node, _Inode) and id(node) not in seen and d.durable.get(name) is not node:
                        lost += len(node.data)
                d.entries = dict(d.durable)
                for node in d.entries.values():
                    if isinstance(node, _Dir):
                        walk(node)
                    elif id(node) not in seen:
                        seen.add(id(node))
                        lost += max(len(node.data) - len(node.durable), 0)
                        node.data = bytearray(node.durable)

            walk(self._root)
            return lost

    def __repr__(self) -> str:
        return "MemoryStorage()"
