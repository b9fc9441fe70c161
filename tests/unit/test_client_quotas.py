"""Client quotas, sans-IO: the ClientQuotaRecord and the image, Kafka's validation of
AlterClientQuotas and DescribeClientQuotas filters, the windowed Rate and throttle time
(Kafka's QuotaUtils), the precedence of user / client-id / default quotas, and a
simulated client held to its quota."""

from __future__ import annotations

import math

import pytest

from hightide.cluster import records as rec
from hightide.cluster.image import MetadataImage
from hightide.cluster.quota_control import QuotaAlteration, alter_client_quotas, entity_text
from hightide.cluster.quota_image import ClientQuotasImage, FilterComponent, QuotaFilterError
from hightide.cluster.quota_records import ClientQuotaRecord, quota_entity
from hightide.protocol.errors import ErrorCode
from hightide.quota.manager import INACTIVE_SENSOR_EXPIRY_MS, ClientQuotaManager, ClientQuotas, user_of
from hightide.quota.rate import Rate, throttle_ms

U, C = "user", "client-id"
PRODUCE = "producer_byte_rate"


def image_of(*quotas: tuple[tuple, str, float]) -> ClientQuotasImage:
    img = ClientQuotasImage()
    for entity, key, value in quotas:
        img.apply(ClientQuotaRecord(entity, key, value))
    return img


# -- the record and the image ------------------------------------------------------------
def test_record_round_trips_and_normalizes_the_entity() -> None:
    r = ClientQuotaRecord([["user", "alice"], ["client-id", None]], PRODUCE, 1024)  # type: ignore[arg-type]
    assert r.entity == (("client-id", None), ("user", "alice"))
    back = rec.decode(rec.encode(r))
    assert back == r and hash(back.entity) == hash(r.entity)
    removal = ClientQuotaRecord(((U, "bob"),), PRODUCE, remove=True)
    assert rec.decode(rec.encode(removal)) == removal


def test_image_applies_sets_and_removals_in_log_order() -> None:
    image = MetadataImage()
    alice = ((U, "alice"),)
    for i, r in enumerate([ClientQuotaRecord(alice, PRODUCE, 10.0), ClientQuotaRecord(alice, "consumer_byte_rate", 20.0),
                           ClientQuotaRecord(alice, PRODUCE, 30.0), ClientQuotaRecord(alice, PRODUCE, remove=True),
                           ClientQuotaRecord(((U, "bob"),), PRODUCE, remove=True)]):
        image.apply(r, i)
    assert image.quotas.entities == {alice: {"consumer_byte_rate": 20.0}}
    assert image.quotas.keys_in_use == {"consumer_byte_rate": 1}
    image.apply(ClientQuotaRecord(alice, "consumer_byte_rate", remove=True), 9)
    assert image.quotas.entities == {} and image.quotas.keys_in_use == {}
    assert image.offset == 9


# -- AlterClientQuotas -----------------------------------------------------------------
def alter(img: ClientQuotasImage, *entries: tuple[list, list]) -> tuple[list, list]:
    return alter_client_quotas(img, [QuotaAlteration(e, ops) for e, ops in entries])


@pytest.mark.parametrize("entity, ops, message", [
    ([(U, "a")], [("foo", 1.0)], "Invalid configuration key foo"),
    ([(U, "a")], [(PRODUCE, -5.0)], "Quota producer_byte_rate must be greater than 0"),
    ([(U, "a")], [(PRODUCE, 0.0)], "Quota producer_byte_rate must be greater than 0"),
    ([(U, "a")], [(PRODUCE, 1.5)], "producer_byte_rate cannot be a fractional value."),
    ([(U, "a")], [("consumer_byte_rate", 1e19)], "Proposed value for consumer_byte_rate is too large for a LONG."),
    ([(U, "a")], [(PRODUCE, math.nan)], "Quota producer_byte_rate must be a finite number"),
    ([(U, "a")], [("request_percentage", math.inf)], "Quota request_percentage must be a finite number"),
    ([], [(PRODUCE, 1.0)], "Invalid empty client quota entity"),
    ([("ip", "10.0.0.1")], [("connection_creation_rate", 5.0)], "Unhandled client quota entity type: ip"),
    ([("group", "g")], [(PRODUCE, 1.0)], "Unhandled client quota entity type: group"),
    ([(U, "")], [(PRODUCE, 1.0)], "Empty user not supported"),
    ([(U, "a"), (C, "")], [(PRODUCE, 1.0)], "Empty client-id not supported"),
])
def test_alter_refuses_what_kafka_refuses(entity: list, ops: list, message: str) -> None:
    img = image_of((((U, "a"),), "controller_mutation_rate", 5.0))
    results, records = alter(img, (entity, ops + [("controller_mutation_rate", None)]))
    assert results == [(quota_entity(entity), (ErrorCode.invalid_request, message))]
    assert records == []  # an entity that fails writes nothing, not even its valid removal


def test_alter_writes_only_changes() -> None:
    alice = ((U, "alice"),)
    img = image_of((alice, PRODUCE, 100.0), (alice, "request_percentage", 50.0))
    results, records = alter(img, ([(U, "alice")], [(PRODUCE, 100.0), ("request_percentage", None),
                                                    ("consumer_byte_rate", None), ("controller_mutation_rate", 0.5)]))
    assert results == [(alice, (ErrorCode.none, None))]
    assert records == [ClientQuotaRecord(alice, "request_percentage", remove=True),
                       ClientQuotaRecord(alice, "controller_mutation_rate", 0.5)]


def test_alter_duplicates_as_kafka_reports_them() -> None:
    img = ClientQuotasImage()
    results, records = alter(img, ([(U, "a")], [(PRODUCE, 1.0), (PRODUCE, 2.0)]),
                             ([(C, "x")], [(PRODUCE, 1.0)]), ([(C, "x")], [(PRODUCE, 3.0)]))
    a, x = ((U, "a"),), ((C, "x"),)
    # Kafka's duplicate-entity check overwrites its duplicate-key message; the first
    # occurrence of a duplicated entity keeps its records
    assert results == [(a, (ErrorCode.invalid_request, f"Ignoring duplicate entity {entity_text(a)}")),
                       (x, (ErrorCode.invalid_request, f"Ignoring duplicate entity {entity_text(x)}"))]
    assert records == [ClientQuotaRecord(x, PRODUCE, 1.0)]
    assert entity_text(((C, None), (U, "a"))) == "ClientQuotaEntity(entries={client-id=null, user=a})"


def test_alter_entity_type_named_twice_keeps_the_last_name() -> None:
    results, records = alter(ClientQuotasImage(), ([(U, "a"), (U, "b")], [(PRODUCE, 8.0)]))
    assert results == [(((U, "b"),), (ErrorCode.none, None))]
    assert records == [ClientQuotaRecord(((U, "b"),), PRODUCE, 8.0)]


# -- DescribeClientQuotas filters ----------------------------------------------------------
DESCRIBED = image_of((((U, "alice"),), PRODUCE, 1.0), (((U, None),), PRODUCE, 2.0),
                     (((U, "alice"), (C, "app")), PRODUCE, 3.0), (((U, "alice"), (C, None)), PRODUCE, 4.0),
                     (((C, "app"),), PRODUCE, 5.0), (((C, None),), PRODUCE, 6.0))


def described(components: list[FilterComponent], strict: bool) -> list[float]:
    return sorted(v[PRODUCE] for _, v in DESCRIBED.describe(components, strict))


def test_describe_strict_and_not() -> None:
    assert described([], False) == [1, 2, 3, 4, 5, 6]
    assert described([], True) == []
    assert described([FilterComponent(U, 0, "alice")], False) == [1, 3, 4]
    assert described([FilterComponent(U, 0, "alice")], True) == [1]
    assert described([FilterComponent(U, 1)], True) == [2]
    assert described([FilterComponent(U, 2)], True) == [1, 2]
    assert described([FilterComponent(C, 2)], False) == [3, 4, 5, 6]
    assert described([FilterComponent(U, 0, "alice"), FilterComponent(C, 1)], True) == [4]
    assert described([FilterComponent(U, 2), FilterComponent(C, 2)], True) == [3, 4]
    assert described([FilterComponent(U, 0, "nobody")], False) == []


@pytest.mark.parametrize("components, code, message", [
    ([FilterComponent("", 0, "x")], ErrorCode.invalid_request, "Invalid empty entity type."),
    ([FilterComponent(U, 2), FilterComponent(U, 0, "a")], ErrorCode.invalid_request,
     "Entity type user cannot appear more than once in the filter."),
    ([FilterComponent("ip", 2)], ErrorCode.unsupported_version, "Unsupported entity type ip"),
    ([FilterComponent(U, 0)], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([FilterComponent(U, 1, "a")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([FilterComponent(U, 2, "a")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([FilterComponent(U, 7)], ErrorCode.invalid_request, "Unknown match type 7"),
])
def test_describe_refuses_bad_filters(components: list, code: ErrorCode, message: str) -> None:
    with pytest.raises(QuotaFilterError) as info:
        DESCRIBED.describe(components, False)
    assert (info.value.code, str(info.value)) == (code, message)


# -- Rate and throttle time ---------------------------------------------------------------
def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    r = Rate(11, 1000)
    r.record(1000.0, 0)
    assert r.window_size_ms(0) == 10_000 and r.measure(0) == pytest.approx(100.0)
    r.record(1000.0, 15_500)  # the first sample is idle for 11 s: purged
    assert r.measure(15_500) == pytest.approx(100.0)
    assert r.window_size_ms(40_000) == 10_000 and r.measure(40_000) == 0.0  # everything expired


def test_rate_over_a_long_steady_stream() -> None:
    r = Rate(11, 1000)
    for t in range(0, 60_000, 100):
        r.record(100.0, t)  # 1000 per second
    assert r.measure(59_900) == pytest.approx(1000.0, rel=0.1)
    assert 10_000 <= r.window_size_ms(59_900) <= 11_000


def test_throttle_time_is_kafkas() -> None:
    assert throttle_ms(2000.0, 1000.0, 10_000) == 10_000  # (O - T) / T * W
    assert throttle_ms(1500.0, 1000.0, 10_500) == 5250
    assert throttle_ms(1000.0, 1000.0, 10_000) == 0
    assert throttle_ms(3.0, 2.0, 1) == 1 and throttle_ms(7.0, 2.0, 1) == 3  # Java's Math.round: half up


# -- ClientQuotaManager ----------------------------------------------------------------------
LEVELS = [(((U, "alice"), (C, "app")), 1.0), (((U, "alice"), (C, None)), 2.0), (((U, "alice"),), 3.0),
          (((U, None), (C, "app")), 4.0), (((U, None), (C, None)), 5.0), (((U, None),), 6.0),
          (((C, "app"),), 7.0), (((C, None),), 8.0)]
TAGS = [("alice", "app"), ("alice", "app"), ("alice", ""), ("alice", "app"), ("alice", "app"), ("alice", ""),
        ("", "app"), ("", "app")]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_quota_applies(level: int) -> None:
    img = image_of(*((e, PRODUCE, v) for e, v in LEVELS[level:]))
    m = ClientQuotaManager(PRODUCE, lambda: img)
    assert m.metric_tags("alice", "app") == TAGS[level]
    assert m.quota("alice", "app") == LEVELS[level][1]


def test_no_quota_records_nothing() -> None:
    img = image_of((((U, "alice"),), "consumer_byte_rate", 1.0))
    m = ClientQuotaManager(PRODUCE, lambda: img)
    assert m.record("alice", "app", 1e9, 0) == 0 and m.sensors == {}
    assert m.max_value_in_window("alice", "app") is None
    assert m.quota("bob", "app") is None


def test_throttle_and_unrecord() -> None:
    img = image_of((((C, "app"),), PRODUCE, 1000.0))
    m = ClientQuotaManager(PRODUCE, lambda: img)
    assert m.record("u", "app", 5000.0, 0) == 0  # 500/s over the 10 s minimum window
    assert m.record("u", "app", 10_000.0, 0) == 5000  # 1500/s: (1500 - 1000) / 1000 * 10 s
    assert m.sensors[("", "app")].throttled == 1
    m.unrecord("u", "app", 10_000.0, 0)
    assert m.record("u", "app", 0.0, 0) == 0
    assert m.max_value_in_window("u", "app") == 10_000.0  # quota x (samples - 1) x window
    assert m.record("u", "other", 1e9, 0) == 0  # another client id: no quota


def test_a_client_id_quota_is_shared_a_default_is_per_entity() -> None:
    img = image_of((((C, "app"),), PRODUCE, 1000.0), (((U, None),), "consumer_byte_rate", 1000.0))
    produce = ClientQuotaManager(PRODUCE, lambda: img)
    produce.record("alice", "app", 8000.0, 0)
    assert produce.record("bob", "app", 8000.0, 0) > 0  # alice's bytes count against bob too
    fetch = ClientQuotaManager("consumer_byte_rate", lambda: img)
    fetch.record("alice", "x", 8000.0, 0)
    assert fetch.record("bob", "x", 8000.0, 0) == 0  # each user has its own default quota
    assert set(fetch.sensors) == {("alice", ""), ("bob", "")}


def test_request_quota_throttle_is_capped_at_one_window() -> None:
    img = image_of((((U, "alice"),), "request_percentage", 1.0))
    quotas = ClientQuotas(lambda: img, samples=11, window_s=1)
    assert quotas.request.record("alice", "c", 10_000.0, 0) == 1000


def test_idle_sensors_expire() -> None:
    img = image_of((((C, None),), PRODUCE, 1000.0))
    m = ClientQuotaManager(PRODUCE, lambda: img)
    for i in range(5):
        m.record("u", f"client-{i}", 1.0, 0)
    assert len(m.sensors) == 5
    m.record("u", "late", 1.0, INACTIVE_SENSOR_EXPIRY_MS)
    assert set(m.sensors) == {("", "late")}


def test_a_client_that_honours_throttle_times_converges_to_its_quota() -> None:
    """Simulated time: a producer sends 50 KB requests back to back, waiting out each
    throttle time (as KIP-219 clients and the muted channel make it); over two minutes
    its rate is the quota within 15%."""
    quota = 100_000.0
    img = image_of((((C, "noisy"),), PRODUCE, quota))
    m = ClientQuotaManager(PRODUCE, lambda: img)
    now, sent, throttles = 0, 0, 0
    while now < 120_000:
        delay = m.record("u", "noisy", 50_000.0, now)
        sent += 50_000
        throttles += delay > 0
        now += 5 + delay  # 5 ms per round trip
    assert throttles > 50
    assert sent / (now / 1000) == pytest.approx(quota, rel=0.15)


def test_user_of_principal() -> None:
    assert user_of("User:alice") == "alice" and user_of("User:ANONYMOUS") == "ANONYMOUS"
    assert user_of("CN=x,O=y") == "CN=x,O=y"
