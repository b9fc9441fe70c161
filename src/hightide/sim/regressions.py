"""The shell defects of issue 26 put back into today's code: each variant undoes exactly
what its fix changed (the code before the fixes, 8cf81b9, predates the transport and
clock seams and cannot run in the simulator), so the simulator can show that it finds the
defect — on a recorded seed (tests/unit/test_sim_regressions.py) — and that the same seed
passes on the real code. Run one with ``python -m hightide.sim --plant NAME``.

- ``stale-coordinator`` (item 1, fixed by d6a0966): a restarted broker-only node acts on
  its pre-crash metadata at once — coordinates the groups of the ``__consumer_offsets``
  partitions it used to lead and acknowledges writes to partitions its stale copy says it
  leads alone.
- ``shutdown-swallowed-cancel`` (item 3, fixed by 042d485): requests wait with
  ``asyncio.wait_for`` (on 3.11 it swallows a cancellation that arrives in the loop step
  of the answer), stopping a task waits for it without a bound, and a node's stop runs
  its steps in turn without a bound, ending at the first that fails. Found with the
  ``stop-busy`` fault (a stop on a loaded machine: the node runs in time slices, so the
  answer to the metadata follower's fetch and the stop's step that cancels the follower
  are handled in one slice; ``wait_for`` swallows the cancel and the follower runs on).
- ``channel-stays-on-paused-leader`` (item 4, fixed by 361057f): a controller channel
  stays on its connection to the old leader when a new leader is heard of (it leaves only
  when that connection breaks).
- ``forwarded-write-overruns-deadline`` (item 5, fixed by 361057f): callers of a
  controller channel queue behind one lock, each making its own connect attempt with no
  regard for its deadline, and the read gate holds a forwarded write for
  ``metadata.read.max.wait.ms`` whatever the request's deadline.
- ``txn-offset-commit-unverified`` (item 6, fixed by 9658f67): TxnOffsetCommit answers
  COORDINATOR_NOT_AVAILABLE while the transaction coordinator on another broker is asked
  in the background, instead of holding the request until it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .planted import _patch

__all__ = ["REGRESSIONS"]


@contextlib.contextmanager
def _stale_coordinator() -> Iterator[None]:
    """d6a0966 added ``BrokerNode.caught_up`` (nothing led or coordinated before the node
    caught up with the controller's log and holds its own registration) and
    ``ReplicaManager._leads_alone``'s epoch check. Before it a broker-only node acted on
    its local image from its start, and ``wait_replicated`` acknowledged at once for a
    partition the image said it led without leader state here."""
    from ..node.broker_node import BrokerNode
    from ..replica.manager import ReplicaManager

    init = BrokerNode.__init__

    def acting_at_once(self: Any, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        self.caught_up = True  # the old code had no catch-up gate

    def leads_alone(self: Any, topic: str, partition: int) -> bool:
        t = self._image().topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        return p is not None and p.leader == self.node_id

    with _patch(BrokerNode, "__init__", acting_at_once), _patch(ReplicaManager, "_leads_alone", leads_alone):
        yield


@contextlib.contextmanager
def _shutdown_swallowed_cancel() -> Iterator[None]:
    """042d485 replaced ``asyncio.wait_for`` in the client connection's request (used by
    the metadata follower's and the replica fetchers' endless loops) by
    ``asyncio.timeout``, bounded ``cancel_and_wait`` and the fetchers' stop, and made
    ``Broker.stop`` / ``BrokerNode.stop`` ordered bounded steps (``run_steps``) that run
    whatever a step raised. Before it: ``wait_for`` (a cancel in the answer's loop step
    is swallowed, so the loop goes on), an unbounded wait for every cancelled task, and
    the stop's awaits one after the other, unbounded, the first exception ending it."""
    from ..aio import tasks
    from ..client.connection import BrokerConnection
    from ..client.errors import KafkaTimeoutError
    from ..node import broker_node, lifecycle, metadata_follower
    from ..replica import fetcher
    from ..server import broker

    async def cancel_and_wait(task: asyncio.Task[Any] | None, timeout_s: float = 0.0) -> bool:
        if task is None:
            return True
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
        return True

    async def request(self: Any, api_key: int, version: int, body: Any, *, timeout_s: float | None = None,
                      unknown_tags: Any = None, decoder: Callable[[bytes], Any] | None = None,
                      request_tags: dict[int, bytes] | None = None) -> Any:
        self._check_open()
        if isinstance(body, dict):
            from ..protocol.build import materialize
            from ..protocol.codec import request_schema
            body = materialize(request_schema(api_key, version), body)
        corr = self._core.send_request(api_key, version, body, unknown_tags=unknown_tags, decoder=decoder,
                                       request_tags=request_tags)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        try:
            self._flush()
            while self._write_paused and not fut.done():
                await self._write_room()
            # the defect itself: wait_for returns the answer and swallows a cancellation
            # that arrives in the same loop step (issue 26 item 3)
            return await asyncio.wait_for(fut, timeout_s or self.request_timeout_s)
        except TimeoutError:
            raise KafkaTimeoutError(f"api {api_key} v{version} to {self.host}:{self.port} timed out") from None
        finally:
            if self._pending.pop(corr, None) is not None:
                self._core.forget(corr)

    async def wait_stopped(self: Any, timeout_s: float = 0.0) -> bool:
        return await cancel_and_wait(self._task)

    async def run_steps(what: str, steps: Iterable[Any], log: Any) -> list[str]:
        for step in steps:  # in turn, each without a bound; the first failure ends the stop
            if step is not None:
                result = step.run()
                if inspect.isawaitable(result):
                    await result
        return []

    with contextlib.ExitStack() as stack:
        for module in (broker, broker_node):
            stack.enter_context(_patch(module, "run_steps", run_steps))
        for module in (tasks, lifecycle, metadata_follower, fetcher, broker):
            stack.enter_context(_patch(module, "cancel_and_wait", cancel_and_wait))
        stack.enter_context(_patch(BrokerConnection, "request", request))
        stack.enter_context(_patch(fetcher.ReplicaFetcher, "wait_stopped", wait_stopped))
        yield


def _channel_stays_on_paused_leader() -> contextlib.AbstractContextManager[None]:
    """361057f made every channel leave its connection to another voter as soon as the
    locator learns a new leader address (``ControllerChannel._leader_moved``, a locator
    listener). Before it the channel kept the connection until it broke: a SIGSTOPped
    leader keeps its sockets open."""
    from ..node.controller_channel import ControllerChannel
    return _patch(ControllerChannel, "_leader_moved", lambda self: None)


@contextlib.contextmanager
def _forwarded_write_overruns_deadline() -> Iterator[None]:
    """361057f replaced the channel's connect lock (each caller in turn made its own
    attempt: backoff plus a 2 s handshake, whatever its deadline) by one shared attempt
    each request waits for only until its deadline, and passed the request's deadline to
    the read gate. Before it: the lock, and the gate's own ``metadata.read.max.wait.ms``."""
    from ..node.controller_channel import ControllerChannel, ControllerUnavailable
    from ..node.read_gate import ReadGate

    locks: dict[int, asyncio.Lock] = {}

    async def connection(self: Any, deadline: float | None = None) -> Any:
        conn = self._conn
        if conn is not None and conn.connected:
            return conn
        async with locks.setdefault(id(self), asyncio.Lock()):
            conn = self._conn
            if conn is not None and conn.connected:
                return conn
            if self._closed:
                raise ControllerUnavailable(f"{self.name} channel closed")
            return await self._open()

    wait_write = ReadGate.wait_write

    async def wait_write_own_bound(self: Any, offset: int, what: str, deadline: float | None = None) -> bool:
        return await wait_write(self, offset, what)

    with _patch(ControllerChannel, "connection", connection), _patch(ReadGate, "wait_write", wait_write_own_bound):
        yield


def _txn_offset_commit_unverified() -> contextlib.AbstractContextManager[None]:
    """9658f67 made TxnOffsetCommit await the transaction coordinator on another broker
    (``verify_held``). Before it the handler took the answer of ``verify`` at once: with
    the transaction coordinator on another broker, the question went out in the
    background and the request was answered NOT_ENOUGH_REPLICAS (the produce path's
    code), turned into COORDINATOR_NOT_AVAILABLE; the answer, when it came, served the
    next request of that producer id, epoch and partition once."""
    from ..group.records import OFFSETS_TOPIC
    from ..log.transactions import verification_error_for_produce
    from ..protocol.errors import ErrorCode
    from ..server.handlers import txn_offset_commit

    #: The old verifier's answers: each used once, by the next request of that producer
    #: id, epoch and partition (so every new transaction is verified again).
    answered: dict[tuple[Any, ...], asyncio.Future[ErrorCode]] = {}

    async def verified(ctx: Any, req: Any) -> ErrorCode:
        if not req.group_id:
            return ErrorCode.invalid_group_id
        partition = ctx.groups.partition_for(req.group_id)
        key = (req.producer_id, req.producer_epoch, partition)
        earlier = answered.pop(key, None)
        if earlier is not None and earlier.done() and not earlier.cancelled():
            code = earlier.result()  # answered in the background meanwhile
        elif earlier is not None and not earlier.done():
            answered[key] = earlier  # still asking
            code = ErrorCode.not_enough_replicas
        else:
            got = ctx.txns.verify(req.transactional_id, req.producer_id, req.producer_epoch, OFFSETS_TOPIC, partition)
            if isinstance(got, asyncio.Future):  # asked in the background: not verified yet
                answered[key] = got
                code = ErrorCode.not_enough_replicas
            else:
                code = got
        if code == ErrorCode.none:
            return code
        err = verification_error_for_produce(code)[0]
        return ErrorCode.coordinator_not_available if err == ErrorCode.not_enough_replicas else err

    return _patch(txn_offset_commit, "_verified", verified)


REGRESSIONS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "stale-coordinator": _stale_coordinator,
    "shutdown-swallowed-cancel": _shutdown_swallowed_cancel,
    "channel-stays-on-paused-leader": _channel_stays_on_paused_leader,
    "forwarded-write-overruns-deadline": _forwarded_write_overruns_deadline,
    "txn-offset-commit-unverified": _txn_offset_commit_unverified,
}
