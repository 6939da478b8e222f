"""Per-trial overhead of a sweep: in-process function trials against a Ray Train ``TorchTrainer`` per trial (the
baseline), measured in the same run.

    python benchmarks/sweep_overhead.py              # 6 tiny trials each way on a local Ray
    python benchmarks/sweep_overhead.py --trials 10

The same N tiny trials (VSE++ on the tiny synthetic data, 1 epoch, seeds 0..N-1) run as a sweep twice, one trial at
a time, in one process and one Ray session. Each trial reports when it ended and how long its training (and test
evaluation) took; the wall time between two trials' ends minus the later one's training is that trial's overhead:
scheduling, process start, config validation, MLflow bookkeeping, checkpoint reporting, and for the TorchTrainer
its worker group start-up. The first trial (which also pays for imports in a fresh worker) is left out of the
median. The report gives the median overhead of each way, their ratio, the load average, and the target
(in-process overhead under 1 s per trial on 2 CPUs).
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common import load_average

if TYPE_CHECKING:
    from itrlab.config.sweep import SweepSpec

TARGET_SECONDS = 1.0


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
    from itrlab.config.sweep import SweepSpec

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
    from itrlab.sweep.runner import run_sweep

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6, help="trials per way (default: %(default)s)")
    parser.add_argument("--experiment", default="vsepp_synthetic_tiny")
    args = parser.parse_args()
    if args.trials < 3:
        parser.error("--trials must be at least 3 (the first trial is left out of the median)")
    # after the arguments: --help and a bad argument answer without loading Ray, torch and MLflow
    import ray

    workdir = Path(tempfile.mkdtemp(prefix="itrlab-bench-sweep-"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    overrides = [f"dataset.root={workdir / 'data'}", "train.epochs=1"]
    # logical CPUs to spare: a TorchTrainer trial holds its controller and workers at once
    ray.init(num_cpus=max(4, os.cpu_count() or 1), log_to_driver=False)  # the dashboard frees finished trainers
    runs, before = [], load_average()
    for trainer, label in (("auto", "in-process function trials"), ("torch", "TorchTrainer per trial")):
        spec = overhead_sweep(f"bench_overhead_{trainer}", args.experiment, args.trials, trainer, overrides)
        runs.append(measure(spec, workdir / "sweeps", label))
    ray.shutdown()

    print(
        f"\n{args.trials} trials each ({args.experiment}, 1 epoch), one at a time, {os.cpu_count()} CPUs; "
        f"overhead = time between trial ends - the trial's own training, first trial left out; 1-min load "
        f"average {before:.2f} before, {load_average():.2f} after"
    )
    print(f"{'way':<30} {'median overhead (s)':>20} {'overheads (s)':<40} {'median training (s)':>20}")
    for run in runs:
        values = ", ".join(f"{v:.2f}" for v in run.overheads)
        print(f"{run.label:<30} {run.median:>20.2f} {values:<40} {statistics.median(run.training):>20.2f}")
    in_process, torch_trainer = runs
    print(f"ratio (TorchTrainer / in-process): {torch_trainer.median / in_process.median:.1f}x")
    met = in_process.median < TARGET_SECONDS
    print(
        f"in-process overhead {in_process.median:.2f} s per trial   "
        f"[target < {TARGET_SECONDS:.0f} s: {'met' if met else 'NOT met'}]"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
