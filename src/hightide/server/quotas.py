"""Client quota enforcement on the Produce and Fetch paths (Kafka's ``KafkaApis`` use of
its quota managers; the math is :mod:`hightide.quota`).

A handler calls these with its :class:`~.context.RequestContext`; each returns the
throttle time to put in the answer's ``throttle_time_ms`` and sets ``ctx.throttle_ms``,
which the connection uses to mute the channel for that long once the answer is sent
(KIP-219: the answer goes out at once, the client waits too, and the broker reads
nothing more from the connection until the throttle time has passed). Amounts are per
request: the bytes of a Produce's record sets, the bytes of a Fetch answer's records;
no per-record work.

* **Produce** (:func:`produce_throttle`, before the append): the producer byte rate and,
  for acks != 0, the request quota (acks=0 is exempt from it, as in Kafka); the larger
  throttle wins. :func:`record_request_time` adds the handler's own time to the request
  quota afterwards: the request quota is checked when a client's request arrives against
  the handling time of its earlier requests (Kafka records and checks the same request;
  the difference is one request).
* **Fetch** (:func:`fetch_throttle`, consumers only; followers are exempt): the consumer
  byte rate of the answer and the request quota; a throttled fetch answers no records
  (the bytes are taken back, Kafka's ``unrecordQuotaSensor``) with the throttle time.
  :func:`fetch_max_bytes` caps a consumer's fetch at quota × (samples − 1) × window
  (Kafka's ``getMaxValueInQuotaWindow``), so one answer never exceeds what the quota
  allows over the window.

The request quota (``request_percentage``) counts the handler's time on the event loop
in percent of one thread per second (Kafka's ``nanosToPercentage``), as read by the node's
clock; time spent waiting (fsync, replication, long-poll) is not handling time, as in
Kafka. Other APIs are neither counted nor throttled.
"""

from __future__ import annotations

from .context import RequestContext
from ..quota.manager import user_of


def _who(ctx: RequestContext) -> tuple[str, str]:
    return user_of(ctx.principal), ctx.header.client_id or ""


def _monotonic_ms(ctx: RequestContext) -> int:
    """The clock's monotonic time in ms: what the quota sensors are timed by."""
    return int(ctx.clock.monotonic() * 1000)


def produce_throttle(ctx: RequestContext, nbytes: int, acks: int) -> int:
    """Record a Produce of ``nbytes`` record bytes; the throttle time (also set on ``ctx``)."""
    quotas = ctx.services.quotas
    if quotas is None:
        return 0
    user, client_id = _who(ctx)
    now = _monotonic_ms(ctx)
    throttle = quotas.produce.record(user, client_id, nbytes, now)
    if acks != 0:
        throttle = max(throttle, quotas.request.record(user, client_id, 0.0, now))
    ctx.throttle_ms = max(ctx.throttle_ms, throttle)
    return throttle


def record_request_time(ctx: RequestContext, started: float) -> None:
    """Add the handling time since ``started`` (the clock's monotonic seconds) to the
    client's request quota."""
    quotas = ctx.services.quotas
    if quotas is None or not quotas.request.enabled():
        return
    user, client_id = _who(ctx)
    elapsed_s = ctx.clock.monotonic() - started
    quotas.request.record_no_throttle(user, client_id, max(0.0, elapsed_s) * 100.0, _monotonic_ms(ctx))


def fetch_max_bytes(ctx: RequestContext, max_bytes: int) -> int:
    """``max_bytes`` capped by the consumer byte-rate quota's window."""
    quotas = ctx.services.quotas
    if quotas is None:
        return max_bytes
    cap = quotas.fetch.max_value_in_window(*_who(ctx))
    return max_bytes if cap is None else min(max_bytes, max(1, int(cap)))


def fetch_throttle(ctx: RequestContext, nbytes: int) -> int:
    """Record a consumer Fetch answer of ``nbytes`` record bytes; the throttle time (also
    set on ``ctx``). When it is > 0 the caller answers without records."""
    quotas = ctx.services.quotas
    if quotas is None:
        return 0
    user, client_id = _who(ctx)
    now = _monotonic_ms(ctx)
    request = quotas.request.record(user, client_id, 0.0, now)
    bandwidth = quotas.fetch.record(user, client_id, nbytes, now)
    throttle = max(request, bandwidth)
    if throttle > 0:
        quotas.fetch.unrecord(user, client_id, nbytes, now)
    ctx.throttle_ms = max(ctx.throttle_ms, throttle)
    return throttle
