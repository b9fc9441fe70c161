"""UpdateFeatures' rules (Kafka's FeatureControlManager): supported by the controller and
every registered broker, no downgrade without saying so, metadata.version never
downgraded or removed, all or nothing; and the registration check against finalized
levels."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from hightide.cluster.broker_records import RegisterBrokerRecord
from hightide.cluster.features import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, FeatureUpdate, update_features
from hightide.cluster.image import MetadataImage
from hightide.cluster.lifecycle import BrokerLifecycle, Registration
from hightide.cluster.records import FeatureLevelRecord

MV = "metadata.version"


def image(*brokers: tuple[int, int, int]) -> MetadataImage:
    img = MetadataImage()
    for i, (bid, lo, hi) in enumerate(brokers):
        img.apply(RegisterBrokerRecord(bid, str(uuid.uuid4()), i, features=((MV, lo, hi),)), i)
    return img


def apply(img: MetadataImage, records: list) -> None:
    for r in records:
        img.apply(r, img.offset + 1)


def test_an_upgrade_within_every_range_writes_one_record():
    img = image((0, 7, 25), (1, 7, 21))
    assert update_features(img, [FeatureUpdate(MV, 21)], 3000) == (ErrorCode.none, None,
                                                                     [FeatureLevelRecord(MV, 21)])
    code, msg, records = update_features(img, [FeatureUpdate(MV, 22)], 3000)
    assert (code, records) == (ErrorCode.invalid_update_version, [])
    assert msg == "Invalid update version 22 for feature metadata.version. Broker 1 only supports versions 7-21"
    code, msg, _ = update_features(img, [FeatureUpdate(MV, 26)], 3000)
    assert msg == ("Invalid update version 26 for feature metadata.version. Local controller 3000 only supports "
                   "versions 7-25")


def test_downgrades_need_a_downgrade_type_and_metadata_version_refuses_them():
    img = image()
    apply(img, update_features(img, [FeatureUpdate(MV, 20)], 1)[2])
    assert update_features(img, [FeatureUpdate(MV, 20)], 1) == (ErrorCode.none, None, [])  # unchanged: no record
    assert "without setting the upgrade type" in (update_features(img, [FeatureUpdate(MV, 19)], 1)[1] or "")
    assert "Refusing" in (update_features(img, [FeatureUpdate(MV, 19, SAFE_DOWNGRADE)], 1)[1] or "")
    assert update_features(img, [FeatureUpdate(MV, 19, UNSAFE_DOWNGRADE)], 1)[1] == \
        "Unsafe metadata.version downgrades are not supported."
    assert update_features(img, [FeatureUpdate(MV, 0, UNSAFE_DOWNGRADE)], 1)[0] == ErrorCode.invalid_update_version


def test_all_or_nothing_and_duplicates():
    img = image()
    code, _, records = update_features(img, [FeatureUpdate(MV, 20), FeatureUpdate("unknown.feature", 1)], 1)
    assert code == ErrorCode.invalid_update_version and records == []
    assert update_features(img, [FeatureUpdate(MV, 20), FeatureUpdate(MV, 21)], 1)[0] == ErrorCode.invalid_request


def test_a_broker_that_does_not_support_the_finalized_level_cannot_register():
    img = image()
    apply(img, [FeatureLevelRecord(MV, 20)])
    core = BrokerLifecycle("c")
    reply, records = core.register(img, Registration(5, "c", uuid.uuid4(), features=((MV, 7, 19),)), 0, 1)
    assert reply.error_code == ErrorCode.unsupported_version and records == []
    assert reply.message == ("Unable to register because the broker does not support finalized version 20 of "
                             "metadata.version. The broker wants a version between 7 and 19, inclusive.")
    reply, _ = core.register(img, Registration(5, "c", uuid.uuid4(), features=((MV, 7, 25),)), 0, 1)
    assert reply.error_code == ErrorCode.none
