"""What authorization costs Produce and Fetch, in-process; prints JSON.

One broker in-process with N ACL bindings (default 1,000, the mix of
``bench/security_authorizer.py``) plus the ALLOWs the benchmark principal needs. The
Produce (acks=1, one small batch to each of P partitions of one topic) and Fetch (the
same partitions from offset 0, min bytes 0) handlers are called directly with a
:class:`RequestContext` carrying the principal, in interleaved rounds with
``authorizer.class.name`` empty (off, the default) and ``standard`` (on) — the same broker,
logs and ACLs, so the difference is the authorization (one check per topic per request)
and nothing else.

    .venv/bin/python bench/authorization_requests.py [--acls 1000] [--partitions 4] [--seconds 1.0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from security_authorizer import build  # noqa: E402

from hightide import Broker, BrokerConfig  # noqa: E402
from hightide.cluster.controller import NewTopic  # noqa: E402
from hightide.cluster.security_control import create_acls  # noqa: E402
from hightide.protocol.build import materialize  # noqa: E402
from hightide.protocol.codec import RequestHeader, request_schema  # noqa: E402
from hightide.protocol.records import build_batch  # noqa: E402
from hightide.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType  # noqa: E402
from hightide.server.context import RequestContext  # noqa: E402

PRINCIPAL = "User:bench"
TOPIC = "bench-topic"


async def _broker(data_dir: str, acls: int, partitions: int, authorized: bool) -> Broker:
    overrides: dict[str, Any] = {"log.flush.interval.ms": 10**9, "authorizer.class.name": "standard"}
    b = Broker(BrokerConfig.load(overrides=overrides), data_dir=data_dir, listen=("127.0.0.1", 0))
    await b.start()
    _, records = b.controller.create_topics(b.image, [NewTopic(TOPIC, partitions)])
    await b.metadata_writer.commit_metadata(records)
    if authorized:
        bindings = list(build(acls, random.Random(7)))
        bindings += [AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, PRINCIPAL, "*", op,
                                AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
        _, acl_records = create_acls(b.image.security, bindings)
        await b.metadata_writer.commit_metadata(acl_records)
    return b


def _requests(partitions: int) -> tuple[Any, Any]:
    batch = build_batch([(None, b"x" * 100, [], int(time.time() * 1000))])
    produce = materialize(request_schema(0, 9), {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": p, "records": batch} for p in range(partitions)]}]})
    fetch = materialize(request_schema(1, 12), {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "topics": [
            {"topic": TOPIC, "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                                             "last_fetched_epoch": -1, "log_start_offset": -1,
                                             "partition_max_bytes": 4096} for p in range(partitions)]}]})
    return produce, fetch


async def _rate(b: Broker, api_key: int, version: int, req: Any, seconds: float) -> float:
    """Calls of the handler per second (answers awaited when the handler returns one)."""
    header = RequestHeader(api_key, version, 1, "bench")
    fn = b.routes[api_key].fn
    services = b.services
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            result = fn(RequestContext(services, header, "127.0.0.1:1", {}, principal=PRINCIPAL), req)
            if hasattr(result, "__await__"):
                await result
        n += 50
    return n / seconds


def _check_us(b: Broker, api_key: int, version: int, req: Any, n: int = 20000) -> float:
    """µs per call of the handler's authorization step alone (produce/fetch
    ``_refused_topics``: builds the authorizer and checks each topic)."""
    from hightide.server.handlers import fetch as fetch_handler
    from hightide.server.handlers import produce as produce_handler
    step = produce_handler._refused_topics if api_key == 0 else fetch_handler._refused_topics
    ctx = RequestContext(b.services, RequestHeader(api_key, version, 1, "bench"), "127.0.0.1:1", {},
                         principal=PRINCIPAL)
    start = time.perf_counter()
    for _ in range(n):
        step(ctx, req)
    return (time.perf_counter() - start) / n * 1e6


async def main(args: argparse.Namespace) -> dict:
    produce, fetch = _requests(args.partitions)
    with tempfile.TemporaryDirectory() as d:
        b = await _broker(os.path.join(d, "data"), args.acls, args.partitions, True)
        try:
            rates: dict[str, list[float]] = {k: [] for k in ("produce_off", "produce_on", "fetch_off", "fetch_on")}
            checks: dict[str, list[float]] = {k: [] for k in rates}
            for _ in range(args.rounds):
                for name, authorizer in (("off", ""), ("on", "standard")):
                    b.config.values["authorizer.class.name"] = authorizer
                    rates[f"produce_{name}"].append(await _rate(b, 0, 9, produce, args.seconds))
                    rates[f"fetch_{name}"].append(await _rate(b, 1, 12, fetch, args.seconds))
                    checks[f"produce_{name}"].append(_check_us(b, 0, 9, produce))
                    checks[f"fetch_{name}"].append(_check_us(b, 1, 12, fetch))
        finally:
            await b.stop()
    best = {k: max(v) for k, v in rates.items()}
    out = {"acls": args.acls, "partitions_per_request": args.partitions, "rounds": args.rounds,
           "requests_per_s": {k: round(v) for k, v in best.items()},
           "us_per_request": {k: round(1e6 / v, 1) for k, v in best.items()},
           "handler_difference_us": {
               op: round(1e6 / best[f"{op}_on"] - 1e6 / best[f"{op}_off"], 1) for op in ("produce", "fetch")},
           "authorization_step_us": {k: round(min(v), 2) for k, v in checks.items()},
           "load_average": os.getloadavg()}
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--acls", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    print(json.dumps(asyncio.run(main(p.parse_args())), indent=2))
