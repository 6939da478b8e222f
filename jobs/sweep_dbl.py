"""Sweep DBL's hyper-parameters, strategies and scenarios on Ray Tune; every trial lands in MLflow.

    python jobs/sweep_dbl.py --preset smoke          # A vs F on synthetic 'small', a few minutes
    python jobs/sweep_dbl.py                         # Table IV: strategies A-I under OSS, 3 seeds
    python jobs/sweep_dbl.py --preset table2         # OAS/OSS/MSS against DR, RKD, DML, DINO, DINO*
    python jobs/sweep_dbl.py --optuna                # Optuna over strategy, scenario, γ and α
    python jobs/sweep_dbl.py --resume                # continue the interrupted sweep
    python jobs/sweep_dbl.py --preset smoke --dry-run      # the trials, the cost, and the `ray job submit` line

`jobs/sweep.py` with DBL's Table IV as the preset it runs unless told otherwise, and `--optuna` for
`--preset dbl-optuna`; DBL's short preset names (smoke, table2, ...) are the `aliases` of its sweep files.
Starts a local Ray, on loopback only, when RAY_ADDRESS is unset (under `ray job submit` it joins the
job's cluster). Exit status: 0 no trial failed (and one finished), 1 a trial failed or none finished,
2 bad input (before Ray or MLflow start), 130 interrupted by Ctrl-C (`--resume` continues).
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

from itrlab.cli import sweep_cli

DEFAULT_PRESET = "dbl-table4"
PRESET_FLAGS = {"--optuna": ("dbl-optuna", "Optuna over DBL's strategy, scenario, γ and α")}

if __name__ == "__main__":
    sys.exit(sweep_cli(default_preset=DEFAULT_PRESET, preset_flags=PRESET_FLAGS))
