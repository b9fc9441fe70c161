"""Share session cache: epochs, full/incremental/final contexts, forgotten topics."""

from __future__ import annotations

import uuid

import pytest

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
