"""What the ``itrlab`` commands' parsers share: bad arguments as one line and exit status 2
(:class:`OneLineParser`), and a training's experiment and overrides (:func:`add_experiment_args`). Each command
module adds its own command (``add_*_parsers``); :func:`itrlab.cli.entry_points.build_parser` puts them together."""

from __future__ import annotations

import argparse

DEFAULT_EXPERIMENT = "vsepp_synthetic_small"
TRACKING_URI_HELP = "MLflow store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)"  # every --tracking-uri


def add_experiment_args(parser: argparse.ArgumentParser) -> None:
    from itrlab.config.choices import experiment_names, list_choices

    list_choices(
        parser.add_argument(
            "-c",
            "--config",
            default=DEFAULT_EXPERIMENT,
            help="experiment name under configs/experiments/ or a YAML path (default: %(default)s)",
        ),
        experiment_names,
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. train.epochs=3")


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit status 2, like every other bad input (``--help``
    shows the usage)."""

    def __init__(self, *args, **kwargs):
        from itrlab.config.choices import ChoicesHelpFormatter

        kwargs.setdefault("formatter_class", ChoicesHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
