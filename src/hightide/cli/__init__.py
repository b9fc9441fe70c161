"""The ``hightide`` command line."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from typing import Any

import click

from ..version import __version__


def _parse_hostport(value: str, default_port: int = 9092) -> tuple[str, int]:
    value = value.strip()
    if "://" in value:
        value = value.split("://", 1)[1]
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = value.rpartition(":")
        if not host:
            host, port = value, ""
    try:
        return host, int(port) if port else default_port
    except ValueError:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}") from None


class _LazyGroup(click.Group):
    """The top-level group: operator commands live in their own modules, imported only
    when one of them is run (or listed in ``--help``), so ``hightide serve`` does not
    pay for them at start-up. Each module registers its commands on :data:`main`."""

    MODULES = {"topics": "topics", "offsets": "topics", "groups": "groups", "share-groups": "share_groups",
               "lag": "lagwatch", "exporter": "exporter_cmd", "configs": "configs", "spark": "spark",
               "console": "console", "dev-cluster": "dev_cluster", "metadata-quorum": "metadata_quorum",
               "brokers": "brokers", "acls": "acls", "users": "users",
               "transactions": "transactions", "storage": "storage"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.MODULES})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.MODULES:
            import importlib
            importlib.import_module(f"{__name__}.{self.MODULES[name]}")
        command = super().get_command(ctx, name)
        return None if command is None else fit_choices(command)


LONG_CHOICES = 30
"""Widest ``[a|b|...]`` choice list ``--help`` shows in the options' column."""


def fit_choices(command: click.Command) -> click.Command:
    """Make ``command``'s ``--help`` (and its subcommands') fit 80 columns: click never
    wraps the options' column, so an option whose ``[a|b|...]`` choice list is longer
    than :data:`LONG_CHOICES` shows its name as the metavar (``--operation OPERATION``)
    and lists the choices at the end of its help text, which click wraps. Idempotent."""
    for param in command.params:
        if (isinstance(param, click.Option) and isinstance(param.type, click.Choice) and param.metavar is None
                and len("|".join(map(str, param.type.choices))) + 2 > LONG_CHOICES):
            param.metavar = max(param.opts, key=len).lstrip("-").upper()
            choices = ", ".join(map(str, param.type.choices))
            param.help = f"{param.help.rstrip()} One of: {choices}." if param.help else f"One of: {choices}."
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            fit_choices(sub)
    return command


@click.group(cls=_LazyGroup)
@click.version_option(__version__, prog_name="hightide")
def main() -> None:
    """hightide: a Kafka-compatible streaming log that knows its own lag."""


def node_options(f: Any) -> Any:
    """The options that say which node a command is: ``--data-dir``, ``--config``,
    ``--node-id``, ``--set`` (``serve`` and ``storage format`` take the same ones, so the
    flags that start a node format its dir)."""
    f = click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE",
                     help="Override one config (repeatable).")(f)
    f = click.option("--node-id", type=int, default=None, help="This node's node.id.")(f)
    f = click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="TOML file of Kafka config names, e.g. num.partitions = 3.")(f)
    return click.option("--data-dir", default="./hightide-data", show_default=True, help="Where logs are stored.")(f)


def load_node_config(config_file: str | None, node_id: int | None, overrides: tuple[str, ...]) -> Any:
    """The node's :class:`~hightide.config.BrokerConfig` from :func:`node_options`, its
    cluster settings checked together (``config.cluster_settings()``). A malformed
    ``--set`` is a usage error; a bad config a one-line :class:`click.ClickException`."""
    from ..config import BrokerConfig, ConfigError
    extra: dict[str, Any] = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--set")
        extra[name.strip()] = value.strip()
    if node_id is not None:
        extra["node.id"] = node_id
    try:
        config = BrokerConfig.load(config_file, extra)
        config.cluster_settings()  # the cluster configs checked together (raises ConfigError)
    except (ConfigError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    return config


@main.command()
@node_options
@click.option("--listen", default="127.0.0.1:9092", show_default=True, help="HOST:PORT to accept clients on.")
@click.option("--advertised-listener", default=None, help="HOST:PORT clients are told to connect to.")
@click.option("--log-level", default="INFO", show_default=True, metavar="LEVEL[,LOGGER=LEVEL...]",
              help="DEBUG, INFO, WARNING or ERROR, and/or levels of single loggers, e.g. "
                   "hightide.request=debug (the request log).")
def serve(data_dir: str, config_file: str | None, node_id: int | None, overrides: tuple[str, ...], listen: str,
          advertised_listener: str | None, log_level: str) -> None:
    """Run a broker until SIGINT or SIGTERM."""
    # kio registers hypothesis strategies when hypothesis is importable; the broker
    # never needs them, and skipping that import saves ~150 ms of start-up.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    root_level, logger_levels = _parse_log_levels(log_level)
    logging.basicConfig(level=root_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name, level in logger_levels.items():
        logging.getLogger(name).setLevel(level)
    config = load_node_config(config_file, node_id, overrides)
    try:
        from ..server.listener_security import check_listeners
        check_listeners(config)  # TLS material readable, SASL settings valid (raises ValueError)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    listen_addr = _parse_hostport(listen)
    advertised = _parse_hostport(advertised_listener) if advertised_listener else None
    _prepare_data_dir(data_dir)
    from ..log.data_dir import DataDirMismatch
    from ..log.dirlock import DataDirLocked
    try:
        code, reason = _run(_serve(config, data_dir, listen_addr, advertised))
    except (DataDirLocked, DataDirMismatch) as exc:  # not this node's directory: one line, no traceback
        click.echo(f"hightide: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:  # start-up failed (listen address, data files): one line, no traceback
        logging.getLogger("hightide").debug("start-up failed", exc_info=True)
        raise click.ClickException(_start_error(exc, listen_addr)) from None
    if reason:  # the node stopped itself (e.g. its controller belongs to another cluster): the reason, one line
        click.echo(f"hightide: {reason}", err=True)
        sys.exit(1)
    if code:
        sys.exit(code)


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _parse_log_levels(value: str) -> tuple[str, dict[str, str]]:
    """``--log-level``: comma-separated items, each a level (the root logger's; INFO if
    none) or ``LOGGER=LEVEL``, case-insensitive. Raises ``click.BadParameter`` otherwise."""
    root, loggers = "INFO", {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, level = item.rpartition("=")
        if level.strip().upper() not in _LEVELS or (sep and not name.strip()):
            raise click.BadParameter(f"expected LEVEL or LOGGER=LEVEL with LEVEL one of {', '.join(_LEVELS)}, "
                                     f"got {item!r}", param_hint="--log-level")
        if sep:
            loggers[name.strip()] = level.strip().upper()
        else:
            root = level.strip().upper()
    return root, loggers


def _prepare_data_dir(data_dir: str) -> None:
    """Create ``data_dir`` if needed; raise a one-line click error when it is a file, cannot
    be created, or is not writable by this user."""
    import os
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise click.ClickException(f"--data-dir {data_dir} is a file, not a directory.")
    try:
        os.makedirs(data_dir, exist_ok=True)
    except OSError as exc:
        where = f" ({exc.filename} is not a directory)" if isinstance(exc, NotADirectoryError) else ""
        raise click.ClickException(f"cannot create data directory {data_dir}: {exc.strerror}{where}.") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise click.ClickException(f"data directory {data_dir} is not writable by this user (uid {os.getuid()}).")


def _start_error(exc: OSError, listen: tuple[str, int]) -> str:
    """One line for an OSError raised while the broker starts."""
    import errno
    where = f"{listen[0]}:{listen[1]}"
    if exc.errno == errno.EADDRINUSE:
        return (f"cannot listen on {where}: address already in use (another broker or Kafka is running "
                f"there; choose another with --listen HOST:PORT).")
    if exc.filename is None:  # a socket error: bind/listen
        return f"cannot listen on {where}: {exc.strerror or exc}."
    return f"{exc.strerror}: {exc.filename}."


#: A broker asked to stop (SIGTERM, SIGINT) exits within SERVE_STOP_BOUND_S +
#: SERVE_EXIT_GRACE_S: ``Broker.stop`` is cancelled after SERVE_STOP_BOUND_S (its flush,
#: log close and data-dir lock release still run, each bounded) and a watchdog thread ends
#: the process SERVE_EXIT_GRACE_S later whatever still runs (a thread stuck in a hung
#: disk, a task that ignores its cancellation while the event loop is torn down).
SERVE_STOP_BOUND_S = 60.0
SERVE_EXIT_GRACE_S = 60.0


async def _serve(config, data_dir: str, listen: tuple[str, int], advertised) -> tuple[int, str | None]:
    """Run the broker until SIGINT/SIGTERM, or until a broker-only node halts itself
    (:attr:`BrokerNode.fatal`), then stop it (bounded, see SERVE_STOP_BOUND_S). Returns
    (exit code: 0, or 1 when the stop did not end in its bound; the node's halt reason,
    None after a requested shutdown)."""
    from ..server.broker import Broker
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(config, data_dir=data_dir, listen=listen, advertised=advertised)
    node = broker.node
    if not await _started(broker, stop, None if node is None else node.halted):
        if node is None or node.fatal is None:
            logging.getLogger("hightide.broker").info("shutdown requested while starting")
        return await _bounded_stop(broker), None if node is None else node.fatal
    try:
        waits = [asyncio.ensure_future(stop.wait())]
        if node is not None:
            waits.append(asyncio.ensure_future(node.halted.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if stop.is_set():
            logging.getLogger("hightide.broker").info("shutdown requested")
    finally:
        code = await _bounded_stop(broker)
    return code, None if node is None else node.fatal


async def _started(broker, stop: asyncio.Event, halted: asyncio.Event | None) -> bool:
    """Start ``broker``; False when ``stop`` (or ``halted``: the node stopped itself) is
    set first (a start waiting for the controllers, say): the start is then cancelled
    (waited for a bounded time) and the caller stops what it had opened. A failed start
    raises as ``broker.start()`` does."""
    from ..aio.tasks import cancel_and_wait
    starting = asyncio.ensure_future(broker.start())
    stopping = [asyncio.ensure_future(e.wait()) for e in (stop, halted) if e is not None]
    try:
        await asyncio.wait((starting, *stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in stopping:
            w.cancel()
    if starting.done():
        starting.result()  # a failed start raises here
        return True
    await cancel_and_wait(starting)
    return False


async def _bounded_stop(broker) -> int:
    """``broker.stop()`` cancelled after SERVE_STOP_BOUND_S, with the exit watchdog
    armed; 0, or 1 when the bound cut the stop short."""
    _exit_watchdog(SERVE_STOP_BOUND_S + SERVE_EXIT_GRACE_S)
    try:
        async with asyncio.timeout(SERVE_STOP_BOUND_S):
            await broker.stop()
    except TimeoutError:
        logging.getLogger("hightide.broker").error(
            "shutdown did not finish within %.0f s; cut short (the steps logged above say what did not end)",
            SERVE_STOP_BOUND_S)
        return 1
    return 0


def _exit_watchdog(after_s: float) -> None:
    """End the process (exit code 1) ``after_s`` from now unless it has ended: a daemon
    thread, so it never keeps the process alive itself."""
    import os
    import threading

    def expire() -> None:
        os.write(2, f"hightide: the shutdown did not end within {after_s:.0f} s; exiting now\n".encode())
        os._exit(1)
    timer = threading.Timer(after_s, expire)
    timer.daemon = True
    timer.start()


def _tune_malloc() -> None:
    """Keep glibc from returning large request buffers to the OS after every request.

    With the default thresholds each 1 MiB produce/fetch buffer is a fresh mmap that
    page-faults on every request (measured: 718 vs 14,100 decode+encode cycles/s of a
    1 MiB Fetch). Raising the mmap and trim thresholds keeps them in the heap.
    """
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)  # the maximum glibc accepts
        libc.mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


GC_THRESHOLD = (20_000, 20, 10)  # Python's default is (700, 10, 10)


def _tune_gc() -> None:
    """Make the cyclic garbage collector cheaper for a long-running server.

    Everything allocated so far (modules, classes, configuration) lives as long as the
    process: ``gc.freeze()`` moves it out of every generation, so no collection scans it
    again. A young-generation threshold of 20,000 instead of 700 allocations lets the
    collector run ~30x less often on request paths that allocate a few objects per
    partition (reference counting frees them meanwhile; only cycles wait for a
    collection). Measured on an offset-commit load: the collector took ~12 % of the
    broker's CPU; 134k -> 180k commits/s with both (docs/benchmarks.md).
    """
    gc.set_threshold(*GC_THRESHOLD)
    gc.freeze()


def _run(coro):
    """Run ``coro`` (on uvloop when installed) and return its result."""
    _tune_malloc()
    _tune_gc()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.run(coro)
    return uvloop.run(coro)

