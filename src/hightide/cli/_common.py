"""Shared plumbing of the operator commands: options, running the admin client, output.

Heavy imports (the admin client, kio) happen inside functions so that
``hightide serve`` starts as fast as before.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


_CLIENT_OPTIONS = "hightide.client_options"
_CLIENT_PROPERTIES = "hightide.client_properties"


def _load_command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    from ..client.properties import ClientConfigError, admin_options_from
    try:
        options, _, warnings = admin_options_from(value)
    except ClientConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    for warning in warnings:
        click.echo(f"WARN {warning}", err=True)
    ctx.meta[_CLIENT_OPTIONS] = options
    from ..client.properties import load_properties
    ctx.meta[_CLIENT_PROPERTIES] = load_properties(value)


def kafka_error_line(exc: Exception) -> str:
    """A client error as the one line the commands print after ``Error:``: the class and
    the error, e.g. ``UnknownTopicOrPartitionError: [UNKNOWN_TOPIC_OR_PARTITION] ...``;
    an unreachable cluster only as ``[NETWORK_EXCEPTION] cannot reach HOST:PORT (...)``
    (the class would repeat the code)."""
    from ..client import KafkaConnectionError
    return str(exc) if isinstance(exc, KafkaConnectionError) else f"{type(exc).__name__}: {exc}"


def extra_missing(what: str, extra: str, exc: ImportError) -> click.ClickException:
    """The one-line error of a command whose optional libraries (the ``extra``) are not
    installed: it names the make target and the pip command that install them."""
    missing = f" (no module {exc.name})" if exc.name else ""
    return click.ClickException(f"{what} needs `make {extra}` (pip install 'hightide[{extra}]'){missing}")


def command_config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--command-config FILE``: Kafka client properties (security.protocol, sasl.*,
    ssl.* PEM files, client.id, request.timeout.ms) for every connection the command
    opens; read by :func:`run_admin` and :func:`client_options`."""
    return click.option("--command-config", type=click.Path(dir_okay=False), default=None,
                        envvar="HIGHTIDE_COMMAND_CONFIG", expose_value=False, callback=_load_command_config,
                        help="Kafka client properties file (security.protocol, sasl.mechanism, sasl.jaas.config, "
                             "ssl.truststore.location ...), as kafka-*.sh --command-config.")(f)


def client_options() -> dict[str, Any]:
    """The AdminClient keyword arguments of this command's ``--command-config`` (empty
    without one): ``security`` (a ClientSecurity), ``client_id``, timeouts."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_CLIENT_OPTIONS, {})) if ctx is not None else {}


def spark_security_options() -> dict[str, str]:
    """This command's ``--command-config`` security properties as Spark source options
    (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``); empty without one."""
    ctx = click.get_current_context(silent=True)
    props = ctx.meta.get(_CLIENT_PROPERTIES, {}) if ctx is not None else {}
    return {f"kafka.{k}": v for k, v in props.items() if k.startswith(("security.", "sasl.", "ssl."))}


RESETS = ("earliest", "latest")


def assume_reset_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--assume-reset earliest|latest`` (default earliest), the same on every lag tool
    (``groups describe``, ``lag watch``, ``exporter``, ``console``, ``spark lag-history``):
    the ``auto.offset.reset`` assumed for a partition a group has not committed, which
    sets its estimated lag (docs/lag.md, "Partitions without a commit in the totals").
    Passed as ``assume_reset``."""
    return click.option("--assume-reset", "assume_reset", type=click.Choice(RESETS), default="earliest",
                        show_default=True,
                        help="auto.offset.reset assumed for partitions a group has not committed: their lag is "
                             "estimated from the log start (earliest) or as 0 (latest), counted in totals and "
                             "flagged as an estimate.")(f)


def admin_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap-server``, ``--command-config`` and ``--output`` (the same on every
    operator command)."""
    f = click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table",
                     show_default=True, help="Aligned columns or JSON (raw values, null where unknown).")(f)
    f = command_config_option(f)
    f = click.option("--bootstrap-server", "-b", envvar="HIGHTIDE_BOOTSTRAP_SERVER", default=DEFAULT_BOOTSTRAP,
                     show_default=True, help="HOST:PORT[,HOST:PORT...] of hightide or any Kafka cluster.")(f)
    return f


def run_admin(bootstrap: str, fn: Callable[[Any], Awaitable[Any]], *, use_extensions: bool = True) -> Any:
    """Run ``fn(admin)`` with a connected AdminClient (TLS/SASL from ``--command-config``);
    Kafka errors become click errors. The result is handed back beside the event loop's
    main task, never as its result: Python 3.11's ``asyncio.run`` formats the repr of its
    main task, result included, when it restores the SIGINT handler at exit — seconds
    for a describe of 10,000 partitions."""
    from ..client import AdminClient, KafkaError
    options = {"request_timeout_s": 15.0, **client_options()}
    out: list[Any] = []

    async def go() -> None:
        async with AdminClient(bootstrap, use_extensions=use_extensions, **options) as admin:
            out.append(await fn(admin))
    try:
        asyncio.run(go())
        return out[0]
    except KafkaError as exc:
        raise click.ClickException(kafka_error_line(exc)) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Col:
    """A table column. ``drop`` is 0 for a key column, which is never hidden nor cut;
    columns with ``drop > 0`` are hidden, highest first, when the table is wider than the
    terminal (see :func:`render_table`)."""

    header: str
    key: str
    fmt: Callable[[Any], str] | None = None
    drop: int = 0


def dash(v: Any) -> str:
    """'-' for unknown (None), else str."""
    return "-" if v is None else str(v)


def seconds(ms: Any) -> str:
    """A duration in ms as seconds with ms precision, '-' if unknown."""
    return "-" if ms is None else f"{ms / 1000:.3f}s"


def iso_ms(ms: Any) -> str:
    """A timestamp in ms as ISO-8601 UTC, '-' if unknown or -1."""
    if ms is None or ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


GAP = 2
"""Spaces between columns."""


def terminal_width() -> int | None:
    """The width tables must fit: ``HIGHTIDE_WIDTH`` if set, else the terminal's width
    when stdout is a terminal (``COLUMNS`` wins, as for every tool), else None: output to
    a pipe or a file is never squeezed, so scripts always see every column."""
    env = os.environ.get("HIGHTIDE_WIDTH")
    if env and env.isdigit():
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def render_table(cols: Sequence[Col], rows: Sequence[dict[str, Any]], width: int | None = None
                 ) -> tuple[str, list[str]]:
    """Rows as plain aligned columns like Kafka's tools, and the headers of the columns
    hidden to fit ``width``.

    Guarantees: a key column (``drop == 0``) is always printed and never cut; when the
    table is wider than ``width``, optional columns are hidden, highest ``drop`` first,
    until it fits; if the key columns alone are wider, lines are longer than ``width``
    (the terminal wraps them, as it does kafka-consumer-groups.sh's output). Values are
    never truncated. ``width`` None: no limit."""
    cells = [[(c.fmt or dash)(r.get(c.key)) for c in cols] for r in rows]
    widths = [max([len(c.header), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))
    hidden: list[str] = []

    def total() -> int:
        return sum(widths[i] for i in shown) + GAP * (len(shown) - 1)
    for i in sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: -cols[i].drop):
        if width is None or total() <= width:
            break
        shown.remove(i)
        hidden.append(cols[i].header)

    def line(values: Sequence[str]) -> str:
        return (" " * GAP).join(values[i].ljust(widths[i]) for i in shown).rstrip()
    return "\n".join([line([c.header for c in cols]), *(line(row) for row in cells)]), hidden


def wrap_fields(line: str, width: int | None, sep: str = "\t", cont: str = "\t") -> list[str]:
    """One line of ``sep``-separated fields (kafka-topics.sh's tab layout, Kafka's
    ``name=value sensitive=... synonyms=...``) as lines of at most ``width`` columns
    (tabs at 8): fields move to continuation lines indented by the line's own leading
    blanks plus ``cont`` (a ``sep`` with a comma keeps the comma at the end of the line); a field still too long is cut after its commas; a single token longer
    than the width stays whole. ``width`` None: the line unchanged (pipes and files)."""
    if width is None or len(line.expandtabs(8)) <= width:
        return [line]
    body = line.lstrip(" \t")
    indent = line[:len(line) - len(body)]
    fields = body.split(sep)
    out: list[str] = []
    current = indent
    more = indent + cont

    def fits(text: str) -> bool:  # room kept for the comma a break may add
        return len(text.expandtabs(8)) + len(sep.rstrip()) <= width

    for field in fields:
        first = current in (indent, more)
        candidate = current + field if first else current + sep + field
        if fits(candidate) or (first and "," not in field):
            current = candidate
            continue
        if not first:
            out.append(current + sep.rstrip())  # a ", " list keeps its comma at the break
            current = more
            if fits(current + field) or "," not in field:
                current += field
                continue
        pieces = field.split(",")
        for i, piece in enumerate(pieces):
            piece += "," if i < len(pieces) - 1 else ""
            if current in (indent, more) or fits(current + piece):
                current += piece
            else:
                out.append(current)
                current = more + piece
    out.append(current)
    return out


def print_table(cols: Sequence[Col], rows: Sequence[dict[str, Any]]) -> None:
    """:func:`render_table` to stdout at the terminal's width; a note on stderr names the
    hidden columns."""
    width = terminal_width()
    text, hidden = render_table(cols, rows, width)
    click.echo(text)
    if hidden:
        note = f"hidden columns: {' '.join(hidden)} (-o json shows all)"
        click.echo("\n".join(wrap_fields(note, width, " ", "  ")), err=True)


def emit(output: str, cols: Sequence[Col], rows: Sequence[dict[str, Any]], *, json_doc: Any = None) -> None:
    """Print ``rows`` as a table, or as JSON (``json_doc`` if given, else the rows)."""
    if output == "json":
        click.echo(json.dumps(rows if json_doc is None else json_doc, indent=2, default=_json_default))
        return
    print_table(cols, rows)


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


SPEC_HELP = "earliest | latest | max-timestamp | <ms since epoch> | <ISO-8601 time>"


def parse_time(value: str) -> int:
    """Milliseconds since the epoch from ``<ms>`` or an ISO-8601 time (no zone: UTC)."""
    v = value.strip()
    if v.lstrip("-").isdigit():
        ms = int(v)
        if ms < 0:
            raise click.BadParameter(f"a timestamp must be >= 0, got {value!r}")
        return ms
    try:
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"expected {SPEC_HELP}, got {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def parse_spec(value: str) -> str | int:
    """An offset spec for ListOffsets from the command line."""
    v = value.strip().lower().replace("_", "-")
    named = {"earliest": "earliest", "latest": "latest", "max-timestamp": "max_timestamp"}
    return named[v] if v in named else parse_time(value)


def parse_topic_partitions(values: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """``TOPIC`` or ``TOPIC:0,1,2`` → [(topic, partitions or None for all)]."""
    out = []
    for v in values:
        topic, sep, parts = v.partition(":")
        if not sep:
            out.append((topic, None))
            continue
        try:
            out.append((topic, [int(p) for p in parts.split(",") if p.strip()]))
        except ValueError:
            raise click.BadParameter(f"expected TOPIC or TOPIC:P1,P2, got {v!r}") from None
    return out


# -- offset resets (consumer groups and share groups) -------------------------------------------
def reset_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The target options of ``reset-offsets`` (the same for consumer and share groups)."""
    for opt in reversed([
        click.option("--topic", "topics", multiple=True, help="TOPIC or TOPIC:P1,P2 (repeatable)."),
        click.option("--all-topics", is_flag=True, help="Every partition the group has offsets (or state) for."),
        click.option("--to-earliest", "to", flag_value="earliest"),
        click.option("--to-latest", "to", flag_value="latest"),
        click.option("--to-datetime", "to_datetime", default=None, help="ISO-8601 time or ms since the epoch."),
        click.option("--to-offset", "to_offset", type=int, default=None,
                     help="An absolute offset (clamped to the log)."),
        click.option("--execute", is_flag=True, help="Apply the new offsets (default: dry run, print them only)."),
    ]):
        f = opt(f)
    return f


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What ``reset-offsets`` was asked for; :meth:`targets` computes the new offsets."""

    topics: tuple[str, ...]
    all_topics: bool
    to: str | None
    to_datetime: str | None
    to_offset: int | None

    def check(self) -> None:
        chosen = [x for x in (self.to, self.to_datetime, self.to_offset) if x is not None]
        if len(chosen) != 1:
            raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset")
        if bool(self.topics) == self.all_topics:
            raise click.UsageError("give --topic (repeatable) or --all-topics")

    async def targets(self, admin: Any, current: Sequence[Any]) -> dict[Any, int]:
        """The new offset of every chosen partition (``current``: the partitions the group
        has offsets for, used by --all-topics), clamped to the log like Kafka's tool."""
        from ..client import ListOffsetsResult, TopicPartition
        if self.all_topics:
            tps = sorted(current)
        else:
            tps = []
            for topic, parts in parse_topic_partitions(self.topics):
                if parts is None:
                    parts = sorted((await admin.describe_topics([topic]))[topic].partitions)
                tps += [TopicPartition(topic, p) for p in parts]
        ts = parse_time(self.to_datetime) if self.to_datetime is not None else None
        start = await admin.list_offsets({tp: "earliest" for tp in tps})
        end = await admin.list_offsets({tp: "latest" for tp in tps})
        at = await admin.list_offsets({tp: ts for tp in tps}) if ts is not None else {}
        new: dict[Any, int] = {}
        for tp in tps:
            lo, hi = start[tp].offset, end[tp].offset
            if self.to == "earliest":
                new[tp] = lo
            elif self.to == "latest":
                new[tp] = hi
            elif ts is not None:
                r = at[tp]
                new[tp] = r.offset if isinstance(r, ListOffsetsResult) and r.offset >= 0 else hi
            else:
                new[tp] = min(max(self.to_offset, lo), hi)
        return new
