"""Per-trial overhead of a sweep: what a trial costs beyond its own training.

The same N tiny trials run as a sweep twice: as in-process function trials, and with a Ray Train
``TorchTrainer`` per trial. Each trial reports when it ended and how long its training (and test
evaluation) took; with one trial at a time, the wall time between two trials' ends minus the
later one's training is that trial's overhead: scheduling, process start, config validation,
MLflow bookkeeping, checkpoint reporting, and for the TorchTrainer its worker group start-up.
The first trial (which also pays for imports in a fresh worker) is left out of the median.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from itrlab.config.sweep import SweepSpec
from itrlab.sweep.runner import run_sweep


@dataclass(frozen=True)
class OverheadMeasurement:
    label: str
    overheads: list[float]  # seconds, trials 2..N
    training: list[float]  # seconds of training + test per trial

    @property
    def median(self) -> float:
        return statistics.median(self.overheads)


def overhead_sweep(name: str, experiment: str, n_trials: int, trainer: str, overrides: list[str]) -> SweepSpec:
    """N trials that differ only by seed, one at a time."""
    return SweepSpec(
        name=name,
        experiment=experiment,
        overrides=overrides,
        grid={},
        seeds=list(range(n_trials)),
        trainer=trainer,
        concurrency=1,
        resources={"cpu": 1},
        max_failures=0,
    )


def measure(spec: SweepSpec, storage: Path, label: str) -> OverheadMeasurement:
    result = run_sweep(spec, storage=storage)
    finished = sorted(
        (row for row in result.rows if row.status == "finished"), key=lambda r: r.metrics["trial_end_time"]
    )
    if len(finished) != len(result.rows) or len(finished) < 2:
        raise RuntimeError(f"{label}: {len(finished)} of {len(result.rows)} trials finished; need all, and at least 2")
    ends = [row.metrics["trial_end_time"] for row in finished]
    training = [row.metrics["run_seconds"] for row in finished]
    overheads = [ends[i] - ends[i - 1] - training[i] for i in range(1, len(finished))]
    return OverheadMeasurement(label, overheads, training[1:])
