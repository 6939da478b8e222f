"""Methods by name: the names a config's ``method.name`` may take."""

from __future__ import annotations

from itrlab.config import ExperimentConfig
from itrlab.methods.base import MethodModule
from itrlab.methods.dual import DualEncoderMethod

METHODS: dict[str, type[MethodModule]] = {
    "vse": DualEncoderMethod,
    "vsepp": DualEncoderMethod,
    "mvn": DualEncoderMethod,
    "convse": DualEncoderMethod,
    "convsepp": DualEncoderMethod,
}


def build_method(config: ExperimentConfig, *, vocab_size: int, feature_dim: int) -> MethodModule:
    cls = METHODS[config.method.name]
    return cls.from_config(config, vocab_size=vocab_size, feature_dim=feature_dim)
