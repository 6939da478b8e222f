"""The ``itrlab`` console script, ``jobs/train.py`` (``itrlab train``), and ``jobs/sweep.py`` with each paper's
sweep job (``itrlab sweep``); the one layer that prints (docs/architecture.md, "Logging").

Bad input (config, override, data, an output folder that cannot be written, an MLflow store that does not
answer) prints one line naming the field, the bad value and what is allowed, and exits with status 2 before
anything expensive starts; Ctrl-C prints one line and exits with status 130, the MLflow run (or a sweep's parent
run) ended KILLED (:mod:`~itrlab.cli.guard`). :mod:`~itrlab.cli.entry_points` puts every command's parser
together; each ``*_command(s)`` module holds its commands with their flags (``add_*_parser(s)``), and
:mod:`~itrlab.cli.arguments` what their parsers share.
"""

from itrlab.cli.entry_points import build_parser, main, parse_args, sweep_argv, sweep_cli, train_cli
from itrlab.cli.sweep_commands import cluster_command, sweep_data_root, sweep_spec_of

__all__ = [
    "build_parser",
    "cluster_command",
    "main",
    "parse_args",
    "sweep_argv",
    "sweep_cli",
    "sweep_data_root",
    "sweep_spec_of",
    "train_cli",
]
