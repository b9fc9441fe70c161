"""Prometheus exporter: consumer lag, time lag, status and partition offsets.

``hightide exporter`` serves ``GET /metrics``. Every scrape is answered from one
:class:`~hightide.monitoring.monitor.Snapshot` (committed offsets and end offsets read together:
hightide's OffsetFetch extension in one round trip, OffsetFetch *then* ListOffsets on
other brokers), so all series of a scrape describe the same moment; scrapes closer
together than ``min_interval_s`` share a snapshot. Successive snapshots form the status
window and the end-offset history used for interpolated time lag.

Metric and label names follow kafka_exporter (``kafka_consumergroup_lag{consumergroup,
topic,partition}``, ...) and kafka-lag-exporter (``kafka_consumergroup_group_lag_seconds
{cluster_name,group,...}``, ...) so existing dashboards and alerts work; hightide's own
series start with ``hightide_``. The full list is in ``docs/lag.md``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..client import AdminClient
from ..lag import Status, StatusRules
from ..lag.share import desired_consumers, group_share_lag
from .monitor import LagMonitor, Snapshot
from .partitions import PartitionState, partition_families, partition_snapshot
from .quorum import QuorumSnapshot, quorum_families, quorum_snapshot
from .quotas import QuotaSnapshot, quota_families, quota_snapshot
from .share_monitor import ShareSnapshot, share_snapshot

__all__ = ["Exporter", "SnapshotCollector"]

log = logging.getLogger("hightide.exporter")
_STATUSES = [s.value for s in Status]


class SnapshotCollector:
    """A prometheus-client collector that renders the latest :class:`Snapshot`."""

    def __init__(self, cluster_name: str = "default", share_scale_targets: tuple[int, ...] = ()) -> None:
        self.cluster_name = cluster_name
        #: Targets (share lag per consumer) of the ``hightide_sharegroup_desired_consumers`` series.
        self.share_scale_targets = share_scale_targets
        self.snapshot: Snapshot | None = None
        self.share: ShareSnapshot | None = None  # share groups (None: not supported or not read)
        self.quorum: QuorumSnapshot | None = None  # metadata quorum (None: no DescribeQuorum)
        self.quotas: QuotaSnapshot | None = None  # client quotas (None: DescribeClientQuotas refused)
        self.replication: list[PartitionState] | None = None  # leaders, replicas, ISR (None: not read)
        self.scrape_error = 0.0

    def collect(self) -> Iterator[GaugeMetricFamily]:  # noqa: C901 - a flat list of families
        snap, cn = self.snapshot, self.cluster_name
        up = GaugeMetricFamily("hightide_exporter_up", "1 if the last snapshot succeeded, else 0")
        up.add_metric([], 0.0 if self.scrape_error or snap is None else 1.0)
        yield up
        if snap is None:
            return
        g = _Families()
        g.gauge("kafka_brokers", "Number of brokers in the cluster", []).add_metric([], snap.brokers)
        g.gauge("hightide_exporter_scrape_duration_seconds", "Time taken by the last snapshot", []).add_metric(
            [], snap.duration_s)
        g.gauge("kafka_consumergroup_poll_time_ms", "Time taken by the last snapshot (kafka-lag-exporter)",
                ["cluster_name"]).add_metric([cn], snap.duration_s * 1000)
        g.gauge("hightide_exporter_scrape_round_trips", "Kafka requests sent for the last snapshot", []).add_metric(
            [], snap.round_trips)
        g.gauge("hightide_exporter_snapshot_timestamp_seconds", "When the last snapshot was read", []).add_metric(
            [], snap.time_ms / 1000)
        per_topic: defaultdict[str, int] = defaultdict(int)
        for tp, p in sorted(snap.partitions.items()):
            per_topic[tp.topic] += 1
            lbl, lbl_c = [tp.topic, str(tp.partition)], [cn, tp.topic, str(tp.partition)]
            tpl, tplc = ["topic", "partition"], ["cluster_name", "topic", "partition"]
            if p.high_watermark is not None:
                g.gauge("kafka_topic_partition_current_offset", "High watermark of a partition", tpl).add_metric(
                    lbl, p.high_watermark)
                g.gauge("kafka_partition_latest_offset", "High watermark (kafka-lag-exporter)", tplc).add_metric(
                    lbl_c, p.high_watermark)
            if p.log_start_offset is not None:
                g.gauge("kafka_topic_partition_oldest_offset", "Log start offset of a partition", tpl).add_metric(
                    lbl, p.log_start_offset)
                g.gauge("kafka_partition_earliest_offset", "Log start offset (kafka-lag-exporter)", tplc).add_metric(
                    lbl_c, p.log_start_offset)
            mt = p.max_timestamp
            if mt is not None and mt.timestamp >= 0:
                g.gauge("hightide_topic_partition_max_timestamp_seconds",
                        "Largest record timestamp in the partition (ListOffsets max-timestamp spec)", tpl
                        ).add_metric(lbl, mt.timestamp / 1000)
                g.gauge("hightide_topic_partition_max_timestamp_offset",
                        "Offset of the record with the largest timestamp", tpl).add_metric(lbl, mt.offset)
                g.gauge("hightide_topic_partition_idle_seconds",
                        "Seconds since the largest record timestamp (partition liveness)", tpl
                        ).add_metric(lbl, max(0.0, (snap.time_ms - mt.timestamp) / 1000))
        for topic, n in sorted(per_topic.items()):
            g.gauge("kafka_topic_partitions", "Number of partitions of a topic", ["topic"]).add_metric([topic], n)
        for group, rep in sorted(snap.groups.items()):
            self._group(g, group, rep)
        if self.share is not None:
            for group, srep in sorted(self.share.groups.items()):
                _share_group(g, srep, self.share_scale_targets)
        yield from g.all()
        yield from partition_families(self.replication)
        yield from quorum_families(self.quorum)
        yield from quota_families(self.quotas)

    def _group(self, g: _Families, group: str, rep: Any) -> None:
        cn = self.cluster_name
        if rep.members is not None:
            g.gauge("kafka_consumergroup_members", "Members of a consumer group", ["consumergroup"]).add_metric(
                [group], len(rep.members))
        if rep.status is not None:
            fam = g.gauge("hightide_consumergroup_status",
                          "Burrow-style group status: 1 for the current status, 0 for the others",
                          ["consumergroup", "status"])
            for s in _STATUSES:
                fam.add_metric([group, s], 1.0 if rep.status.status.value == s else 0.0)
            g.gauge("hightide_consumergroup_status_code", "Group status as a number: 0 OK, 1 WARN, 2 REWIND, "
                    "3 STALL, 4 STOP, 5 ERR", ["consumergroup"]).add_metric([group], rep.status.status.severity)
        sums: defaultdict[str, int] = defaultdict(int)
        offs: defaultdict[str, int] = defaultdict(int)
        max_lag, max_secs = None, None
        estimated = False
        for p in rep.partitions:
            part = str(p.partition)
            base = [group, p.topic, part]
            m = p.member
            lag_lbl = [cn, group, p.topic, part, m.host if m else "", m.consumer_id if m else "",
                       m.client_id if m else ""]
            lag_names = ["cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id"]
            cgl = ["consumergroup", "topic", "partition"]
            c = p.offsets.committed
            if c is not None:
                g.gauge("kafka_consumergroup_current_offset", "Committed offset of a group on a partition",
                        cgl).add_metric(base, c)
                g.gauge("kafka_consumergroup_group_offset", "Committed offset (kafka-lag-exporter)",
                        lag_names).add_metric(lag_lbl, c)
                offs[p.topic] += c
            if p.lag is not None:
                g.gauge("kafka_consumergroup_lag", "Offset lag: end offset - committed offset (raw, may be negative)",
                        cgl).add_metric(base, p.lag)
                g.gauge("kafka_consumergroup_group_lag", "Offset lag (kafka-lag-exporter)", lag_names).add_metric(
                    lag_lbl, p.lag)
                sums[p.topic] += max(0, p.lag)
                max_lag = p.lag if max_lag is None else max(max_lag, p.lag)
            est = p.offsets.estimated_lag
            if p.lag is None and est is not None:
                g.gauge("hightide_consumergroup_estimated_lag",
                        "Partitions without a commit: the lag estimated from where auto.offset.reset starts the "
                        "group (the log start by default); counted in the sums, flagged by "
                        "hightide_consumergroup_lag_estimated", cgl).add_metric(base, est)
                sums[p.topic] += est
                estimated = True
            if p.time_lag is not None and p.time_lag.ms is not None:
                secs = p.time_lag.ms / 1000
                g.gauge("kafka_consumergroup_group_lag_seconds",
                        "Time lag: age of the oldest unread record (best available method)",
                        lag_names).add_metric(lag_lbl, secs)
                max_secs = secs if max_secs is None else max(max_secs, secs)
            for t in p.time_lags:
                if t.ms is not None:
                    g.gauge("hightide_consumergroup_time_lag_seconds", "Time lag by each method",
                            [*cgl, "method", "certainty"]).add_metric(
                        [*base, t.method.value, t.certainty.value], t.ms / 1000)
            if p.status is not None:
                g.gauge("hightide_consumergroup_partition_status",
                        "Burrow-style partition status (the series with the current status is 1)",
                        [*cgl, "status"]).add_metric([*base, p.status.status.value], 1.0)
            for a in p.offsets.anomalies:
                g.gauge("hightide_consumergroup_lag_anomaly",
                        "Anomalies: no_commit, end_unknown, committed_past_end, committed_before_log_start, "
                        "stale_end, tail_unprobed",
                        [*cgl, "anomaly"]).add_metric([*base, a.value], 1.0)
            if p.offsets.pending is not None:
                g.gauge("hightide_consumergroup_pending_records",
                        "Offsets held back by open transactions (high watermark - last stable offset); "
                        "not in a read_committed group's lag", cgl).add_metric(base, p.offsets.pending)
            if p.offsets.invisible_tail:
                g.gauge("hightide_consumergroup_invisible_tail",
                        "Offsets between the commit and the end holding only transaction markers (or aborted "
                        "records for read_committed): the group is caught up, its lag is 0", cgl).add_metric(
                    base, p.offsets.invisible_tail)
            if p.offsets.lost:
                g.gauge("hightide_consumergroup_lost_records",
                        "Records deleted (retention) before the group read them", cgl).add_metric(base, p.offsets.lost)
        for topic in sorted(set(sums) | set(offs)):
            g.gauge("kafka_consumergroup_lag_sum", "Sum of positive lag over a topic's partitions",
                    ["consumergroup", "topic"]).add_metric([group, topic], sums[topic])
            g.gauge("kafka_consumergroup_current_offset_sum", "Sum of committed offsets over a topic",
                    ["consumergroup", "topic"]).add_metric([group, topic], offs[topic])
            g.gauge("kafka_consumergroup_group_topic_sum_lag", "Sum of lag over a topic (kafka-lag-exporter)",
                    ["cluster_name", "group", "topic"]).add_metric([cn, group, topic], sums[topic])
        g.gauge("kafka_consumergroup_group_sum_lag", "Sum of lag over a group (kafka-lag-exporter)",
                ["cluster_name", "group"]).add_metric([cn, group], sum(sums.values()))
        g.gauge("hightide_consumergroup_lag_estimated", "1 when the group's lag sums include estimates "
                "(partitions without a commit)", ["consumergroup"]).add_metric([group], 1.0 if estimated else 0.0)
        if max_lag is not None:
            g.gauge("kafka_consumergroup_group_max_lag", "Largest partition lag of a group",
                    ["cluster_name", "group"]).add_metric([cn, group], max_lag)
        if max_secs is not None:
            g.gauge("kafka_consumergroup_group_max_lag_seconds", "Largest partition time lag of a group",
                    ["cluster_name", "group"]).add_metric([cn, group], max_secs)


_SHARE_PART = ["sharegroup", "topic", "partition"]


def _share_group(g: _Families, rep: Any, scale_targets: tuple[int, ...] = ()) -> None:
    """Share-group series (seed 002): lag = LEO - SPSO - DeliveryCompleteCount per share
    partition, and the offsets of its in-flight window by persisted state; per scale
    target, the consumers an autoscaler should run (:func:`~hightide.lag.share.desired_consumers`
    of the group's lag, :func:`~hightide.lag.share.group_share_lag`)."""
    if rep.error is not None:
        g.gauge("hightide_sharegroup_error", "1 if the share group could not be read", ["sharegroup"]).add_metric(
            [rep.group], 1.0)
        return
    if rep.members is not None:
        g.gauge("hightide_sharegroup_members", "Members of a share group", ["sharegroup"]).add_metric(
            [rep.group], rep.members)
    if rep.state is not None:
        g.gauge("hightide_sharegroup_state", "Share group state (the series with the current state is 1)",
                ["sharegroup", "state"]).add_metric([rep.group, rep.state], 1.0)
    sums: defaultdict[str, int] = defaultdict(int)
    for p in rep.partitions:
        lbl = [rep.group, p.topic, str(p.partition)]
        if p.start_offset is not None:
            g.gauge("hightide_sharegroup_start_offset", "Share-partition start offset (SPSO)",
                    _SHARE_PART).add_metric(lbl, p.start_offset)
        if p.lag is not None:
            g.gauge("hightide_sharegroup_lag", "Share-partition lag: LEO - SPSO - DeliveryCompleteCount",
                    _SHARE_PART).add_metric(lbl, p.lag)
            sums[p.topic] += max(0, p.lag)
        c = p.counts
        if c is not None:
            fam = g.gauge("hightide_sharegroup_records", "Offsets of a share partition from the SPSO to the log end "
                          "by persisted state: available, acknowledged, archived, and not_persisted (past the persisted window: "
                          "never delivered, or acquired since the last state write)",
                          [*_SHARE_PART, "state"])
            for state, n in (("available", c.available), ("acknowledged", c.acknowledged),
                             ("archived", c.archived), ("not_persisted", c.not_persisted)):
                if n is not None:
                    fam.add_metric([*lbl, state], n)
    for topic, total in sorted(sums.items()):
        g.gauge("hightide_sharegroup_lag_sum", "Sum of share-partition lag over a topic",
                ["sharegroup", "topic"]).add_metric([rep.group, topic], total)
    group_lag = group_share_lag(p.lag for p in rep.partitions)
    for target in scale_targets:
        want = desired_consumers(group_lag, target)
        if want is not None:
            g.gauge("hightide_sharegroup_desired_consumers", "Share consumers to run: ceil(share lag of the group / "
                    "target share lag per consumer)", ["sharegroup", "target"]).add_metric(
                [rep.group, str(target)], want)


class _Families:
    """Metric families created on first use, yielded in creation order."""

    def __init__(self) -> None:
        self._f: dict[str, GaugeMetricFamily] = {}

    def gauge(self, name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        f = self._f.get(name)
        if f is None:
            f = self._f[name] = GaugeMetricFamily(name, doc, labels=labels)
        return f

    def all(self) -> Iterator[GaugeMetricFamily]:
        yield from self._f.values()


class Exporter:
    """Serves ``/metrics`` on ``listen`` from snapshots of ``bootstrap``."""

    def __init__(self, bootstrap: str, *, listen: tuple[str, int] = ("0.0.0.0", 9308),
                 groups: list[str] | None = None, rules: StatusRules = StatusRules(),
                 min_interval_s: float = 1.0, use_extensions: bool = True, cluster_name: str = "default",
                 scrape_timeout_s: float = 9.0, isolation_level: str = "read_uncommitted",
                 client_options: dict[str, Any] | None = None, uncommitted_reset: str | None = "earliest",
                 share_scale_targets: tuple[int, ...] = ()) -> None:
        self.bootstrap, self.listen, self.groups = bootstrap, listen, groups
        #: AdminClient keyword arguments from --command-config (security, client id, timeouts).
        self.client_options = dict(client_options or {})
        self.isolation_level = isolation_level
        """read_committed: lag to the last stable offset (docs/lag.md, transactions)."""
        self.uncommitted_reset = uncommitted_reset
        """The auto.offset.reset assumed for partitions without a commit (``--assume-reset``,
        :attr:`LagMonitor.uncommitted_reset`)."""
        self.scrape_timeout_s = scrape_timeout_s
        """A snapshot that takes longer is abandoned: the scrape answers ``up 0`` in time
        (Prometheus' default scrape timeout is 10 s; a scrape's own
        ``X-Prometheus-Scrape-Timeout-Seconds`` header shortens it)."""
        self.rules, self.min_interval_s, self.use_extensions = rules, min_interval_s, use_extensions
        self.collector = SnapshotCollector(cluster_name, tuple(share_scale_targets))
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._admin: AdminClient | None = None
        self._monitor: LagMonitor | None = None
        self._lock = asyncio.Lock()
        self._last = 0.0
        self.server: asyncio.Server | None = None

    async def refresh(self, timeout_s: float | None = None) -> None:
        """Take a new snapshot unless the last one is younger than ``min_interval_s``.

        Guarantees: returns within ``timeout_s`` (default :attr:`scrape_timeout_s`) plus
        the time to close the admin client; when the snapshot fails or times out, the
        collector holds no snapshot, so the next render is ``hightide_exporter_up 0``
        and nothing else — never the last good (stale) series, as kafka_exporter."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.scrape_timeout_s)
        try:  # asyncio.timeout, never wait_for (on 3.11 it can swallow a cancellation)
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self._lock.acquire()
        except TimeoutError:  # another scrape is still taking the snapshot: this one reports it as down
            self._fail("a snapshot is still in progress")
            return
        try:
            if self.collector.snapshot is not None and time.monotonic() - self._last < self.min_interval_s:
                return
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._snapshot()
                self.collector.scrape_error = 0.0
            except Exception as exc:  # noqa: BLE001 - reported as hightide_exporter_up 0
                self._fail("timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}")
                admin, self._admin = self._admin, None  # the monitor (status windows, last known ends) stays
                if admin is not None:
                    await admin.close()
            self._last = time.monotonic()
        finally:
            self._lock.release()

    async def _snapshot(self) -> None:
        if self._admin is None:
            admin = AdminClient(self.bootstrap, use_extensions=self.use_extensions,
                                **{"client_id": "hightide-exporter", "request_timeout_s": 10.0,
                                   **self.client_options})
            self._admin = admin  # (closed by refresh if start() fails or times out)
            await admin.start()
            if self._monitor is None:
                self._monitor = LagMonitor(admin, rules=self.rules, isolation_level=self.isolation_level,
                                           uncommitted_reset=self.uncommitted_reset)
            self._monitor.admin = admin
        assert self._monitor is not None
        self.collector.snapshot = await self._monitor.snapshot(self.groups, all_topics=True)
        self.collector.share = await share_snapshot(self._admin, self.groups)
        self.collector.quorum = await quorum_snapshot(self._admin)
        self.collector.quotas = await quota_snapshot(self._admin)
        self.collector.replication = await partition_snapshot(self._admin)

    def _fail(self, why: str) -> None:
        log.warning("snapshot failed: %s", why)
        self.collector.scrape_error = 1.0
        self.collector.snapshot = self.collector.share = self.collector.quorum = self.collector.quotas = None
        self.collector.replication = None

    async def render(self, timeout_s: float | None = None) -> bytes:
        await self.refresh(timeout_s)
        return generate_latest(self.registry)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            path = path.split("?", 1)[0]
            if method != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, await self.render(self._timeout(head))
            elif path == "/":
                status, ctype, body = "200 OK", "text/html", b'<a href="/metrics">/metrics</a>\n'
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def _timeout(self, head: bytes) -> float:
        """The time a scrape may take: Prometheus' X-Prometheus-Scrape-Timeout-Seconds
        less half a second for the answer's way back, capped by :attr:`scrape_timeout_s`."""
        for line in head.split(b"\r\n")[1:]:
            name, _, val = line.partition(b":")
            if name.strip().lower() == b"x-prometheus-scrape-timeout-seconds":
                try:
                    return max(0.1, min(self.scrape_timeout_s, float(val.strip()) - 0.5))
                except ValueError:
                    break
        return self.scrape_timeout_s

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, *self.listen)
        self.listen = (self.listen[0], self.server.sockets[0].getsockname()[1])
        log.info("serving metrics on http://%s:%d/metrics", *self.listen)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        if self._admin is not None:
            await self._admin.close()

    async def run_forever(self) -> None:
        """Serve until SIGINT/SIGTERM."""
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
