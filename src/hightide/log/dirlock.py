"""An exclusive lock on a data directory (Kafka's ``.lock`` file).

Two brokers appending to the same partition files overwrite each other's acknowledged
records, so a broker takes this lock before it opens or writes anything in its data
directory and holds it for the life of the process.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``<data dir>/.lock``. It belongs to the open
file description, so it is released when :meth:`DirLock.release` closes the descriptor or
when the process dies (even by SIGKILL): a ``.lock`` file left behind by a dead process
never blocks a new start. After locking, the holder writes its pid into the file so a
refused start can name it; the pid is informational only, the flock is the lock.

Pure: no asyncio, no server imports.
"""

from __future__ import annotations

import errno
import fcntl
import os

LOCK_FILE = ".lock"


class DataDirLocked(OSError):
    """Another process (or another open of the lock in this process) holds the lock.

    ``path`` is the data directory, ``pid`` the holder's pid as written in the lock file
    (``None`` when it could not be read, e.g. the holder has not written it yet).
    """

    def __init__(self, path: str, pid: int | None) -> None:
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(errno.EAGAIN, f"data directory {path} is in use by another hightide process ({holder})")
        self.path = path
        self.pid = pid

    def __str__(self) -> str:
        return str(self.strerror)


class DirLock:
    """The held lock of one data directory; :meth:`acquire` creates it."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: str) -> "DirLock":
        """Create ``data_dir`` if needed and lock it exclusively without waiting.

        Returns the held lock. Raises :class:`DataDirLocked` if the directory is locked
        by someone else, ``OSError`` if the directory or lock file cannot be created.
        Nothing else in the directory is touched.
        """
        data_dir = os.path.abspath(data_dir)
        os.makedirs(data_dir, exist_ok=True)
        fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirLocked(data_dir, pid) from None
            raise
        try:
            _write_pid(fd, os.getpid())
        except OSError:
            os.close(fd)
            raise
        return cls(data_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Unlock and close; idempotent. The ``.lock`` file stays (as in Kafka)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock


def _write_pid(fd: int, pid: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{pid}\n".encode(), 0)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
