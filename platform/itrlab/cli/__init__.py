"""Command-line entry points: ``itrlab train``, ``itrlab check-config``, ``itrlab sweep``, ``itrlab report``,
``itrlab evaluate``, ``itrlab retrieve``, ``itrlab gallery``, ``itrlab make-synthetic``, ``itrlab data``,
``itrlab ray-stop``; ``jobs/train.py`` is ``itrlab train``, ``jobs/sweep.py`` and each paper's sweep job
``itrlab sweep``.

Bad input (config, override, data, an output folder that cannot be written, an MLflow store that does not
answer) prints one line naming the field, the bad value and what is allowed, and exits with status 2 before
anything expensive starts. Ctrl-C prints one line and exits with status 130, the MLflow run (or a sweep's
parent run) ended KILLED. This package is the layer that prints (docs/architecture.md, "Logging").

Who holds what:

* :mod:`~itrlab.cli.entry_points`: ``main``, ``parse_args`` and ``build_parser`` (every command's parser put
  together), the jobs' ``train_cli`` and ``sweep_cli``;
* :mod:`~itrlab.cli.train_commands`, :mod:`~itrlab.cli.sweep_commands`, :mod:`~itrlab.cli.report_command`,
  :mod:`~itrlab.cli.model_commands`, :mod:`~itrlab.cli.data_command`,
  :mod:`~itrlab.cli.ray_command`: the commands, each with its own flags
  (``add_*_parser(s)``);
* :mod:`~itrlab.cli.arguments`: what their parsers share (one-line errors, a training's experiment argument);
* :mod:`~itrlab.cli.guard`: one line and an exit status for bad input, an interruption or a full disk.
"""

from itrlab.cli.arguments import DEFAULT_EXPERIMENT
from itrlab.cli.entry_points import build_parser, job_script, main, parse_args, sweep_argv, sweep_cli, train_cli
from itrlab.cli.sweep_commands import cluster_command, sweep_data_root, sweep_presets, sweep_spec_of

__all__ = [
    "DEFAULT_EXPERIMENT",
    "build_parser",
    "cluster_command",
    "job_script",
    "main",
    "parse_args",
    "sweep_argv",
    "sweep_cli",
    "sweep_data_root",
    "sweep_presets",
    "sweep_spec_of",
    "train_cli",
]
