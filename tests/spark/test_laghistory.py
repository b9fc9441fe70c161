"""``hightide spark lag-history`` against an oracle: the commits read back from
``__consumer_offsets`` without Spark, and hightide's own lag math
(:func:`hightide.lag.time_lag_interpolated` over :class:`hightide.lag.OffsetHistory`)."""

from __future__ import annotations

import collections
import json
import time

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hightide.cli import main as cli
from hightide.client import TopicPartition
from hightide.group.records import OFFSETS_TOPIC, OffsetKey, decode_key, decode_offset_value
from hightide.lag import OffsetHistory, time_lag_interpolated
from hightide.protocol.records import decode_records, iter_headers
from hightide.spark.kafkaio import KafkaIO
from hightide.spark.laghistory import sample_end_offsets

from .conftest import create_topic, produce

pytestmark = pytest.mark.integration


def _commits_oracle(bootstrap: str, groups: set[str]) -> list[tuple]:
    """(group, topic, partition, committed or None, commit_ms, log_offset) of every
    offset commit/deletion of ``groups``, read with plain Fetch + the record codecs."""
    out = []
    with KafkaIO(bootstrap) as io:
        parts = io.partitions([OFFSETS_TOPIC])[OFFSETS_TOPIC]
        for p in parts:
            tp = TopicPartition(OFFSETS_TOPIC, p)
            end = io.offsets({tp: "latest"})[tp]
            start = io.offsets({tp: "earliest"})[tp]
            if start >= end:
                continue
            for chunk in io.fetch_range(tp, start, end):
                for h in iter_headers(chunk.records):
                    if h.is_control:
                        continue
                    batch = chunk.records[h.position:h.position + h.size]
                    for r in decode_records(batch):
                        key = decode_key(r.key) if r.key else None
                        if not isinstance(key, OffsetKey) or key.group not in groups or r.offset >= end:
                            continue
                        if r.value is None:
                            out.append((key.group, key.topic, key.partition, None, r.timestamp, r.offset))
                        else:
                            v = decode_offset_value(r.value)
                            out.append((key.group, key.topic, key.partition, v.offset, v.commit_timestamp, r.offset))
    return out


def _expected(commits: list[tuple], samples: list[tuple]) -> list[tuple]:
    by_tp = collections.defaultdict(list)
    for s in samples:
        by_tp[(s[0], s[1])].append((s[2], s[3]))
    rows = []
    for g in sorted({c[0] for c in commits}):
        for (topic, part), pts in sorted(by_tp.items()):
            mine = [c for c in commits if c[0] == g and (c[1], c[2]) == (topic, part)]
            for t, end in sorted(pts):
                before = [c for c in mine if c[4] <= t]
                if not before:
                    continue
                committed = max(before, key=lambda c: (c[4], c[5]))[3]
                if committed is None:
                    continue  # offsets deleted
                history = OffsetHistory(10**6, sorted(((e, ts) for ts, e in pts if ts <= t), key=lambda x: x[1]))
                tl = time_lag_interpolated(committed, end, history, t)
                rows.append((g, topic, part, t, committed, end, end - committed, tl.ms, tl.certainty.value))
    return rows


@pytest.mark.spark_modes("local", "connect")
def test_lag_history_matches_the_oracle(spark, bootstrap, topic_name, tmp_path):
    create_topic(bootstrap, topic_name, 2)
    samples, out = tmp_path / "samples", tmp_path / "out"
    fast, slow, gone = (f"{name}-{topic_name}" for name in ("fast", "slow", "gone"))
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    with KafkaIO(bootstrap) as io:
        for step in range(6):
            produce(bootstrap, topic_name, [(None, b"x", [], p) for p in (0, 1) for _ in range(20 + 10 * p)])
            sample_end_offsets(bootstrap, samples, topics=[topic_name], io=io)
            ends = io.offsets({tp: "latest" for tp in tps})
            io.commit(fast, {tp: (ends[tp], "") for tp in tps})
            io.commit(slow, {tp: (ends[tp] // 3, "") for tp in tps})  # falls further behind
            if step == 0:
                io.commit(gone, {tp: (ends[tp] - 5, "") for tp in tps})
            if step == 3:
                io.run(io.admin.delete_consumer_group_offsets(gone, [tps[1]]))
            time.sleep(0.03)

    res = CliRunner().invoke(cli, ["spark", "lag-history", "-b", bootstrap, "--samples", str(samples),
                                   "--out", str(out), "--group", fast, "--group", slow, "--group", gone,
                                   "--slo-lag", "60", "--slo-time-lag", "0.05"])
    assert res.exit_code == 0, res.output

    got = sorted(tuple(r.values()) for r in pq.read_table(out / "lag").select(
        ["group", "topic", "partition", "time_ms", "committed", "end_offset", "offset_lag", "time_lag_ms",
         "certainty"]).to_pylist())
    sample_rows = [tuple(r.values()) for r in pq.read_table(samples).to_pylist()]
    assert len(sample_rows) == 2 * 7  # six samples + the job's own
    want = sorted(_expected(_commits_oracle(bootstrap, {fast, slow, gone}), sample_rows))
    assert got == want
    assert {r[0] for r in got} == {fast, slow, gone}
    assert any(r[8] == "estimate" and r[7] > 0 for r in got if r[0] == slow)
    # offsets deleted at step 3: no lag rows for that partition from the next sample on
    step4 = sorted({r[2] for r in sample_rows})[4]
    assert [r for r in got if r[0] == gone and r[2] == 0 and r[3] >= step4]
    assert not [r for r in got if r[0] == gone and r[2] == 1 and r[3] >= step4]

    # the summary: rankings and SLO breaches, from the same rows
    summary = (out / "summary.txt").read_text()
    assert summary in res.output
    ranking = summary.split("worst groups by offset lag")[1].split("\n\n")[0]
    assert ranking.index(slow) < ranking.index(fast)
    per_time = collections.defaultdict(int)
    for r in want:
        per_time[(r[0], r[3])] += r[6]
    breaches = sum(1 for (g, _), lag in per_time.items() if g == slow and lag > 60)
    assert breaches > 0
    assert f"  {slow}: {breaches} of {sum(1 for (g, _) in per_time if g == slow)} samples" in summary
    assert f"  {fast}:" not in summary.split("SLO breaches, offset lag")[1].split("\n\n")[0]
    for png in ("offset_lag.png", "time_lag.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_sample_offsets_command(bootstrap, topic_name, tmp_path):
    create_topic(bootstrap, topic_name, 3)
    produce(bootstrap, topic_name, [(None, b"x", [], p) for p in range(3) for _ in range(p + 1)])
    res = CliRunner().invoke(cli, ["spark", "sample-offsets", "-b", bootstrap, "--out", str(tmp_path / "s"),
                                   "--topic", topic_name, "--count", "2", "--interval", "0.01"])
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["partitions"] for line in res.output.splitlines()] == [3, 3]
    rows = pq.read_table(tmp_path / "s").to_pylist()
    assert len(rows) == 6 and len({r["time_ms"] for r in rows}) == 2
    assert {(r["partition"], r["end_offset"]) for r in rows} == {(0, 1), (1, 2), (2, 3)}


def _expected_with_estimates(commits: list[tuple], samples: list[tuple], reset: str) -> list[tuple]:
    """The oracle of issue 30 item 3: the rows of :func:`_expected` (``committed``,
    ``offset_lag`` set, ``estimated_lag`` None) plus, for every partition a group commits
    to at some point, at each sample from the group's first commit on the topic up to
    (not including) the partition's first commit: ``committed``/``offset_lag`` None,
    ``estimated_lag`` = :func:`hightide.lag.offsets.uncommitted_estimate` (the definition of the
    CLI, exporter and console) and the time lag measured from where ``reset`` starts
    the group, certainty ``estimate`` (or ``lower_bound``).
    ``samples``: ``(topic, partition, time_ms, end, log_start)``."""
    from hightide.lag.offsets import uncommitted_estimate
    rows = [(*r[:7], None, *r[7:]) for r in _expected(commits, [s[:4] for s in samples])]
    by_tp = collections.defaultdict(list)
    for s in samples:
        by_tp[(s[0], s[1])].append(s[2:])
    for g in sorted({c[0] for c in commits}):
        mine = [c for c in commits if c[0] == g and c[3] is not None]
        for topic in sorted({c[1] for c in mine}):
            since = min(c[4] for c in mine if c[1] == topic)
            for part in sorted({c[2] for c in mine if c[1] == topic}):
                first = min(c[4] for c in mine if (c[1], c[2]) == (topic, part))
                pts = by_tp[(topic, part)]
                for t, end, start in sorted(pts):
                    if not since <= t < first:
                        continue
                    est = uncommitted_estimate(end, start, reset)
                    if est is None:
                        continue
                    history = OffsetHistory(10**6, sorted(((e, ts) for ts, e, _ in pts if ts <= t), key=lambda x: x[1]))
                    tl = time_lag_interpolated(end - est, end, history, t)
                    cert = "lower_bound" if tl.certainty.value == "lower_bound" else "estimate"
                    rows.append((g, topic, part, t, None, end, None, est, tl.ms, cert))
    return rows


@pytest.mark.spark_modes("local")
def test_lag_history_counts_partitions_before_their_first_commit(spark, bootstrap, topic_name, tmp_path):
    """Issue 30 item 3: a consumer that reads its partitions one after the other. Before
    the fix the partitions it had not committed yet were left out, and the group's total
    saw-toothed to ~0 each time it moved on; now they count with their estimated lag (from
    the log start for --assume-reset earliest, 0 for latest), flagged as estimates."""
    create_topic(bootstrap, topic_name, 3)
    produce(bootstrap, topic_name, [(None, b"x", [], p) for p in range(3) for _ in range(30)])
    samples = tmp_path / "samples"
    g = f"serial-{topic_name}"
    tps = [TopicPartition(topic_name, p) for p in range(3)]
    with KafkaIO(bootstrap) as io:
        io.run(io.admin.delete_records({tps[2]: 10}))  # p2's log starts at 10
        sample_end_offsets(bootstrap, samples, topics=[topic_name], io=io)  # before the group exists
        for commit in ({tps[0]: 10}, {tps[0]: 30}, {tps[1]: 15}, {tps[1]: 30, tps[2]: 20}):
            time.sleep(0.03)
            io.commit(g, {tp: (o, "") for tp, o in commit.items()})
            time.sleep(0.03)
            sample_end_offsets(bootstrap, samples, topics=[topic_name], io=io)
    totals: dict[str, list[int]] = {}
    for reset in ("earliest", "latest"):
        out = tmp_path / f"out-{reset}"
        args = ["spark", "lag-history", "-b", bootstrap, "--samples", str(samples), "--out", str(out), "--group", g,
                "--no-sample-now"]
        res = CliRunner().invoke(cli, args + ([] if reset == "earliest" else ["--assume-reset", reset]))
        assert res.exit_code == 0, res.output
        by_t = collections.defaultdict(int)
        for r in pq.read_table(out / "lag").to_pylist():
            by_t[r["time_ms"]] += r["offset_lag"] if r["offset_lag"] is not None else r["estimated_lag"]
        totals[reset] = [by_t[t] for t in sorted(by_t)]
        # p0 10 read, then 30; p1 15, then 30 with p2 20: the backlog only goes down
        # (before the fix, whatever the reset: [20, 0, 15, 10], the saw-tooth)
        assert totals[reset] == {"earliest": [20 + 30 + 20, 0 + 30 + 20, 0 + 15 + 20, 0 + 0 + 10],
                                 "latest": [20, 0, 15, 10]}[reset]

    # row by row against the oracle
    sample_rows = [tuple(r.values()) for r in pq.read_table(samples).to_pylist()]
    assert {(r[1], r[4]) for r in sample_rows} == {(0, 0), (1, 0), (2, 10)}  # log start sampled
    commits = _commits_oracle(bootstrap, {g})
    cols = ["group", "topic", "partition", "time_ms", "committed", "end_offset", "offset_lag", "estimated_lag",
            "time_lag_ms", "certainty"]
    for reset in ("earliest", "latest"):
        out = tmp_path / f"out-{reset}"
        got = sorted((tuple(r.values()) for r in pq.read_table(out / "lag").select(cols).to_pylist()),
                     key=lambda r: r[:4])
        assert got == sorted(_expected_with_estimates(commits, sample_rows, reset), key=lambda r: r[:4])
        summary = (out / "summary.txt").read_text()
        assert "(estimate)" in summary.split("worst groups by offset lag")[1].split("\n\n")[0]
