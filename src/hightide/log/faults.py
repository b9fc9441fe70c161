"""Disk-fault injection at the file layer, for tests of a real ``hightide serve`` process.

Off unless the environment variable ``HIGHTIDE_FAULTS`` names a control file when the
process starts; then :data:`FAULTS` is an :class:`Injector` and every segment/index
write, fsync and file open of the partition logs asks it first. The control file is
re-read whenever it changes, so a test turns faults on and off while the broker runs.
It holds a JSON list of rules::

    [{"op": "write", "errno": "ENOSPC", "path": "orders-0/", "partial": true},
     {"op": "fsync", "errno": "EIO", "path": "orders-1/", "count": 1}]

* ``op``: ``write`` (segment and index writes), ``fsync``, ``open`` (creating or
  opening segment and index files) or ``read`` (locating batches to serve a read);
* ``errno``: an ``errno`` name, raised as ``OSError`` like the kernel would;
* ``path``: a substring of the file's path (empty or missing: every file);
* ``partial``: for ``write``, first write half of the bytes, then fail — a write cut
  short by a full disk, leaving a torn batch on disk;
* ``count``: fail only that many times (per rule, counted in this process).

Never set in production; when the variable is unset the hooks cost one ``is None`` test.
"""

from __future__ import annotations

import errno
import json
import os

__all__ = ["FAULTS", "Injector"]


class Injector:
    """Reads rules from ``control_file`` (see the module docstring) and applies them."""

    def __init__(self, control_file: str) -> None:
        self.control_file = control_file
        self._stamp: tuple[int, int] | None = None
        self._rules: list[dict] = []
        self._fired: dict[int, int] = {}

    def _current_rules(self) -> list[dict]:
        try:
            st = os.stat(self.control_file)
        except FileNotFoundError:
            self._stamp, self._rules = None, []
            return self._rules
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                with open(self.control_file, encoding="utf-8") as f:
                    text = f.read()
                rules = json.loads(text) if text.strip() else []
            except (OSError, ValueError):
                return self._rules  # half-written control file: keep the old rules
            self._stamp, self._rules, self._fired = stamp, rules, {}
        return self._rules

    def _match(self, op: str, path: str) -> dict | None:
        for i, rule in enumerate(self._current_rules()):
            if rule.get("op") != op or rule.get("path", "") not in path:
                continue
            count = rule.get("count")
            if count is not None:
                if self._fired.get(i, 0) >= count:
                    continue
                self._fired[i] = self._fired.get(i, 0) + 1
            return rule
        return None

    @staticmethod
    def _error(rule: dict, path: str) -> OSError:
        code = getattr(errno, rule.get("errno", "EIO"), errno.EIO)
        return OSError(code, f"{os.strerror(code)} (injected)", path)

    def on_open(self, path: str) -> None:
        """Raise the injected error for opening ``path``, if a rule says so."""
        rule = self._match("open", path)
        if rule is not None:
            raise self._error(rule, path)

    def on_read(self, path: str) -> None:
        """Raise the injected error for reading from ``path``, if a rule says so."""
        rule = self._match("read", path)
        if rule is not None:
            raise self._error(rule, path)

    def on_write(self, path: str, fd: int, data: bytes, position: int) -> None:
        """Raise the injected error for writing ``data`` at ``position`` of ``path``;
        with ``partial`` first write the first half of it (a torn write)."""
        rule = self._match("write", path)
        if rule is None:
            return
        if rule.get("partial") and len(data) > 1:
            os.pwrite(fd, data[: len(data) // 2], position)
        raise self._error(rule, path)

    def on_fsync(self, fd: int) -> None:
        """Raise the injected error for an fsync of ``fd`` (path looked up in /proc)."""
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        rule = self._match("fsync", path)
        if rule is not None:
            raise self._error(rule, path)


_control = os.environ.get("HIGHTIDE_FAULTS")
FAULTS: Injector | None = Injector(_control) if _control else None
