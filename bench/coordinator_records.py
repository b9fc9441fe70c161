"""CPU cost of the coordinator record codecs (``__consumer_offsets``,
``__share_group_state``, ``__transaction_state``): microseconds per call, the best of
several timeit repeats (the least disturbed by other load on the machine).

* ``offset_commit_50``: the records of a 50-partition OffsetCommit encoded as the commit
  path does (``shard.encode_records``) — the hot path;
* ``offset_encode`` / ``offset_decode``: one offset key and value, encoded / decoded
  (``shard.encode_record`` / ``shard.decode_record``: what loading replays per record);
* ``group_metadata``, ``consumer_member``, ``consumer_assignment``: encode + decode of a
  classic group with 3 members, a KIP-848 member's metadata, its current assignment;
* ``share_snapshot_10`` / ``share_snapshot_100``: encode + decode of a ShareSnapshot with
  10 / 100 state batches;
* ``txn_state``: encode + decode of an Ongoing transaction over 6 partitions.

Uses only the records modules' public functions, so ``PYTHONPATH=<other tree>/src``
measures another tree the same way (before/after comparisons). Prints one JSON document.

    python bench/coordinator_records.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
import uuid
from pathlib import Path
from typing import Callable

if not any(p.endswith("/src") for p in sys.path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hightide.group import consumer_records as CR  # noqa: E402
from hightide.group.records import GroupKey, GroupValue, MemberMetadata, OffsetKey, OffsetValue  # noqa: E402
from hightide.group.shard import decode_record, encode_record, encode_records  # noqa: E402
from hightide.share import records as SS  # noqa: E402
from hightide.share.types import StateBatch  # noqa: E402
from hightide.txn import records as TX  # noqa: E402
from hightide.txn.state import TxnMetadata, TxnState  # noqa: E402

TID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")


def _round_trip(key: object, value: object) -> Callable[[], object]:
    def run() -> object:
        k, v = encode_record(key, value)
        return decode_record(k, v)
    return run


def cases() -> dict[str, Callable[[], object]]:
    commit = [(OffsetKey("group-1", "orders", p), OffsetValue(1000 + p, 5, "m" * 32, 1_700_000_000_000))
              for p in range(50)]
    okey, oval = commit[7]
    okb, ovb = encode_record(okey, oval)
    members = tuple(MemberMetadata(f"consumer-{i}-0f0e", None, "client", "/10.0.0.1", 300000, 45000,
                                   b"\x00\x01" * 20, b"\x00\x02" * 30) for i in range(3))
    group = GroupValue("consumer", 7, "range", "consumer-0-0f0e", 1_700_000_000_000, members)
    member = CR.ConsumerGroupMemberMetadataValue(None, None, "client", "/10.0.0.1", ("orders", "payments"), None,
                                                 300000, "uniform")
    assignment = CR.ConsumerGroupCurrentMemberAssignmentValue(4, 3, 0, ((TID, (0, 1, 2, 3)),), ())
    skey = SS.ShareSnapshotKey("share-group", TID, 3)

    def snapshot(n: int) -> Callable[[], object]:
        value = SS.ShareSnapshotValue(1, 2, 5, 100, 1000, 2000,
                                      tuple(StateBatch(100 + 2 * i, 101 + 2 * i, 2, 1) for i in range(n)))

        def run() -> object:
            return SS.decode_value(SS.decode_key(SS.encode_key(skey)), SS.encode_value(value))  # type: ignore[arg-type]
        return run

    txn = TxnMetadata("txn-1", 5000, 3, 60000, TxnState.ONGOING,
                      frozenset({("orders", p) for p in range(4)} | {("payments", 0), ("payments", 1)}), 100, 200)

    def txn_rt() -> object:
        return TX.decode_value(TX.decode_key(TX.encode_key("txn-1")) or "", TX.encode_value(txn))

    return {
        "offset_commit_50": lambda: encode_records(commit),  # type: ignore[arg-type]
        "offset_encode": lambda: encode_record(okey, oval),
        "offset_decode": lambda: decode_record(okb, ovb),
        "group_metadata": _round_trip(GroupKey("group-1"), group),
        "consumer_member": _round_trip(CR.ConsumerGroupMemberMetadataKey("group-1", "member-1"), member),
        "consumer_assignment": _round_trip(CR.ConsumerGroupCurrentMemberAssignmentKey("group-1", "member-1"),
                                           assignment),
        "share_snapshot_10": snapshot(10),
        "share_snapshot_100": snapshot(100),
        "txn_state": txn_rt,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args()
    repeats = 3 if args.quick else 7
    out = {}
    for name, fn in cases().items():
        timer = timeit.Timer(fn)
        number, _ = timer.autorange()
        best = min(timer.repeat(repeat=repeats, number=number)) / number
        out[name] = round(best * 1e6, 3)
    import hightide
    print(json.dumps({"tree": str(Path(hightide.__file__).resolve().parents[1]), "us_per_call": out}, indent=1))


if __name__ == "__main__":
    main()
