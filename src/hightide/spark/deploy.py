"""Getting hightide onto the machines that run Spark's Python workers.

:func:`ship_to_executors` zips the installed ``hightide`` package (pure Python) and adds
it to the session: ``spark.addArtifacts(zip, pyfile=True)`` on Spark Connect,
``spark.sparkContext.addPyFile(zip)`` on classic PySpark. Spark then puts the zip on the
``sys.path`` of the Python workers that run the session's **batch** work (the source's
planning and reads, the sink's writes, ``mapInArrow`` of lag-history). Verified with
workers whose Python lacks hightide: a batch read fails with ``No module named
'hightide'`` before, and works after. What it cannot do (Spark's limits, not hightide's):

* hightide's compiled dependencies (pyarrow, numpy, crc32c, cramjam, kio) must already
  be installed in the workers' Python (``PYSPARK_PYTHON``); a zip cannot carry them.
* **Streaming** reads and writes of a Python data source run in long-lived Python
  processes Spark starts for the query without the session's shipped files (classic)
  or artifacts (Connect), so hightide must be installed in the workers' Python for
  ``readStream``/``writeStream`` — on Connect, on the server and its executors.

See docs/spark.md, "Running on a cluster".
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["package_zip", "ship_to_executors"]


def package_zip(work_dir: str | None = None) -> Path:
    """Write ``hightide-<content hash>.zip`` holding the installed ``hightide`` package
    (its ``.py`` and data files, no ``__pycache__``) into ``work_dir`` (default: a new
    temporary directory) and return its path. The name changes with the content, so a
    session never sees two different zips under one name (Connect refuses that)."""
    import hightide
    root = Path(hightide.__file__).resolve().parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            info = zipfile.ZipInfo(str(Path("hightide") / path.relative_to(root)), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    data = buf.getvalue()
    out = Path(work_dir or tempfile.mkdtemp(prefix="hightide-ship-"))
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"hightide-{hashlib.sha256(data).hexdigest()[:12]}.zip"
    target.write_bytes(data)
    return target


def ship_to_executors(spark: Any, work_dir: str | None = None) -> str:
    """Add the hightide package to ``spark``'s Python workers for batch jobs (see the
    module docstring for what this does not cover), then register ``format("hightide")``
    again: Spark captures a Python data source's includes when it is registered, so a
    registration made before the zip was added would still fail on workers without
    hightide. Returns the zip's path. Raises whatever the session raises if it refuses
    the file."""
    from . import is_connect
    from .source import HightideDataSource
    path = package_zip(work_dir)
    if is_connect(spark):
        spark.addArtifacts(str(path), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(path))
    spark.dataSource.register(HightideDataSource)
    return str(path)
