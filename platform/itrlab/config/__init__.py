"""Typed, validated experiment configs composed from YAML files and ``key=value`` overrides."""

from itrlab.config.loader import compose, config_dir, load_experiment, validate
from itrlab.config.schema import ExperimentConfig, flatten

__all__ = ["ExperimentConfig", "compose", "config_dir", "flatten", "load_experiment", "validate"]
