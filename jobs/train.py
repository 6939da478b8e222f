"""Train one model and print its test recall table (the same as `itrlab train`).

    python jobs/train.py                                   # VSE++ on the synthetic 'small' data
    python jobs/train.py -c convsepp_synthetic_small train.epochs=5
    python jobs/train.py --resume                          # continue the latest run of the experiment

Exit status: 0 done, 1 the run failed, 2 bad input (before MLflow or training start), 130 interrupted
by Ctrl-C (the MLflow run ends KILLED; --resume continues from the last checkpoint).
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

from itrlab.cli import train_cli

if __name__ == "__main__":
    sys.exit(train_cli())
