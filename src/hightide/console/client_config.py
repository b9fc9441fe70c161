"""``--command-config FILE``: Kafka client properties for the console's admin client.

The file uses Kafka's properties syntax and names, as ``kafka-consumer-groups.sh
--command-config`` reads it (``key=value`` or ``key: value``, ``#``/``!`` comments).
hightide's admin client speaks PLAINTEXT only today, so security settings it cannot
honour are refused with a clear error instead of being silently ignored (connecting
without the TLS or SASL the file asks for would be wrong).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["ClientConfigError", "admin_options_from", "parse_properties"]

KNOWN = {"client.id", "request.timeout.ms", "default.api.timeout.ms", "bootstrap.servers",
         "retry.backoff.ms", "retry.backoff.max.ms", "security.protocol"}


class ClientConfigError(ValueError):
    """The file cannot be used; the message names the file and the setting."""


def parse_properties(text: str) -> dict[str, str]:
    """Kafka/Java properties as a dict (no line continuations or escapes beyond ``\\=``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not seps:
            out[line] = ""
            continue
        i = min(seps)
        out[line[:i].strip()] = line[i + 1:].strip()
    return out


def admin_options_from(path: str | None) -> tuple[dict[str, Any], str | None, list[str]]:
    """(AdminClient keyword arguments, bootstrap.servers if the file sets it, warnings)
    from the properties file at ``path`` (None: no file). Raises ClientConfigError for an
    unreadable file, a bad number or a security setting the client cannot honour."""
    if path is None:
        return {}, None, []
    try:
        props = parse_properties(Path(path).read_text())
    except OSError as exc:
        raise ClientConfigError(f"cannot read --command-config {path}: {exc.strerror}") from None
    proto = props.get("security.protocol", "PLAINTEXT").upper()
    secure = sorted(k for k in props if k.startswith(("sasl.", "ssl.")))
    if proto != "PLAINTEXT" or secure:
        what = f"security.protocol={proto}" if proto != "PLAINTEXT" else secure[0]
        raise ClientConfigError(f"{path}: {what} is not supported by hightide's admin client yet "
                                f"(it connects with PLAINTEXT only).")
    opts: dict[str, Any] = {}
    try:
        if "client.id" in props:
            opts["client_id"] = props["client.id"]
        timeout = props.get("default.api.timeout.ms") or props.get("request.timeout.ms")
        if timeout:
            opts["request_timeout_s"] = int(timeout) / 1000
        if "retry.backoff.ms" in props:
            opts["retry_backoff_s"] = int(props["retry.backoff.ms"]) / 1000
        if "retry.backoff.max.ms" in props:
            opts["max_backoff_s"] = int(props["retry.backoff.max.ms"]) / 1000
    except ValueError as exc:
        raise ClientConfigError(f"{path}: {exc}") from None
    warnings = [f"{path}: the configuration '{k}' was supplied but isn't a known config." for k in props
                if k not in KNOWN]
    return opts, props.get("bootstrap.servers"), warnings
