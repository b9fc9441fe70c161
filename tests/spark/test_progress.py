"""The progress listener's input: what a progress event asks to commit, read from the
sources' end offsets alone (pure, no Spark: the same on classic and Connect), and what
``register`` does when a session refuses the listener."""

from __future__ import annotations

import json
import warnings

import pytest

import hightide.spark
from hightide.client import TopicPartition as TP
from hightide.spark.options import PROGRESS_KEY, SourceOptions, from_offsets_dict, progress_target, to_offsets_dict
from hightide.spark.progress import commits_of_progress

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "a"}


def _end(opts: dict, offsets: dict) -> str:
    o = SourceOptions.parse({**BASE, **opts}, streaming=True)
    return json.dumps(to_offsets_dict(offsets, o.progress_entry()))


def test_offsets_carry_the_commit_target_and_stay_readable():
    offsets = {TP("a", 0): 5, TP("a", 1): 7}
    doc = json.loads(_end({}, offsets))
    assert list(doc) == ["a", PROGRESS_KEY]
    assert doc[PROGRESS_KEY] == {"servers": "h:9092", "group": None, "prefix": "spark-hightide"}
    assert from_offsets_dict(doc) == offsets  # the entry is not an offset
    target, ends = progress_target(json.dumps(doc))
    assert ends == offsets and target.group_for("q1") == "spark-hightide-q1"
    target, _ = progress_target(_end({"groupId": "ingest", "groupIdPrefix": "x"}, offsets))
    assert target.group_for("q1") == "ingest"
    target, _ = progress_target(_end({"groupIdPrefix": "etl"}, offsets))
    assert target.group_for("q1") == "etl-q1"
    # commitOffsets=false: no entry, nothing to commit; offsets from older checkpoints too
    assert PROGRESS_KEY not in json.loads(_end({"commitOffsets": "false"}, offsets))
    assert progress_target(json.dumps(to_offsets_dict(offsets))) is None


@pytest.mark.parametrize("other", [None, "", "5", "null", "[1, 2]", '{"t": {"0": 3}}', "not json"])
def test_other_sources_commit_nothing(other):
    assert progress_target(other) is None
    assert commits_of_progress("q", [{"endOffset": other}]) == {}


def test_one_event_commits_per_cluster_and_group():
    sources = [
        {"endOffset": _end({}, {TP("a", 0): 5})},
        {"endOffset": _end({}, {TP("a", 0): 3, TP("a", 1): 2})},  # same group: larger offset wins
        {"endOffset": _end({"groupId": "g2", "subscribe": "b"}, {TP("b", 0): 9})},
        {"endOffset": _end({"kafka.bootstrap.servers": "other:9092"}, {TP("a", 0): 1})},
        {"endOffset": '{"rate": 17}'},
    ]
    assert commits_of_progress("q1", sources) == {
        ("h:9092", "spark-hightide-q1"): {TP("a", 0): 5, TP("a", 1): 2},
        ("h:9092", "g2"): {TP("b", 0): 9},
        ("other:9092", "spark-hightide-q1"): {TP("a", 0): 1},
    }


class _Refusing:
    """A session whose data-source registration works but whose streams refuse
    listeners (as an old or restricted Connect server may)."""

    class dataSource:  # noqa: N801 - the attribute name Spark uses
        registered: list = []

        @classmethod
        def register(cls, ds):
            cls.registered.append(ds)

    class streams:  # noqa: N801
        @staticmethod
        def addListener(listener):  # noqa: N802
            raise RuntimeError("listeners are disabled here")


def test_register_says_what_is_unavailable():
    session = _Refusing()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = hightide.spark.register(session)
    assert reg.progress_listener is None and not reg.connect
    assert len(reg.unavailable) == 1 and "listeners are disabled here" in reg.unavailable[0]
    assert "commit no consumer-group offsets" in reg.unavailable[0]
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == [
        f"hightide.spark.register: not available: {reg.unavailable[0]}"]
    assert _Refusing.dataSource.registered  # the source itself is registered
    # without progress commits nothing is missing
    assert hightide.spark.register(session, commit_progress=False).unavailable == []


def test_register_fails_loudly_without_python_data_sources():
    class Old:
        pass
    with pytest.raises(RuntimeError, match="Python data sources need Spark >= 4.0"):
        hightide.spark.register(Old())
