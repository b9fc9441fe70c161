"""Share session cache: epochs, full/incremental/final contexts, forgotten topics."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.share.session import (
    INVALID_REQUEST,
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    SessionError,
    ShareSessionCache,
    next_epoch,
)

T1, T2 = uuid.uuid4(), uuid.uuid4()


def err(fn, *a):
    with pytest.raises(SessionError) as e:
        fn(*a)
    return e.value.error_code


def test_open_incremental_forget_and_close():
    c = ShareSessionCache()
    ctx = c.fetch_context("g", "m", 0, [(T1, 0)], [], False, 0)
    assert ctx.full and ctx.partitions == ((T1, 0),)
    ctx = c.fetch_context("g", "m", 1, [(T2, 3)], [], True, 1)
    assert ctx.kind == "incremental" and ctx.partitions == ((T1, 0), (T2, 3))
    ctx = c.fetch_context("g", "m", 2, [], [(T1, 0)], False, 2)
    assert ctx.partitions == ((T2, 3),)
    assert c.acknowledge_context("g", "m", 3, 3) is False
    assert c.fetch_context("g", "m", 4, [], [], False, 4).partitions == ((T2, 3),)
    ctx = c.fetch_context("g", "m", -1, [], [], True, 5)
    assert ctx.kind == "final" and ctx.partitions == ()
    assert c.acknowledge_context("g", "m", -1, 5) is True


def test_epoch_errors():
    c = ShareSessionCache()
    assert err(c.fetch_context, "g", "m", 1, [], [], False, 0) == SHARE_SESSION_NOT_FOUND
    assert err(c.fetch_context, "g", "m", -1, [], [], False, 0) == SHARE_SESSION_NOT_FOUND
    assert err(c.acknowledge_context, "g", "m", 1, 0) == SHARE_SESSION_NOT_FOUND
    assert err(c.acknowledge_context, "g", "m", 0, 0) == INVALID_SHARE_SESSION_EPOCH
    assert err(c.fetch_context, "g", "m", 0, [(T1, 0)], [], True, 0) == INVALID_REQUEST
    c.fetch_context("g", "m", 0, [(T1, 0)], [], False, 0)
    assert err(c.fetch_context, "g", "m", 5, [], [], False, 0) == INVALID_SHARE_SESSION_EPOCH
    assert err(c.fetch_context, "g", "m", -1, [(T1, 0)], [], False, 0) == INVALID_REQUEST
    # a new initial request replaces the session, restarting at epoch 1
    c.fetch_context("g", "m", 1, [], [], False, 0)
    c.fetch_context("g", "m", 0, [(T2, 0)], [], False, 0)
    assert c.get("g", "m").epoch == 1 and list(c.get("g", "m").partitions) == [(T2, 0)]


def test_limit_and_epoch_wrap():
    c = ShareSessionCache(max_sessions=1)
    c.fetch_context("g", "a", 0, [], [], False, 0)
    assert err(c.fetch_context, "g", "b", 0, [], [], False, 0) == SHARE_SESSION_LIMIT_REACHED
    c.fetch_context("g", "a", 0, [], [], False, 0)  # re-opening one's own session is fine
    assert next_epoch(2**31 - 1) == 1


# -- property: the cache against a plain model of Kafka's epoch rules ---------------------------

PARTS = [(T1, 0), (T1, 1), (T2, 0)]
steps = st.lists(st.tuples(
    st.sampled_from(["fetch", "ack"]), st.sampled_from(["a", "b"]), st.sampled_from([-1, 0, 1, 2, 3, 7]),
    st.lists(st.sampled_from(PARTS), max_size=2), st.lists(st.sampled_from(PARTS), max_size=2), st.booleans(),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_property_epochs_follow_the_rules(ops):
    c = ShareSessionCache()
    model: dict[str, tuple[int, list]] = {}  # member -> (expected epoch, partitions in order)
    for kind, member, epoch, parts, forget, acks in ops:
        if epoch > 0 and member in model and acks:  # half of the time, send the right epoch
            epoch = model[member][0]
        if kind == "fetch":
            if epoch == -1:
                want = INVALID_REQUEST if parts else (None if member in model else SHARE_SESSION_NOT_FOUND)
            elif epoch == 0:
                want = INVALID_REQUEST if acks else None
            else:
                want = SHARE_SESSION_NOT_FOUND if member not in model else (
                    None if model[member][0] == epoch else INVALID_SHARE_SESSION_EPOCH)
            try:
                ctx = c.fetch_context("g", member, epoch, parts, forget, acks, 0)
            except SessionError as e:
                assert e.error_code == want
                continue
            assert want is None
            if epoch == 0:
                model[member] = (1, list(dict.fromkeys(parts)))
                assert ctx.full
            elif epoch > 0:
                ps = model[member][1]
                ps += [p for p in dict.fromkeys(parts) if p not in ps]  # a partition named twice counts once
                ps = [p for p in ps if p not in forget]
                model[member] = (next_epoch(epoch), ps)
                assert ctx.kind == "incremental"
            else:
                assert ctx.kind == "final" and ctx.partitions == ()
                continue
            assert list(ctx.partitions) == model[member][1]
        else:
            if epoch == 0:
                want = INVALID_SHARE_SESSION_EPOCH
            elif member not in model:
                want = SHARE_SESSION_NOT_FOUND
            elif epoch == -1 or model[member][0] == epoch:
                want = None
            else:
                want = INVALID_SHARE_SESSION_EPOCH
            try:
                final = c.acknowledge_context("g", member, epoch, 0)
            except SessionError as e:
                assert e.error_code == want
                continue
            assert want is None and final == (epoch == -1)
            if not final:
                model[member] = (next_epoch(epoch), model[member][1])
