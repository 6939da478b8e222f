"""Typed experiment configs composed from YAML files and ``key=value`` overrides.

This layer knows the sections and their types; what the methods make of them is checked by
:mod:`itrlab.assembly`, which every entry point uses to load an experiment.
"""

from itrlab.config.loader import compose, config_dir, validate
from itrlab.config.schema import ExperimentConfig, flatten

__all__ = ["ExperimentConfig", "compose", "config_dir", "flatten", "validate"]
