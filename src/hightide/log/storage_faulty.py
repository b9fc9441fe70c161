"""A fault-injecting storage engine: wraps another engine and fails chosen operations.

Rules are set programmatically (:meth:`FaultyStorage.set_rules`, :meth:`add_rule`,
:meth:`clear`), so a test turns faults on and off while a broker runs on the engine::

    disk = FaultyStorage(POSIX)
    disk.set_rules(Fault("write", "ENOSPC", path="orders-0/", partial=True))

A :class:`Fault` matches an operation ``op`` on a path containing ``path``:

* ``write``: ``pwrite``/``pwritev`` (segments, indexes, snapshots, small files);
  with ``partial`` the first half of the bytes is written first — a write cut short by
  a full disk, leaving a torn tail;
* ``fsync``: a file's fsync (``fsync_dir`` of a matching directory too);
* ``open``: opening or creating a file (``EMFILE`` here is running out of descriptors);
* ``read``: ``pread``.

``errno`` is an ``errno`` name raised as ``OSError`` like the kernel would; ``count``
limits how often a rule fires (``None``: every time). Rules are checked in order; the
first one that matches and has not used up its count fires.
"""

from __future__ import annotations

import errno as errno_mod
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .storage import Buffer, Storage, StorageFile, StorageWrapper

__all__ = ["Fault", "FaultyStorage", "FaultyFile"]

OPS = ("write", "fsync", "open", "read")


@dataclass
class Fault:
    """One rule; see the module docstring."""

    op: str
    errno: str = "EIO"
    path: str = ""
    partial: bool = False
    count: int | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown fault op {self.op!r} (one of {', '.join(OPS)})")
        if not hasattr(errno_mod, self.errno):
            raise ValueError(f"unknown errno name {self.errno!r}")

    def error(self, path: str) -> OSError:
        code = getattr(errno_mod, self.errno)
        return OSError(code, f"{os.strerror(code)} (injected)", path)


class FaultyStorage(StorageWrapper):
    """``inner`` with faults injected per the current rules. ``crash()`` (and any other
    attribute the inner engine has) is passed through."""

    def __init__(self, inner: Storage, *rules: Fault) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._rules: list[Fault] = list(rules)
        self._fired: list[int] = [0] * len(self._rules)
        self.injected = 0  # how many faults fired so far

    # -------------------------------------------------------------- rules

    def set_rules(self, *rules: Fault) -> None:
        """Replace all rules (counts start afresh); no arguments clears them."""
        with self._lock:
            self._rules = list(rules)
            self._fired = [0] * len(rules)

    def add_rule(self, rule: Fault) -> None:
        with self._lock:
            self._rules.append(rule)
            self._fired.append(0)

    def clear(self) -> None:
        self.set_rules()

    def check(self, op: str, path: str) -> Fault | None:
        """The rule that fires for ``op`` on ``path`` now (counting it), or None."""
        if not self._rules:
            return None
        with self._lock:
            for i, rule in enumerate(self._rules):
                if rule.op != op or rule.path not in path:
                    continue
                if rule.count is not None and self._fired[i] >= rule.count:
                    continue
                self._fired[i] += 1
                self.injected += 1
                return rule
        return None

    def _raise_if(self, op: str, path: str) -> None:
        rule = self.check(op, path)
        if rule is not None:
            raise rule.error(path)

    # -------------------------------------------------------------- Storage

    def open(self, path: str, *, create: bool = True, truncate: bool = False) -> FaultyFile:
        self._raise_if("open", path)
        return FaultyFile(self, self.inner.open(path, create=create, truncate=truncate))

    def fsync_dir(self, path: str) -> None:
        self._raise_if("fsync", path.rstrip("/") + "/")
        self.inner.fsync_dir(path)

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r})"


class FaultyFile:
    """A handle of the inner engine, with the faults of its :class:`FaultyStorage`."""

    __slots__ = ("path", "_storage", "_file")

    def __init__(self, storage: FaultyStorage, file: StorageFile) -> None:
        self.path = file.path
        self._storage = storage
        self._file = file

    def _write_fault(self, total: Sequence[Buffer], offset: int) -> None:
        rule = self._storage.check("write", self.path)
        if rule is None:
            return
        data = b"".join(bytes(b) for b in total)
        if rule.partial and len(data) > 1:
            self._file.pwrite(data[: len(data) // 2], offset)
        raise rule.error(self.path)

    def pwritev(self, buffers: Sequence[Buffer], offset: int) -> None:
        if self._storage._rules:
            self._write_fault(buffers, offset)
        self._file.pwritev(buffers, offset)

    def pwrite(self, data: Buffer, offset: int) -> None:
        if self._storage._rules:
            self._write_fault((data,), offset)
        self._file.pwrite(data, offset)

    def pread(self, size: int, offset: int) -> bytes:
        self._storage._raise_if("read", self.path)
        return self._file.pread(size, offset)

    def fsync(self) -> None:
        self._storage._raise_if("fsync", self.path)
        self._file.fsync()

    def truncate(self, size: int) -> None:
        self._file.truncate(size)

    def size(self) -> int:
        return self._file.size()

    def mtime_ns(self) -> int:
        return self._file.mtime_ns()

    def dup(self) -> FaultyFile:
        return FaultyFile(self._storage, self._file.dup())

    def close(self) -> None:
        self._file.close()

    def __repr__(self) -> str:
        return f"FaultyFile({self._file!r})"
