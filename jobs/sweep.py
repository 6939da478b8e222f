"""Run any paper's sweep on Ray Tune; every trial lands in MLflow, the parent run holds the pivot.

    python jobs/sweep.py --preset coder-table2       # CODER Table 2 (components), 3 seeds
    python jobs/sweep.py --preset coder-k            # CODER Table 4 (K)
    python jobs/sweep.py --preset ascl-table2        # AsCL Table II (ablations)
    python jobs/sweep.py --preset dbl-table4         # = jobs/sweep_dbl.py
    python jobs/sweep.py --sweep my_sweep.yaml       # any sweep file
    python jobs/sweep.py --preset coder-table2 --resume
    python jobs/sweep.py --preset coder-table2 --dry-run      # the trials, the cost, and the `ray job submit` line

A preset is a file of configs/sweeps/ named with dashes. Same flags and machinery as
jobs/sweep_dbl.py. Starts a local Ray when RAY_ADDRESS is unset.
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

from itrlab.cli import sweep_cli

if __name__ == "__main__":
    sys.exit(sweep_cli())
