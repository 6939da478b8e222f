"""A stage's identity (:mod:`itrlab.train.stages`): the key of its folder, which runs and sweep trials that
need the same stage share. Pure data, no torch and no MLflow: ``--dry-run`` counts a sweep's shared
stages with it before anything starts."""

from __future__ import annotations

import hashlib
import json

from itrlab.config import ExperimentConfig


def stage_key(config: ExperimentConfig, data_digest: str) -> str:
    """What decides that two runs need the same stage: its resolved config and the data."""
    tree = {key: value for key, value in config.dump().items() if key not in ("output", "tracking", "stages")}
    payload = json.dumps({"config": tree, "data": data_digest}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]
