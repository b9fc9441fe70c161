"""Stopping the process at once, as Kafka's ``Exit.halt`` (its fatal fault handler) does.

Some failures leave state the node must not go on serving nor shut down cleanly over: a
metadata-log write that could not be made durable (a clean shutdown would flush the
records it refused and mark the log clean). :func:`halt_process` logs one line and ends
the process with no clean-up at all: no flush, no clean-shutdown marker, no answer to a
request still waiting; the next start recovers the log from disk.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

__all__ = ["HALT_EXIT_CODE", "halt_process"]

#: The exit code of a halted node (Kafka's fatal fault handler halts with 1).
HALT_EXIT_CODE = 1

log = logging.getLogger("hightide.broker")


def halt_process(reason: str) -> NoReturn:
    """Log ``reason`` (CRITICAL, one line), flush the log handlers and end the process
    with :data:`HALT_EXIT_CODE` at once (``os._exit``: nothing else runs)."""
    log.critical("halting: %s", reason)
    for handler in logging.getLogger().handlers + log.handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - a broken handler must not keep the node alive
            pass
    os._exit(HALT_EXIT_CODE)
