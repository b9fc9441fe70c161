"""``hightide console``: the web console (see docs/console.md).

Its libraries (Starlette, Jinja2, uvicorn) are the ``console`` extra and are imported
only when the command runs.
"""

from __future__ import annotations

import asyncio
import signal
import socket

import click

from . import _parse_hostport, main
from ._common import DEFAULT_BOOTSTRAP, assume_reset_option, extra_missing


@main.command("console")
@click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=None,
              help=f"HOST:PORT[,...] of hightide or any Kafka cluster [default: {DEFAULT_BOOTSTRAP}, "
                   f"or bootstrap.servers of --command-config].")
@click.option("--command-config", type=click.Path(dir_okay=False), default=None,
              help="Kafka client properties file (client.id, request.timeout.ms, ...), as Kafka's tools take.")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT to serve the console on.")
@click.option("--allow-writes", is_flag=True, help="Allow offset resets from the page (default: read-only).")
@click.option("--interval", type=float, default=5.0, show_default=True,
              help="Seconds between the background lag samples (the charts' resolution).")
@click.option("--history", type=float, default=3600.0, show_default=True,
              help="Seconds of lag history kept in memory per group.")
@click.option("--refresh", type=float, default=2.0, show_default=True,
              help="Seconds between live updates of an open page.")
@click.option("--window", type=float, default=60.0, show_default=True, help="Status window in seconds.")
@click.option("--min-samples", type=int, default=5, show_default=True, help="Samples for a complete status window.")
@click.option("--idle-after", type=float, default=300.0, show_default=True,
              help="Seconds without a write after which a partition is IDLE.")
@assume_reset_option
def console(bootstrap_server: str | None, command_config: str | None, listen: str, allow_writes: bool,
            interval: float, history: float, refresh: float, window: float, min_samples: int,
            idle_after: float, assume_reset: str) -> None:
    """Serve a web console: cluster, topics, consumer and share groups, lag history."""
    try:
        import uvicorn

        from ..console.app import ConsoleConfig, create_app
        from ..console.client_config import ClientConfigError, admin_options_from
        from ..console.sampler import Sampler
    except ImportError as exc:
        raise extra_missing("the console", "console", exc) from None
    from ..lag import StatusRules
    try:
        options, file_bootstrap, warnings = admin_options_from(command_config)
    except ClientConfigError as exc:
        raise click.ClickException(str(exc)) from None
    for w in warnings:
        click.echo(f"Warning: {w}", err=True)
    bootstrap = bootstrap_server or file_bootstrap or DEFAULT_BOOTSTRAP
    if interval <= 0 or refresh <= 0 or history <= 0 or window <= 0 or min_samples < 1:
        raise click.UsageError("--interval, --refresh, --history and --window must be > 0, --min-samples >= 1")
    host, port = _parse_hostport(listen, 8080)
    sampler = Sampler(bootstrap, interval_s=interval, history_s=history,
                      max_points=max(2, int(history / interval) + 1),
                      rules=StatusRules(window_ms=int(window * 1000), min_samples=min_samples),
                      client_options=options, assume_reset=assume_reset)
    app = create_app(sampler, ConsoleConfig(bootstrap, allow_writes=allow_writes, refresh_s=refresh,
                                            idle_after_s=idle_after))
    sock = _bind(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    # Ctrl-C from here on asks uvicorn to stop (graceful; a second one forces it), as its own
    # handler does while it serves: never a KeyboardInterrupt at an arbitrary point (one
    # raised in a finalizer is lost, and the console kept running), so the exit is 0
    previous = signal.signal(signal.SIGINT, server.handle_exit)
    try:
        click.echo(f"hightide console on http://{host}:{sock.getsockname()[1]}/ for {bootstrap} "
                   f"({'read-write' if allow_writes else 'read-only'})", err=True)
        loop_factory = getattr(server.config, "get_loop_factory", lambda: None)()  # uvicorn's choice (uvloop)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(server.serve(sockets=[sock]))
    finally:
        signal.signal(signal.SIGINT, previous)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on HOST:PORT, or a one-line click error (as ``serve`` says it)."""
    import errno
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(f"cannot listen on {host}:{port}: address already in use (choose another "
                                       f"with --listen HOST:PORT).") from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
    return sock
