"""Per-client quota sensors and throttle times (Kafka's ``ClientQuotaManager`` with its
default quota callback, and ``ClientRequestQuotaManager``).

Theory of operation
-------------------
Each manager enforces one quota key (``producer_byte_rate``, ``consumer_byte_rate`` or
``request_percentage``) over the client quotas of the metadata image
(:class:`~hightide.cluster.quota_image.ClientQuotasImage`, read at each call, so a change
applies to the next request). A request's (user, client-id) — the user is the name of
the connection's principal (``ANONYMOUS`` without authentication), the client id the
request header's — maps to the **most specific quota entity that sets the key**, in
Kafka's order:

1. user + client-id, 2. user + default client-id, 3. user,
4. default user + client-id, 5. default user + default client-id, 6. default user,
7. client-id, 8. default client-id.

The sensor is keyed by Kafka's metric tags for that level: (user, client-id) for levels
1, 2, 4, 5; (user, "") for 3 and 6; ("", client-id) for 7 and 8. So a quota on a
client id is shared by every user's connections with that client id, a default quota
applies to each user / client id separately, and a user quota covers all of that user's
client ids. A sensor is a :class:`~hightide.quota.rate.Rate` over ``quota.window.num``
samples of ``quota.window.size.seconds``; sensors idle for an hour are dropped (Kafka's
``InactiveSensorExpirationTimeSeconds``).

:meth:`ClientQuotaManager.record` adds a request's amount and returns the throttle time:
0 within the quota, else (observed − quota) / quota × window (Kafka's
``QuotaUtils.throttleTime``); the request manager caps it at one window (Kafka's
``ClientRequestQuotaManager.maxThrottleTimeMs``). While no entity sets the key, nothing
is recorded (Kafka's ``quotasEnabled``), so a broker without quotas pays one dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..cluster.quota_control import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from ..cluster.quota_image import ClientQuotasImage
from ..cluster.quota_records import CLIENT_ID, USER, QuotaEntity
from .rate import Rate, throttle_ms

#: Sensors idle this long are dropped (Kafka: one hour).
INACTIVE_SENSOR_EXPIRY_MS = 3600 * 1000
_SWEEP_EVERY_MS = 60 * 1000

Tags = tuple[str, str]  # (user tag, client-id tag), "" for a level that does not apply


def _entity(user: str | None | bool, client_id: str | None | bool) -> QuotaEntity:
    """The entity of a level: a name, None for the default, False for "not part of it"."""
    pairs: list[tuple[str, str | None]] = []
    if client_id is not False:
        pairs.append((CLIENT_ID, client_id))  # type: ignore[arg-type]
    if user is not False:
        pairs.append((USER, user))  # type: ignore[arg-type]
    return tuple(pairs)


@dataclass(slots=True)
class Sensor:
    """One client's rate and its throttling so far (for metrics)."""
    rate: Rate
    throttled: int = 0  # requests throttled
    throttle_ms_total: int = 0


class ClientQuotaManager:
    """The quota of one key for every client; ``image`` gives the current quotas."""

    def __init__(self, key: str, image: Callable[[], ClientQuotasImage], samples: int = 11,
                 window_ms: int = 1000, max_throttle_ms: int | None = None) -> None:
        self.key = key
        self._image = image
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        self.sensors: dict[Tags, Sensor] = {}
        self._next_sweep_ms = 0

    def enabled(self) -> bool:
        """True while some entity sets this manager's key."""
        return self.key in self._image().keys_in_use

    def metric_tags(self, user: str, client_id: str) -> Tags:
        """The sensor of (user, client id): Kafka's DefaultQuotaCallback.quotaMetricTags."""
        q = self._image()
        k = self.key

        def has(e: QuotaEntity) -> bool:
            return q.value(e, k) is not None
        if has(_entity(user, client_id)) or has(_entity(user, None)):
            return user, client_id
        if has(_entity(user, False)):
            return user, ""
        if has(_entity(None, client_id)) or has(_entity(None, None)):
            return user, client_id
        if has(_entity(None, False)):
            return user, ""
        return "", client_id

    def quota_limit(self, tags: Tags) -> float | None:
        """The quota of a sensor (Kafka's DefaultQuotaCallback.quotaLimit), None: none."""
        q, k = self._image(), self.key
        user, client_id = tags
        if user and client_id:
            order = [_entity(user, client_id), _entity(user, None), _entity(None, client_id), _entity(None, None)]
        elif user:
            order = [_entity(user, False), _entity(None, False)]
        elif client_id:
            order = [_entity(False, client_id), _entity(False, None)]
        else:
            return None
        for e in order:
            v = q.value(e, k)
            if v is not None:
                return v
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to (user, client id), None: unlimited."""
        return self.quota_limit(self.metric_tags(user, client_id))

    def _sensor(self, tags: Tags, now_ms: int) -> Sensor:
        if now_ms >= self._next_sweep_ms:
            self._next_sweep_ms = now_ms + _SWEEP_EVERY_MS
            stale = [t for t, s in self.sensors.items() if now_ms - s.rate.last_record_ms >= INACTIVE_SENSOR_EXPIRY_MS]
            for t in stale:
                del self.sensors[t]
        sensor = self.sensors.get(tags)
        if sensor is None:
            sensor = self.sensors[tags] = Sensor(Rate(self.samples, self.window_ms))
        return sensor

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for (user, client id) at ``now_ms``; return the throttle time
        in ms (0: within its quota, or no quota). Kafka's ``maybeRecordAndGetThrottleTimeMs``."""
        if self.key not in self._image().keys_in_use:
            return 0
        tags = self.metric_tags(user, client_id)
        sensor = self._sensor(tags, now_ms)
        sensor.rate.record(value, now_ms)
        bound = self.quota_limit(tags)
        if bound is None:
            return 0
        observed = sensor.rate.measure(now_ms)
        delay = throttle_ms(observed, bound, sensor.rate.window_size_ms(now_ms))
        if self.max_throttle_ms is not None:
            delay = min(delay, self.max_throttle_ms)
        if delay > 0:
            sensor.throttled += 1
            sensor.throttle_ms_total += delay
        return delay

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Record without checking (the check comes with the client's next request)."""
        if self.key in self._image().keys_in_use:
            self._sensor(self.metric_tags(user, client_id), now_ms).rate.record(value, now_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded ``value`` (a throttled fetch answers nothing; Kafka's
        ``unrecordQuotaSensor``)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most a single request may carry without certain throttling (Kafka's
        ``getMaxValueInQuotaWindow``: quota × (samples − 1) × window), None: no quota."""
        if self.key not in self._image().keys_in_use:
            return None
        bound = self.quota(user, client_id)
        return None if bound is None else bound * (self.samples - 1) * self.window_ms / 1000


class ClientQuotas:
    """The broker's three client quota managers (Kafka's ``QuotaFactory``): ``produce``
    (producer_byte_rate), ``fetch`` (consumer_byte_rate) and ``request``
    (request_percentage: percent of one request thread's time per second, throttles
    capped at one window)."""

    def __init__(self, image: Callable[[], ClientQuotasImage], samples: int = 11, window_s: int = 1) -> None:
        window_ms = window_s * 1000
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, image, samples, window_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, image, samples, window_ms)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, image, samples, window_ms, max_throttle_ms=window_ms)

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request


def user_of(principal: str) -> str:
    """The user name of a principal ``"User:alice"`` → ``"alice"`` (Kafka's
    ``KafkaPrincipal.getName``); the whole string if it has no type."""
    _, sep, name = principal.partition(":")
    return name if sep else principal
