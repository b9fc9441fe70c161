"""CRC-32C (Castagnoli), the checksum of Kafka's record batches: the ``crc32c``
package's C function, loaded without the package's ``__init__``.

``import crc32c`` runs ``importlib.metadata.version("crc32c")`` to set ``__version__``:
importing ``importlib.metadata`` (email, zipfile, csv, ...) and scanning the installed
distributions cost ~20 ms, 7 % of the broker's start-up (``python -X importtime``).
Every module of hightide that needs the checksum imports it from here instead, which
loads only the extension module ``crc32c._crc32c`` (the package's hardware-accelerated
implementation; the same function ``crc32c.crc32c`` re-exports). If that layout ever
changes, the package is imported the ordinary way: same function, slower start-up.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]


def _extension() -> Any:
    """The ``crc32c._crc32c`` extension module, loaded by itself; None if not found."""
    loaded = sys.modules.get("crc32c._crc32c")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("crc32c")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(directory, "_crc32c" + suffix)
            if os.path.exists(path):
                ext_spec = importlib.util.spec_from_file_location("crc32c._crc32c", path)
                if ext_spec is None or ext_spec.loader is None:
                    return None
                module = importlib.util.module_from_spec(ext_spec)
                ext_spec.loader.exec_module(module)
                sys.modules["crc32c._crc32c"] = module  # ``import crc32c`` later reuses it
                return module
    return None


def _load() -> Callable[..., int]:
    try:
        module = _extension()
        if module is not None and callable(getattr(module, "crc32c", None)):
            fn: Callable[..., int] = module.crc32c
            return fn
    except (ImportError, OSError):
        pass
    from crc32c import crc32c as fallback
    return fallback


crc32c: Callable[..., int] = _load()
"""``crc32c(data, value=0) -> int``: the CRC-32C of ``data`` (any buffer), continuing
from ``value``."""
