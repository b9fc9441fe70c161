"""``--command-config FILE``: Kafka client properties for the console's admin client.

The file is read by the shared loader (:mod:`hightide.client.properties`), as every
hightide client command reads it: Kafka's properties syntax and client config names,
security included (``security.protocol``, ``sasl.*``, ``ssl.*`` PEM files). A security
setting the client cannot honour is refused with a clear error instead of being silently
ignored (connecting without the TLS or SASL the file asks for would be wrong).
"""

from __future__ import annotations

from ..client.properties import ClientConfigError, admin_options_from, parse_properties

__all__ = ["ClientConfigError", "admin_options_from", "parse_properties"]
