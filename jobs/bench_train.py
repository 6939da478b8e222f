"""Time training epochs of an experiment on this device against the in-run compute floor.

Prints pairs/s, the share of each step (and of the epoch) spent waiting for data, the GPU's busy
share (NVML; on a CPU the process's CPU share) and the ratio to the floor (the same model's
train step on batches already on the device). See itrlab.bench.train.

    python jobs/bench_train.py                                  # vsepp_synthetic_small, 2 epochs
    python jobs/bench_train.py --data-path resident --epochs 3
    python jobs/bench_train.py -c xattn_synthetic_small --precision bf16 train.batch_size=64
"""

import sys

from itrlab.bench.train import bench_cli

if __name__ == "__main__":
    sys.exit(bench_cli())
