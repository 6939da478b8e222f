"""Time training epochs of an experiment on this device against the in-run compute floor.

Prints pairs/s, the share of each step (and of the epoch) spent waiting for data, the GPU's busy
share (NVML; on a CPU the process's CPU share) and the ratio to the floor (the same model's
train step on batches already on the device). See itrlab.bench.floor.

    python jobs/bench_train.py                                  # vsepp_synthetic_small, 2 epochs
    python jobs/bench_train.py --data-path resident --epochs 3
    python jobs/bench_train.py -c xattn_synthetic_small --precision bf16 train.batch_size=64

With ``--busy N`` it times epochs beside N busy processes (which it starts and kills) against quiet
epochs in the same process, under the thread policy of itrlab.threads and under the old behaviour
(OpenMP's spinning threads), each in a subprocess of its own (itrlab.bench.busy):

    python jobs/bench_train.py --busy 1                         # 3 quiet + 3 busy epochs per policy
    python jobs/bench_train.py --busy 1 --max-steps 60 --policy new
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

from itrlab.bench.train import bench_cli  # importing itrlab sets OpenMP's wait policy first (itrlab.threads)

if __name__ == "__main__":
    sys.exit(bench_cli())
