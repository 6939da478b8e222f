"""Data-parallel scaling on this machine: one Ray Train worker against N workers, same data and cores.

    python jobs/bench_ddp.py                              # vsepp_synthetic_small, 2 epochs: 1x1, 1x2, 2x1
    python jobs/bench_ddp.py -c dbl_synthetic_small --epochs 3
    python jobs/bench_ddp.py --workers 4 --cores 4

Three configurations run under a TorchTrainer on a local Ray, one after the other, with the same
experiment and seed: one worker on one worker's share of the cores (``1 x C/N`` threads), one worker on
all C cores (``1 x C``), and ``N x C/N`` (each worker trains its shard of every epoch, DDP averages the
gradients). The report gives each one's median epoch time and steps per worker, and the ratios: N
workers against one worker on one share (target: about 1/N, each added worker bringing its cores) and
against one worker on all cores. See itrlab.bench.ddp.
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main() -> int:
    from itrlab.config.choices import ChoicesHelpFormatter, experiment_names, list_choices

    class Formatter(ChoicesHelpFormatter, argparse.RawDescriptionHelpFormatter):
        pass

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=Formatter)
    list_choices(
        parser.add_argument(
            "-c", "--config", default="vsepp_synthetic_small", help="experiment (default: %(default)s)"
        ),
        experiment_names,
    )
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per configuration (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="data-parallel workers N (default: %(default)s)")
    parser.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU cores both configurations use (default: this machine's, %(default)s)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    if args.workers < 2 or args.epochs < 1 or args.cores % args.workers:
        parser.error(f"--workers must be >= 2 and divide --cores ({args.cores}); --epochs >= 1")
    from itrlab.bench.ddp import run_scaling  # after the arguments: --help answers without loading Ray and torch

    workdir = Path(tempfile.mkdtemp(prefix="itrlab-bench-ddp-"))
    overrides = [*args.overrides, f"output.dir={workdir / 'runs'}"]
    share, single, parallel = run_scaling(args.config, overrides, args.workers, args.cores, args.epochs, workdir)

    print(f"\n{args.config}: {args.epochs} epochs each, {args.cores} cores, load average now {os.getloadavg()[0]:.1f}")
    print(f"{'workers x threads':<20} {'steps/worker':>13} {'median epoch (s)':>17}   epochs (s)")
    for run in (share, single, parallel):
        values = ", ".join(f"{s:.2f}" for s in run.epoch_seconds)
        print(f"{f'{run.workers} x {run.threads}':<20} {run.steps_per_epoch:>13} {run.median:>17.2f}   {values}")
    ideal = 1 / parallel.workers
    print(
        f"{parallel.workers} workers / 1 worker on one share of the cores: {parallel.median / share.median:.2f}   "
        f"[ideal {ideal:.2f}: each added worker brings its cores]"
    )
    print(
        f"{parallel.workers} workers / 1 worker on all {args.cores} cores: {parallel.median / single.median:.2f}   "
        f"(DDP against torch's own threading of each step)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
