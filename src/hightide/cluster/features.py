"""Feature levels (Kafka's ``FeatureControlManager``, behaviour not code), sans-IO.

The finalized level of a feature is a :class:`~hightide.cluster.records.FeatureLevelRecord`
in the metadata log (``MetadataImage.features``); UpdateFeatures (57) changes it. hightide
supports one feature, ``metadata.version``, numbered as Kafka's ``MetadataVersion``
levels (7 = 3.3-IV3 ... 25 = 4.0-IV3). The levels are labels here: hightide's metadata
records do not change with them yet. Nothing is finalized until the first UpdateFeatures
(the single node writes no bootstrap record, so its metadata log is unchanged).

Brokers send their supported ranges (``SUPPORTED_FEATURES``) in BrokerRegistration; a
level is accepted only if the controller and every registered broker support it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .image import MetadataImage
from .records import FeatureLevelRecord, MetadataRecord

METADATA_VERSION = "metadata.version"
#: name -> (min, max) supported level of this hightide version.
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {METADATA_VERSION: (7, 25)}

#: FeatureUpdateKey.UpgradeType values (v1+; v0's AllowDowngrade maps to 1 or 2).
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: int = UPGRADE


def update_features(image: MetadataImage, updates: Sequence[FeatureUpdate], controller_id: int,
                    supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES
                    ) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
    """Validate every update; all or nothing (Kafka answers one error for the request).
    Returns (error, message, records): a FeatureLevelRecord per changed feature."""
    records: list[MetadataRecord] = []
    names = [u.name for u in updates]
    if len(set(names)) != len(names):
        return ErrorCode.invalid_request, "Duplicate feature names in the request.", []
    for u in updates:
        error = _check(image, u, controller_id, supported)
        if error is not None:
            return ErrorCode.invalid_update_version, error, []
        if image.features.get(u.name, 0) != u.level:
            records.append(FeatureLevelRecord(u.name, u.level))
    return ErrorCode.none, None, records


def _check(image: MetadataImage, u: FeatureUpdate, controller_id: int,
           supported: Mapping[str, tuple[int, int]]) -> str | None:
    """Kafka's message for an update that cannot be applied, or None."""
    if u.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return f"Unable to update feature {u.name}: unknown upgrade type {u.upgrade_type}."
    current = image.features.get(u.name, 0)
    if u.level < current:
        if u.upgrade_type == UPGRADE:
            return (f"Invalid update version {u.level} for feature {u.name}. Can't downgrade the version of this "
                    "feature without setting the upgrade type to either safe or unsafe downgrade.")
        if u.name == METADATA_VERSION:
            return (f"Invalid metadata.version {u.level}. Refusing to perform the requested downgrade because it "
                    "might delete metadata information." if u.upgrade_type == SAFE_DOWNGRADE
                    else "Unsafe metadata.version downgrades are not supported.")
    if u.level == 0:
        return None if u.name != METADATA_VERSION else \
            f"Invalid update version 0 for feature {u.name}. The metadata.version cannot be removed."
    lo, hi = supported.get(u.name, (0, 0))
    if not lo <= u.level <= hi:
        return (f"Invalid update version {u.level} for feature {u.name}. Local controller {controller_id} only "
                f"supports versions {lo}-{hi}")
    for reg in sorted(image.brokers.values(), key=lambda r: r.broker_id):
        blo, bhi = next(((f[1], f[2]) for f in reg.features if f[0] == u.name), (0, 0))
        if not blo <= u.level <= bhi:
            return (f"Invalid update version {u.level} for feature {u.name}. Broker {reg.broker_id} only "
                    f"supports versions {blo}-{bhi}")
    return None


def api_versions_features(finalized: Mapping[str, int], epoch: int,
                          supported: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES) -> dict:
    """ApiVersionsResponse's feature fields (v3+ tagged fields) for ``materialize``:
    SupportedFeatures, FinalizedFeaturesEpoch (the offset of the image the levels come
    from; -1 when none is finalized) and FinalizedFeatures (min = max = the level, as
    Kafka reports finalized levels)."""
    return {
        "supported_features": [{"name": n, "min_version": lo, "max_version": hi}
                               for n, (lo, hi) in sorted(supported.items())],
        "finalized_features_epoch": epoch if finalized else -1,
        "finalized_features": [{"name": n, "min_version_level": lvl, "max_version_level": lvl}
                               for n, lvl in sorted(finalized.items())],
    }


__all__ = ["METADATA_VERSION", "SUPPORTED_FEATURES", "FeatureUpdate", "update_features", "api_versions_features",
           "UPGRADE", "SAFE_DOWNGRADE", "UNSAFE_DOWNGRADE"]
