"""Worker threads for background disk work, at a lower CPU priority than the event loop.

The broker's event loop answers requests; its worker threads do disk work nobody waits
for at that moment: the periodic fsync of partition logs (the kernel submits the dirty
pages for writeback in the fsync caller's context, which is CPU work) and compaction.
On a machine with few cores those threads compete for the CPU with the loop and with
the clients, and every millisecond the loop waits for a core shows in the produce
latency: on the 2-core benchmark machine, lowering the periodic fsync threads' priority
took the p99 produce latency at 20 MB/s from 1.3-1.9 ms to 0.44-0.51 ms (docs/benchmarks.md).

A lower priority only orders who gets a busy CPU first: an idle CPU runs the thread at
full speed, and on a busy one the scheduler still gives it a share (nice 10 weighs
about a tenth of nice 0), so background work is delayed, never starved. Work a request
waits for (a durable acknowledgement) does not run on these threads.

Linux only: there ``setpriority(PRIO_PROCESS, tid)`` sets one thread's nice value.
Elsewhere the threads keep the process's priority.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("hightide.server")

BACKGROUND_NICE = 10  # added to the process's nice value for background disk threads


def lower_this_thread(increment: int = BACKGROUND_NICE) -> bool:
    """Raise the calling thread's nice value by ``increment`` (a lower priority, which
    needs no privilege). Returns whether it was changed (False off Linux or if the
    kernel refused; nothing else changes then)."""
    if not sys.platform.startswith("linux") or increment <= 0:
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment))
    except OSError as exc:  # e.g. a seccomp policy: the work still runs, at normal priority
        log.debug("could not lower the priority of thread %d: %s", tid, exc)
        return False
    return True


def background_executor(workers: int, name: str, increment: int = BACKGROUND_NICE) -> ThreadPoolExecutor:
    """A thread pool whose threads run ``increment`` nice levels below the process."""
    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=lower_this_thread,
                              initargs=(increment,))
