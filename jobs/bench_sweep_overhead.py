"""Per-trial overhead of in-process function trials against a TorchTrainer per trial.

    python jobs/bench_sweep_overhead.py              # 6 tiny trials each way on a local Ray
    python jobs/bench_sweep_overhead.py --trials 10

Both runs use the same tiny experiment (VSE++ on the tiny synthetic data, 1 epoch), one trial at a
time, in one process and one Ray session; the report gives the median overhead of each, their
ratio, and the target (in-process overhead under 1 s per trial on 2 CPUs).
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

TARGET_SECONDS = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6, help="trials per way (default: %(default)s)")
    parser.add_argument("--experiment", default="vsepp_synthetic_tiny")
    args = parser.parse_args()
    if args.trials < 3:
        parser.error("--trials must be at least 3 (the first trial is left out of the median)")
    # after the arguments: --help and a bad argument answer without loading Ray, torch and MLflow
    import ray

    from itrlab.bench.sweep_overhead import measure, overhead_sweep

    workdir = Path(tempfile.mkdtemp(prefix="itrlab-bench-sweep-"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    overrides = [f"dataset.root={workdir / 'data'}", "train.epochs=1"]
    # logical CPUs to spare: a TorchTrainer trial holds its controller and workers at once
    ray.init(num_cpus=max(4, os.cpu_count() or 1), log_to_driver=False)  # the dashboard frees finished trainers
    runs = []
    for trainer, label in (("auto", "in-process function trials"), ("torch", "TorchTrainer per trial")):
        spec = overhead_sweep(f"bench_overhead_{trainer}", args.experiment, args.trials, trainer, overrides)
        runs.append(measure(spec, workdir / "sweeps", label))
    ray.shutdown()

    print(
        f"\n{args.trials} trials each ({args.experiment}, 1 epoch), one at a time, {os.cpu_count()} CPUs; "
        "overhead = time between trial ends - the trial's own training, first trial left out"
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
