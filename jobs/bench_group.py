"""Grouped training against one run at a time: a sweep's rows, their seeds trained alone and as one
group (several models of one shape as one batched model), in one process; pairs/s per member, the busy
share, the ratio against G = 1 and the table's wall time. See itrlab.bench.grouped_throughput.

    python jobs/bench_group.py --preset convse-table3 --rows VSE,VSE++ --group 3
    python jobs/bench_group.py --preset dbl-table4 --rows A,F --group 3 --steps 20
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

# importing itrlab sets OpenMP's wait policy first (itrlab.threads)
from itrlab.bench.grouped_throughput import bench_group_cli

if __name__ == "__main__":
    sys.exit(bench_group_cli())
