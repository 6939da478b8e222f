"""What a training reports at the end of each epoch: a line on the console, the loss's history (the metrics go to
MLflow through :class:`~itrlab.train.epoch_metrics.MlflowEpochLogger`)."""

from __future__ import annotations

import logging
from typing import TextIO

from itrlab.console_log import emit
from itrlab.train.decay_choice import DecayChoice
from itrlab.train.loop import EpochReport

_log = logging.getLogger(__name__)


class ConsoleProgress:
    """One line per epoch, logged (the console's stdout: whatever ``sys.stdout`` is when the line is logged,
    itrlab.console_log); ``stream``: written there instead."""

    def __init__(self, stream: TextIO | None = None, prefix: str = ""):
        self.stream = stream
        self.prefix = prefix

    def on_epoch_end(self, report: EpochReport) -> None:
        val = report.val
        marker = " *best*" if report.is_best else ""
        # a run choosing its decay: the schedules the epoch belongs to, and the best of the one in training
        branch = f"  [decay after {', '.join(map(str, report.branches))}]" if report.branches else ""
        line = (
            f"{self.prefix}epoch {report.epoch:>3}/{report.epochs}  loss {report.loss:9.4f}  lr {report.lr:.2e}  "
            f"val rsum {val.rsum:6.1f} (i2t R@1 {val.i2t_r1:5.1f}, t2i R@1 {val.t2i_r1:5.1f})  "
            f"{report.seconds:5.1f}s{marker}{branch}"
        )
        emit(_log, line, self.stream)

    def on_decay_chosen(self, choice: DecayChoice) -> None:
        emit(_log, f"{self.prefix}{choice.describe()}", self.stream)


class LossHistory:
    """The training loss and its parts per epoch, as this process saw them (``loss``, ``loss_<part>`` ->
    [(epoch, value)]; a run that chose its decay: the chosen branch's): what the CLI's last lines read the loss's
    plateau from (itrlab.report.verdict)."""

    def __init__(self):
        self.series: dict[str, list[tuple[int, float]]] = {}

    def on_epoch_end(self, report: EpochReport) -> None:
        for name, value in {"loss": report.loss, **{f"loss_{k}": v for k, v in report.parts.items()}}.items():
            self.series.setdefault(name, []).append((report.epoch, float(value)))

    def on_decay_chosen(self, choice: DecayChoice) -> None:
        """A run that chose its decay: the chosen branch's losses, epoch 1 to the last, not every branch's."""
        self.series = {}
        for entry in choice.history:
            for name, value in entry.items():
                if name == "loss" or name.startswith("loss_"):
                    self.series.setdefault(name, []).append((int(entry["epoch"]), float(value)))
