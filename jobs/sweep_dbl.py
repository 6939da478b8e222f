"""Sweep DBL's hyper-parameters, strategies and scenarios on Ray Tune; every trial lands in MLflow.

    python jobs/sweep_dbl.py --preset smoke          # A vs F on synthetic 'small', a few minutes
    python jobs/sweep_dbl.py                         # Table IV: strategies A-I under OSS, 3 seeds
    python jobs/sweep_dbl.py --preset table2         # OAS/OSS/MSS against DR, RKD, DML, DINO, DINO*
    python jobs/sweep_dbl.py --optuna                # Optuna over γ, α, strategy and scenario
    python jobs/sweep_dbl.py --resume                # continue the interrupted sweep
    ray job submit --working-dir . -- python jobs/sweep_dbl.py --preset smoke

Starts a local Ray, on loopback only, when RAY_ADDRESS is unset (under `ray job submit` it joins the
job's cluster). Exit status: 0 no trial failed (and one finished), 1 a trial failed or none finished,
2 bad input (before Ray or MLflow start), 130 interrupted by Ctrl-C (`--resume` continues).
"""

import sys

from itrlab.cli import sweep_dbl_cli

if __name__ == "__main__":
    sys.exit(sweep_dbl_cli())
