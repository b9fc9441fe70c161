"""``hightide topics ...`` and ``hightide offsets TOPIC``."""

from __future__ import annotations

import time
from typing import Any

import click

from . import main
from ._common import SPEC_HELP, Col, admin_options, emit, iso_ms, parse_spec, run_admin, seconds, terminal_width


@main.group()
def topics() -> None:
    """List, describe, create and delete topics; partition liveness."""


@topics.command("list")
@admin_options
@click.option("--include-internal", is_flag=True, help="Also list __consumer_offsets and co.")
def topics_list(bootstrap_server: str, output: str, include_internal: bool) -> None:
    """Topic names with partition counts."""
    async def go(admin: Any) -> list[dict[str, Any]]:
        md = await admin.metadata()
        return [{"topic": t.name, "partitions": len(t.partitions),
                 "replication_factor": max((len(p.replicas) for p in t.partitions.values()), default=0),
                 "internal": t.is_internal}
                for t in sorted(md.topics.values(), key=lambda t: t.name)
                if include_internal or not t.is_internal]
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("TOPIC", "topic"), Col("PARTITIONS", "partitions"),
                  Col("REPLICATION-FACTOR", "replication_factor")], rows)


@topics.command("describe")
@admin_options
@click.argument("names", nargs=-1)
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True,
              help="Only partitions whose ISR is smaller than their replica list.")
@click.option("--unavailable-partitions", "unavailable", is_flag=True,
              help="Only partitions without a leader or whose leader is not a live broker.")
@click.option("--under-min-isr-partitions", "under_min_isr", is_flag=True,
              help="Only partitions whose ISR is smaller than min.insync.replicas (or without a leader).")
@click.option("--at-min-isr-partitions", "at_min_isr", is_flag=True,
              help="Only partitions whose ISR size equals min.insync.replicas.")
@click.option("--exclude-internal", is_flag=True, help="Leave out __consumer_offsets and co. (listing all topics).")
def topics_describe(bootstrap_server: str, output: str, names: tuple[str, ...], under_replicated: bool,
                    unavailable: bool, under_min_isr: bool, at_min_isr: bool, exclude_internal: bool) -> None:
    """Topics NAMES (default: all) as kafka-topics.sh --describe prints them.

    One line per topic (TopicId, PartitionCount, ReplicationFactor, the configs not at
    their default), then one per partition (Leader, Replicas, Isr). With a report flag
    only the partitions it selects are printed, without the topic lines. ``-o json``
    adds each partition's offline replicas and log start/end offsets.
    """
    reports = [n for n, on in (("under_replicated", under_replicated), ("unavailable", unavailable),
                               ("under_min_isr", under_min_isr), ("at_min_isr", at_min_isr)) if on]

    async def go(admin: Any) -> list[dict[str, Any]]:
        from .topic_describe import describe_topics
        return await describe_topics(admin, list(names), include_internal=not exclude_internal,
                                     offsets=output == "json")
    described = run_admin(bootstrap_server, go)
    from .topic_describe import kafka_topics_text, selected
    if output == "json":
        emit(output, [], [], json_doc=[{**t, "partitions": [p for p in t["partitions"] if selected(p, reports)]}
                                       for t in described])
        return
    text = kafka_topics_text(described, reports, terminal_width())
    if text:
        click.echo(text)


@topics.command("create")
@admin_options
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=-1, help="Default: the broker's num.partitions.")
@click.option("--replication-factor", "-r", type=int, default=-1)
@click.option("--config", "-c", "configs", multiple=True, metavar="NAME=VALUE", help="Topic config (repeatable).")
def topics_create(bootstrap_server: str, output: str, name: str, partitions: int, replication_factor: int,
                  configs: tuple[str, ...]) -> None:
    """Create topic NAME."""
    from ..client import NewTopic
    conf = {}
    for c in configs:
        k, sep, v = c.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {c!r}", param_hint="--config")
        conf[k.strip()] = v.strip()

    async def go(admin: Any) -> None:
        await admin.create_topics([NewTopic(name, partitions, replication_factor, conf)])
    run_admin(bootstrap_server, go)
    emit(output, [Col("TOPIC", "topic"), Col("RESULT", "result")], [{"topic": name, "result": "created"}])


@topics.command("delete")
@admin_options
@click.argument("names", nargs=-1, required=True)
def topics_delete(bootstrap_server: str, output: str, names: tuple[str, ...]) -> None:
    """Delete topics NAMES."""
    async def go(admin: Any) -> dict[str, Any]:
        return await admin.delete_topics(list(names), raise_on_error=False)
    res = run_admin(bootstrap_server, go)
    rows = [{"topic": n, "result": "deleted" if res.get(n) is None else str(res[n])} for n in names]
    emit(output, [Col("TOPIC", "topic"), Col("RESULT", "result")], rows)
    if any(res.get(n) is not None for n in names):
        raise SystemExit(1)


@topics.command("liveness")
@admin_options
@click.argument("names", nargs=-1)
@click.option("--idle-after", type=float, default=300.0, show_default=True,
              help="Seconds without a write after which a partition is flagged IDLE.")
def topics_liveness(bootstrap_server: str, output: str, names: tuple[str, ...], idle_after: float) -> None:
    """Last write time of each partition (ListOffsets max-timestamp spec, KIP-734).

    STATUS is ACTIVE (written within --idle-after), IDLE, or EMPTY (no records).
    """
    async def go(admin: Any) -> list[dict[str, Any]]:
        from ..client import ListOffsetsResult, TopicPartition
        wanted = list(names) or await admin.list_topics()
        described = await admin.describe_topics(wanted)
        tps = [TopicPartition(t, p) for t in wanted for p in sorted(described[t].partitions)]
        end = await admin.list_offsets({tp: "latest" for tp in tps}, raise_on_error=False)
        mx = await admin.list_offsets({tp: "max_timestamp" for tp in tps}, raise_on_error=False)
        now = int(time.time() * 1000)
        rows = []
        for tp in tps:
            r = mx.get(tp)
            ts = r.timestamp if isinstance(r, ListOffsetsResult) and r.timestamp >= 0 else None
            idle = None if ts is None else now - ts
            status = ("ERROR" if not isinstance(r, ListOffsetsResult) else
                      "EMPTY" if ts is None else "IDLE" if idle > idle_after * 1000 else "ACTIVE")
            rows.append({"topic": tp.topic, "partition": tp.partition, "log_end_offset": _off(end.get(tp)),
                         "max_timestamp_offset": r.offset if isinstance(r, ListOffsetsResult) and r.offset >= 0 else None,
                         "last_write_ms": ts, "idle_ms": idle, "status": status,
                         "error": None if isinstance(r, ListOffsetsResult) else str(r)})
        return rows
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("TOPIC", "topic"), Col("PARTITION", "partition"), Col("LOG-END-OFFSET", "log_end_offset"),
                  Col("MAX-TIMESTAMP-OFFSET", "max_timestamp_offset", drop=2),
                  Col("LAST-WRITE", "last_write_ms", iso_ms, drop=3), Col("IDLE-FOR", "idle_ms", seconds, drop=1),
                  Col("STATUS", "status")], rows)


@main.command("offsets")
@admin_options
@click.argument("topic")
@click.option("--spec", default="latest", show_default=True, help=SPEC_HELP)
@click.option("--partition", "-p", "partitions", type=int, multiple=True, help="Only these (repeatable).")
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted")
def offsets_cmd(bootstrap_server: str, output: str, topic: str, spec: str, partitions: tuple[int, ...],
                isolation: str) -> None:
    """Offsets of TOPIC's partitions for an offset spec (ListOffsets)."""
    s = parse_spec(spec)

    async def go(admin: Any) -> list[dict[str, Any]]:
        from ..client import ListOffsetsResult, TopicPartition
        t = (await admin.describe_topics([topic]))[topic]
        tps = [TopicPartition(topic, p) for p in (partitions or sorted(t.partitions))]
        got = await admin.list_offsets({tp: s for tp in tps}, isolation_level=isolation, raise_on_error=False)
        rows = []
        for tp in tps:
            r = got[tp]
            ok = isinstance(r, ListOffsetsResult)
            rows.append({"topic": tp.topic, "partition": tp.partition, "spec": spec,
                         "offset": r.offset if ok and r.offset >= 0 else None,
                         "timestamp": r.timestamp if ok and r.timestamp >= 0 else None,
                         "error": None if ok else str(r)})
        return rows
    rows = run_admin(bootstrap_server, go)
    emit(output, [Col("TOPIC", "topic"), Col("PARTITION", "partition"), Col("OFFSET", "offset"),
                  Col("TIMESTAMP", "timestamp", iso_ms), Col("ERROR", "error")], rows)


def _off(r: Any) -> int | None:
    from ..client import ListOffsetsResult
    return r.offset if isinstance(r, ListOffsetsResult) and r.offset >= 0 else None
