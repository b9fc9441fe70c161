"""A real broker inside the test process, on a chosen storage engine.

``EmbeddedBroker`` runs :class:`hightide.server.broker.Broker` on its own event loop in a
thread, serving Kafka on a loopback port, so real clients (confluent-kafka, RawClient)
talk to it while the test drives the storage engine (faults, power cuts) directly.

* :meth:`stop` is a clean shutdown (flush, clean-shutdown marker);
* :meth:`kill` is ``kill -9``: the listener and connections go away, the background
  tasks are cancelled and the files closed without flushing or writing the marker
  (what a killed process leaves: the page cache as it is);
* power loss is ``kill()`` followed by the in-memory engine's ``crash()``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from hightide.config import BrokerConfig
from hightide.log.storage import Storage
from hightide.server.broker import Broker

T = TypeVar("T")
_FORMAT = logging.Formatter("%(levelname)s %(name)s: %(message)s")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(_FORMAT.format(record))


class EmbeddedBroker:
    def __init__(self, data_dir: Path | str, storage: Storage, *settings: str, port: int = 0) -> None:
        config = BrokerConfig()
        for s in settings:
            k, _, v = s.partition("=")
            config.set(k, v)
        self.data_dir = str(data_dir)
        self.storage = storage
        self.broker = Broker(config, data_dir=self.data_dir, listen=("127.0.0.1", port), storage=storage)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="embedded-broker", daemon=True)
        self._capture = _Capture()
        self._running = False
        self._old_level: int | None = None

    # ------------------------------------------------------------------ running code on the loop

    def run(self, coro: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
        """Await ``coro()`` on the broker's loop; returns its result."""
        fut: Future = asyncio.run_coroutine_threadsafe(_call(coro), self.loop)
        return fut.result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 30) -> T:
        """Run ``fn()`` on the broker's loop thread (where the logs are owned)."""
        async def wrapper() -> T:
            return fn()
        return self.run(wrapper, timeout)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "EmbeddedBroker":
        logger = logging.getLogger("hightide")
        logger.addHandler(self._capture)
        self._old_level = logger.level
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        self._thread.start()
        try:
            self.run(self.broker.start)
        except BaseException:
            self._end_thread()
            raise
        self._running = True
        return self

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return "\n".join(self._capture.lines)

    def stop(self) -> None:
        """Clean shutdown."""
        if self._running:
            self._running = False
            try:
                self.run(self.broker.stop, timeout=60)
            finally:
                self._end_thread()

    def kill(self) -> None:
        """Like ``kill -9``: nothing is flushed, no clean-shutdown marker."""
        if not self._running:
            return
        self._running = False
        b = self.broker

        async def die() -> None:
            b.stopping = True
            if b.listeners.server is not None:
                b.listeners.server.close()
            for c in list(b.listeners.connections):
                if c.transport is not None:
                    c.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(die)
            # the worker threads finish what they are doing (a flush or cleaning step
            # already on its way to the disk), as in a process killed at that moment
            b.cleaner.close()
            b.flusher.shutdown_threads()
            if b.metadata is not None:
                b.metadata.log.abandon()
            if b.logs is not None:
                b.logs.abandon()
            if b._dir_lock is not None:  # a killed process's flock goes with it
                b._dir_lock.release()
                b._dir_lock = None
        finally:
            self._end_thread()

    def _end_thread(self) -> None:
        logger = logging.getLogger("hightide")
        logger.removeHandler(self._capture)
        if self._old_level is not None:
            logger.setLevel(self._old_level)
            self._old_level = None
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
        if not self.loop.is_running():
            self.loop.close()


async def _call(coro: Callable[[], Awaitable[Any]]) -> Any:
    return await coro()
