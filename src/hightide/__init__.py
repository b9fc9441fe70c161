"""hightide: a Kafka-compatible streaming log that knows its own lag."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__
__all__ = ["Broker", "BrokerConfig", "__version__"]

if TYPE_CHECKING:
    from .config import BrokerConfig
    from .server.broker import Broker


def __getattr__(name: str) -> Any:
    # Lazy, so `import hightide` stays cheap and pure packages never pull in asyncio.
    if name == "Broker":
        from .server.broker import Broker
        return Broker
    if name == "BrokerConfig":
        from .config import BrokerConfig
        return BrokerConfig
    raise AttributeError(name)
