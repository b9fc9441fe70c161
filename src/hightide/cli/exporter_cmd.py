"""``hightide exporter``: serve Prometheus metrics (see docs/lag.md)."""

from __future__ import annotations

import click

from . import _run, main
from ._common import DEFAULT_BOOTSTRAP, assume_reset_option, client_options, command_config_option


@main.command("exporter")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=DEFAULT_BOOTSTRAP,
              show_default=True, help="HOST:PORT[,...] of hightide or any Kafka cluster.")
@command_config_option
@click.option("--listen", default="0.0.0.0", show_default=True, help="Address to serve /metrics on.")
@click.option("--port", type=int, default=9308, show_default=True, help="Port to serve /metrics on (kafka_exporter's).")
@click.option("--group", "groups", multiple=True, help="Only these groups (repeatable; default: all).")
@click.option("--window", type=float, default=600.0, show_default=True, help="Status window in seconds.")
@click.option("--min-samples", type=int, default=10, show_default=True, help="Scrapes for a complete window.")
@click.option("--min-interval", type=float, default=1.0, show_default=True,
              help="Scrapes closer together than this share one snapshot.")
@click.option("--scrape-timeout", type=float, default=9.0, show_default=True,
              help="Seconds a scrape may take; a slower cluster is reported as hightide_exporter_up 0 "
                   "(Prometheus' X-Prometheus-Scrape-Timeout-Seconds header shortens it).")
@click.option("--no-extensions", is_flag=True, help="Always use OffsetFetch + ListOffsets (two calls).")
@click.option("--cluster-name", default="default", show_default=True, help="cluster_name label (kafka-lag-exporter).")
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted",
              help="read_committed measures lag to the last stable offset.")
@click.option("--share-scale-target", "share_scale_targets", multiple=True, type=click.IntRange(min=1),
              help="Share lag one share consumer should carry: adds hightide_sharegroup_desired_consumers"
                   "{sharegroup,target} = ceil(share lag / TARGET) (repeatable).")
@assume_reset_option
def exporter(bootstrap_server: str, listen: str, port: int, groups: tuple[str, ...], window: float,
             min_samples: int, min_interval: float, scrape_timeout: float, no_extensions: bool,
             cluster_name: str, isolation: str, share_scale_targets: tuple[int, ...], assume_reset: str) -> None:
    """Serve consumer lag, time lag, status and partition offsets as Prometheus metrics."""
    from ..monitoring.exporter import Exporter
    from ..lag import StatusRules
    ex = Exporter(bootstrap_server, listen=(listen, port), groups=list(groups) or None,
                  rules=StatusRules(window_ms=int(window * 1000), min_samples=min_samples),
                  min_interval_s=min_interval, use_extensions=not no_extensions, cluster_name=cluster_name,
                  scrape_timeout_s=scrape_timeout, isolation_level=isolation, client_options=client_options(),
                  uncommitted_reset=assume_reset, share_scale_targets=share_scale_targets)
    _run(ex.run_forever())
