"""hightide's PySpark data source and lag-history jobs (``pip install 'hightide[spark]'``).

    import hightide.spark
    hightide.spark.register(spark)
    df = (spark.readStream.format("hightide")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Works against hightide and any Kafka-compatible cluster, on classic PySpark and on Spark
Connect. See ``docs/spark.md``.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Registration", "is_connect", "register", "ship_to_executors", "unregister"]

_REGISTERED_ATTR = "_hightide_progress_listener"
log = logging.getLogger("hightide.spark")


@dataclass
class Registration:
    """What :func:`register` set up on a session.

    ``connect``: the session is a Spark Connect client session. ``progress_listener``:
    the installed :class:`.progress.GroupOffsetCommitter`, or None. ``unavailable``: one
    sentence per thing that was asked for and could not be set up (each also issued as
    a :class:`RuntimeWarning`)."""

    connect: bool
    progress_listener: Any = None
    unavailable: list[str] = field(default_factory=list)


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect client session (``SparkSession.builder.remote(...)``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def register(spark: Any, *, commit_progress: bool = True) -> Registration:
    """Register ``format("hightide")`` with ``spark`` (classic or Spark Connect) and,
    unless ``commit_progress`` is false, the streaming-query listener that commits each
    micro-batch's end offsets to the query's consumer group
    (:class:`.progress.GroupOffsetCommitter`; on Connect it runs in this client process,
    which must stay up while the queries run). Idempotent per session.

    Raises RuntimeError when the data source cannot be registered (nothing would work);
    when only the listener cannot be installed, the returned :class:`Registration` says
    so in ``unavailable`` and a :class:`RuntimeWarning` is issued: streaming queries
    then run, but commit no group offsets. Raises ImportError naming the ``spark`` extra
    when its libraries (pyarrow, numpy, ...) are missing."""
    try:
        from .source import HightideDataSource
    except ImportError as exc:
        raise ImportError(f"hightide.spark needs the spark extra: `make spark` (pip install 'hightide[spark]'); "
                          f"missing {exc.name}", name=exc.name) from None
    connect = is_connect(spark)
    try:
        spark.dataSource.register(HightideDataSource)
    except Exception as exc:  # noqa: BLE001 - say what it means, keep the cause
        where = "the Spark Connect server" if connect else "this Spark session"
        raise RuntimeError(f"hightide: cannot register format('hightide') with {where}: Python data "
                           f"sources need Spark >= 4.0 on both sides ({type(exc).__name__}: {exc})") from exc
    reg = Registration(connect=connect, progress_listener=getattr(spark, _REGISTERED_ATTR, None))
    if commit_progress and reg.progress_listener is None:
        from .progress import GroupOffsetCommitter
        listener = GroupOffsetCommitter()
        try:
            spark.streams.addListener(listener)
        except Exception as exc:  # noqa: BLE001
            _unavailable(reg, "group-offset commits of streaming queries: the session refused the "
                              f"streaming-query listener ({type(exc).__name__}: {exc}); streaming queries "
                              "run but commit no consumer-group offsets, so lag tools do not see them")
        else:
            setattr(spark, _REGISTERED_ATTR, listener)
            reg.progress_listener = listener
    return reg


def unregister(spark: Any) -> None:
    """Remove the progress listener :func:`register` installed on ``spark`` (if any);
    call it before stopping a Connect session to end the listener stream cleanly."""
    listener = getattr(spark, _REGISTERED_ATTR, None)
    if listener is not None:
        spark.streams.removeListener(listener)
        setattr(spark, _REGISTERED_ATTR, None)


def _unavailable(reg: Registration, what: str) -> None:
    reg.unavailable.append(what)
    warnings.warn(f"hightide.spark.register: not available: {what}", RuntimeWarning, stacklevel=3)


def ship_to_executors(spark: Any, work_dir: str | None = None) -> str:
    """Ship this installed ``hightide`` package to the session's executors (see
    :func:`.deploy.ship_to_executors`); returns the path of the zip shipped."""
    from .deploy import ship_to_executors as ship
    return ship(spark, work_dir)
