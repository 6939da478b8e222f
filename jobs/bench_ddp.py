"""Data-parallel scaling on this machine: one Ray Train worker against N workers, same data and cores.

    python jobs/bench_ddp.py                              # vsepp_synthetic_small, 2 epochs, 1x2 vs 2x1
    python jobs/bench_ddp.py -c dbl_synthetic_small --epochs 3
    python jobs/bench_ddp.py --workers 4 --cores 4

Both configurations run under a TorchTrainer on a local Ray, one after the other, with the same
experiment, seed and cores: ``1 x C`` threads, then ``N x C/N`` (each worker trains its shard of every
epoch, DDP averages the gradients). The report gives each configuration's median epoch time, steps per
worker and the ratio (target: about 1/N where the cores are free). See itrlab.train.ddp_bench.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

from itrlab.train.ddp_bench import run_scaling


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default="vsepp_synthetic_small", help="experiment (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per configuration (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="data-parallel workers N (default: %(default)s)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                        help="CPU cores both configurations use (default: this machine's, %(default)s)")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    if args.workers < 2 or args.epochs < 1 or args.cores % args.workers:
        parser.error(f"--workers must be >= 2 and divide --cores ({args.cores}); --epochs >= 1")

    workdir = Path(tempfile.mkdtemp(prefix="itrlab-bench-ddp-"))
    overrides = [*args.overrides, f"output.dir={workdir / 'runs'}"]
    single, parallel = run_scaling(args.config, overrides, args.workers, args.cores, args.epochs, workdir)

    print(f"\n{args.config}: {args.epochs} epochs each, {args.cores} cores, load average now "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'workers x threads':<20} {'steps/worker':>13} {'median epoch (s)':>17}   epochs (s)")
    for run in (single, parallel):
        values = ", ".join(f"{s:.2f}" for s in run.epoch_seconds)
        print(f"{f'{run.workers} x {run.threads}':<20} {run.steps_per_epoch:>13} {run.median:>17.2f}   {values}")
    ratio = parallel.median / single.median
    print(f"ratio ({parallel.workers} workers / 1 worker): {ratio:.2f}   [ideal {1 / parallel.workers:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
