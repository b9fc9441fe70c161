"""Authorizer and SASL costs, in-process; prints JSON.

* ``authorize`` calls/s over N ACL bindings (default 1,000: literal topic ACLs for many
  principals, prefixed ACLs of several lengths, wildcard and DENY bindings, group ACLs),
  for a mix of allowed, denied (DENY hit) and default-denied requests, against the cost
  of a plain dict look-up measured in the same run (the ratio is what to read);
* the brute-force alternative (scan every binding per call) for comparison;
* a full SCRAM-SHA-256/512 server exchange (server side only: the client's PBKDF2 is done
  once, outside the timing) and a PLAIN check, per second.

    .venv/bin/python bench/security_authorizer.py [--acls 1000] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from collections.abc import Callable

from hightide.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from hightide.security.authorizer import AclIndex, Authorizer
from hightide.security.sasl_plain import PlainServer
from hightide.security.scram import ScramClient, ScramMechanism, ScramServer, credential_from_password

T, G = ResourceType.TOPIC, ResourceType.GROUP
O = AclOperation


def build(n: int, rng: random.Random) -> AclIndex:
    index = AclIndex()
    kinds = 0
    while len(index) < n:
        k = kinds % 10
        user = f"User:u{rng.randrange(200)}"
        if k < 6:
            acl = AclBinding(T, f"topic-{rng.randrange(2000)}", PatternType.LITERAL, user, "*",
                             rng.choice([O.READ, O.WRITE, O.DESCRIBE]), AclPermissionType.ALLOW)
        elif k < 8:
            acl = AclBinding(T, f"team{rng.randrange(50)}-", PatternType.PREFIXED, user, "*",
                             O.WRITE, AclPermissionType.ALLOW)
        elif k < 9:
            acl = AclBinding(G, f"group-{rng.randrange(500)}", PatternType.LITERAL, user, "*", O.READ,
                             AclPermissionType.ALLOW)
        else:
            acl = AclBinding(T, f"topic-{rng.randrange(2000)}", PatternType.LITERAL, user, "10.0.0.9", O.ALL,
                             AclPermissionType.DENY)
        index.add(f"id{kinds}", acl)
        kinds += 1
    index.add("wild", AclBinding(T, "*", PatternType.LITERAL, "User:monitor", "*", O.DESCRIBE,
                                 AclPermissionType.ALLOW))
    return index


def rate(fn: Callable[[], object], seconds: float) -> float:
    n, start = 0, time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(200):
            fn()
        n += 200
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def brute_force(acls: list[AclBinding], principal: str, host: str, op: AclOperation, rt: ResourceType,
                name: str) -> bool:
    allowed = False
    for a in acls:
        if a.resource_type != rt:
            continue
        if not ((a.pattern_type == PatternType.LITERAL and a.resource_name in (name, "*")) or
                (a.pattern_type == PatternType.PREFIXED and name.startswith(a.resource_name))):
            continue
        if a.principal not in (principal, "User:*") or a.host not in ("*", host):
            continue
        implied = (a.permission == AclPermissionType.ALLOW and op == O.DESCRIBE
                   and a.operation in (O.READ, O.WRITE, O.DELETE, O.ALTER))
        if a.operation not in (O.ALL, op) and not implied:
            continue
        if a.permission == AclPermissionType.DENY:
            return False
        allowed = True
    return allowed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    rng = random.Random(7)
    index = build(args.acls, rng)
    auth = Authorizer(index)
    granted = [a for a in index if a.resource_type == T and a.permission == AclPermissionType.ALLOW]
    requests = []
    for i in range(1000):
        if i % 2:  # an action some binding grants (allowed unless a DENY also applies)
            a = rng.choice(granted)
            name = a.resource_name if a.pattern_type == PatternType.LITERAL else a.resource_name + "orders"
            requests.append((a.principal, "10.0.0.1", a.operation if a.operation != O.ALL else O.READ, T,
                             "topic-1" if name == "*" else name))
        else:  # a random principal, topic and operation (mostly default-denied)
            requests.append((f"User:u{rng.randrange(200)}", rng.choice(["10.0.0.1", "10.0.0.9"]),
                             rng.choice([O.READ, O.WRITE, O.DESCRIBE]), T,
                             rng.choice([f"topic-{rng.randrange(2000)}", f"team{rng.randrange(50)}-x"])))
    outcomes = [auth.authorize(*r) for r in requests]
    acl_list = list(index)
    assert outcomes == [brute_force(acl_list, *r) for r in requests]  # same answers (no super users, no default)
    it = itertools.cycle(requests)
    per_call = rate(lambda: auth.authorize(*next(it)), args.seconds)
    literal = [r for r in requests if r[4].startswith("topic-")]
    prefixed = [r for r in requests if r[4].startswith("team")]
    it_l, it_p = itertools.cycle(literal), itertools.cycle(prefixed)
    literal_rate = rate(lambda: auth.authorize(*next(it_l)), args.seconds)
    prefixed_rate = rate(lambda: auth.authorize(*next(it_p)), args.seconds)
    it2 = itertools.cycle(requests)
    scan = rate(lambda: brute_force(acl_list, *next(it2)), args.seconds)
    d = {("topic", i): i for i in range(2000)}
    dict_rate = rate(lambda: d.get(("topic", 5)), args.seconds)

    out: dict[str, object] = {
        "acls": len(index), "allowed_fraction": round(sum(outcomes) / len(outcomes), 3),
        "authorize_per_s": round(per_call), "authorize_literal_names_per_s": round(literal_rate),
        "authorize_prefixed_names_per_s": round(prefixed_rate), "brute_force_scan_per_s": round(scan),
        "dict_lookup_per_s_same_run": round(dict_rate),
        "authorize_cost_in_dict_lookups": round(dict_rate / per_call, 1),
    }
    for mech in ScramMechanism:
        cred = credential_from_password(mech, "pw", iterations=4096)
        client = ScramClient(mech, "u", "pw", nonce=lambda: "CNONCE")
        probe = ScramServer(mech, lambda u: cred, nonce=lambda: "SNONCE")
        first = client.first()
        final = client.final(probe.step(first))  # the client's PBKDF2, once

        def exchange(mech: ScramMechanism = mech, cred: object = cred, first: bytes = first,
                     final: bytes = final) -> None:
            s = ScramServer(mech, lambda u: cred, nonce=lambda: "SNONCE")  # type: ignore[arg-type,return-value]
            s.step(first)
            s.step(final)
        out[f"{mech.mechanism_name}_server_exchanges_per_s"] = round(rate(exchange, args.seconds))
    out["PLAIN_checks_per_s"] = round(rate(lambda: PlainServer({"u": "pw"}).step(b"\x00u\x00pw"), args.seconds))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
