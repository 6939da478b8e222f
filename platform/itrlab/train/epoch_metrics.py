"""Each epoch's metrics in the run's MLflow run once, at the epoch's step, and none lost when the store fails
(docs/training.md#resume, "Every epoch's metrics, once").

:class:`MlflowEpochLogger` is the training's callback that logs them: an epoch's metrics go to the run folder's
backlog (:data:`BACKLOG`) first, then to MLflow, and leave the backlog once MLflow holds them;
:meth:`~MlflowEpochLogger.catch_up` logs a resumed run's backlog at its own steps and warns of the epochs neither
holds. An epoch the run logged is not logged again: a sweep trial restored from a checkpoint older than its MLflow
run trains that epoch again, and MLflow would otherwise hold two points at one step. A run that chooses its decay
(:mod:`itrlab.train.decay_choice`) logs each epoch under the prefix of every branch whose schedule holds it
(``decay9_rsum``), and, once the choice is made, the chosen branch's curve under the plain names (what the reports
read) with the choice's figures.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from itrlab.files import atomic_write_json
from itrlab.tracking import MlflowTracker
from itrlab.train.decay_choice import DecayChoice, branch_prefix
from itrlab.train.loop import EpochReport

_log = logging.getLogger(__name__)

BACKLOG = "metrics_backlog.json"  # in the run folder: epochs' metrics not yet in MLflow
EPOCH_KEY = "loss"  # a metric every epoch logs: the steps it holds are the epochs MLflow has


class MlflowEpochLogger:
    """Logs each epoch's metrics to ``tracker``'s run at the epoch's step, once, through the backlog of
    ``run_dir`` (:data:`BACKLOG`); ``choices``: the run's ``train.lr_decay_choices`` (its branches' series)."""

    def __init__(self, tracker: MlflowTracker, run_dir: Path, choices: Sequence[int] = ()):
        self.tracker, self.path = tracker, Path(run_dir) / BACKLOG
        self.choices = tuple(choices or ())
        # per series (named by its loss: "loss", "decay9_loss"), the epochs the run holds already (a reopened
        # run's; a new run's history is empty)
        self.logged = {
            key: {step for step, _ in tracker.metric_history(tracker.run_id, key) if step >= 1}
            for key in (EPOCH_KEY, *(branch_prefix(decay) + EPOCH_KEY for decay in self.choices))
        }

    def on_epoch_end(self, report: EpochReport) -> None:
        fresh = {
            key: metrics
            for key, metrics in self._series(report).items()
            if report.epoch not in self.logged.get(key, set())
        }
        if not fresh:  # trained again after a restore: the run keeps what it logged
            return
        metrics = {name: value for values in fresh.values() for name, value in values.items()}
        kept = self._read()
        self._write({**kept, report.epoch: {**kept.get(report.epoch, {}), **metrics}})
        self.tracker.log_metrics(metrics, step=report.epoch)  # a TrackingError stops the run; the backlog keeps it
        for key in fresh:
            self.logged.setdefault(key, set()).add(report.epoch)
        self._write(kept)

    def on_decay_chosen(self, choice: DecayChoice) -> None:
        """The chosen branch's curve under the plain names, each epoch the run lacks, and the choice's figures."""
        for entry in choice.history:
            epoch = int(entry["epoch"])
            if epoch not in self.logged[EPOCH_KEY]:
                self.tracker.log_metrics({k: v for k, v in entry.items() if k != "epoch"}, step=epoch)
                self.logged[EPOCH_KEY].add(epoch)
        self.tracker.log_final_metrics(choice.metrics())

    def _series(self, report: EpochReport) -> dict[str, dict[str, float]]:
        """The epoch's metrics by series: the plain names, or those of each branch that holds the epoch."""
        metrics = report.metrics()
        if not report.branches:
            return {EPOCH_KEY: metrics}
        shown = {name: metrics[name] for name in (*report.val.metrics(), EPOCH_KEY, "lr")}
        return {
            branch_prefix(decay) + EPOCH_KEY: {branch_prefix(decay) + name: value for name, value in shown.items()}
            for decay in report.branches
        }

    def _series_of(self, name: str) -> str:
        """The series a metric ``name`` of the backlog belongs to."""
        return next(
            (branch_prefix(d) + EPOCH_KEY for d in self.choices if name.startswith(branch_prefix(d))), EPOCH_KEY
        )

    def catch_up(self, trained: int, decay_after: int | None = None) -> list[int]:
        """Before the run trains on after epoch ``trained``: log the backlog's epochs that the run lacks, each at
        its step, and empty the backlog; warn, on one line, of the epochs up to ``trained`` that neither holds
        (of a run choosing its decay: in the series of its branch in training, ``decay_after``). Returns those
        epochs."""
        kept = self._read()
        for epoch in sorted(kept):
            series: dict[str, dict[str, float]] = {}
            for name, value in kept[epoch].items():
                series.setdefault(self._series_of(name), {})[name] = value
            for key, metrics in series.items():
                mine = key == EPOCH_KEY and not self.choices
                if epoch not in self.logged.setdefault(key, set()) and (epoch <= trained or not mine):
                    self.tracker.log_metrics(metrics, step=epoch)
                    self.logged[key].add(epoch)
        if kept:
            self._write({})
        key = branch_prefix(decay_after) + EPOCH_KEY if self.choices and decay_after is not None else EPOCH_KEY
        missing = [epoch for epoch in range(1, trained + 1) if epoch not in self.logged.get(key, set())]
        if missing:
            _log.warning(
                f"itrlab: warning: MLflow run {self.tracker.run_id} has no metrics of epoch(s) "
                f"{', '.join(map(str, missing))}: trained and checkpointed, but neither logged nor kept in "
                f"{self.path}; their per-epoch curves have gaps there"
            )
        return missing

    def _read(self) -> dict[int, dict[str, float]]:
        """The backlog: epoch -> its metrics (empty without the file). A file that is not what this module
        writes is set aside with a warning: its epochs count as missing."""
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return {
                int(epoch): {str(key): float(value) for key, value in metrics.items()}
                for epoch, metrics in data["epochs"].items()
            }
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
            _log.warning(f"itrlab: warning: {self.path} is not a metrics backlog itrlab wrote ({err}); ignored")
            return {}

    def _write(self, epochs: dict[int, dict[str, float]]) -> None:
        if not epochs:
            self.path.unlink(missing_ok=True)
            return
        atomic_write_json(self.path, {"epochs": {str(epoch): metrics for epoch, metrics in sorted(epochs.items())}})
