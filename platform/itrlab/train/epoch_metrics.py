"""Each epoch's metrics in the run's MLflow run once, at the epoch's step, and none lost when the store fails.

:class:`MlflowEpochLogger` is the training's callback that logs them. An epoch's metrics go first to the run
folder's backlog (:data:`BACKLOG`, a small JSON file beside ``last.pt``), then to MLflow, and leave the
backlog once MLflow holds them: a store that stops taking writes (locked by another process, a full disk, a
server gone) stops the run with the epoch checkpointed and its metrics kept. When the run resumes,
:meth:`MlflowEpochLogger.catch_up` logs the backlog's epochs at their own steps, so that every per-epoch
curve has steps 1..E, and says in one warning which epochs the run trained but neither MLflow nor the
backlog holds (a process killed between its checkpoint and its backlog).

An epoch the run logged already is not logged again: a sweep trial restored from a checkpoint older than its
MLflow run (stopped between logging an epoch and Tune storing the epoch's checkpoint) trains that epoch again,
and the run keeps the values it logged first; MLflow would otherwise hold two points at one step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from itrlab.files import atomic_write_json
from itrlab.tracking import MlflowTracker
from itrlab.train.loop import EpochReport

_log = logging.getLogger(__name__)

BACKLOG = "metrics_backlog.json"  # in the run folder: epochs' metrics not yet in MLflow
EPOCH_KEY = "loss"  # a metric every epoch logs: the steps it holds are the epochs MLflow has


class MlflowEpochLogger:
    """Logs each epoch's metrics to ``tracker``'s run at the epoch's step, once, through the backlog of
    ``run_dir`` (:data:`BACKLOG`)."""

    def __init__(self, tracker: MlflowTracker, run_dir: Path):
        self.tracker, self.path = tracker, Path(run_dir) / BACKLOG
        # the epochs the run holds already (a reopened run's; a new run's history is empty)
        self.logged = {step for step, _ in tracker.metric_history(tracker.run_id, EPOCH_KEY) if step >= 1}

    def on_epoch_end(self, report: EpochReport) -> None:
        if report.epoch in self.logged:  # trained again after a restore: the run keeps what it logged
            return
        metrics = report.metrics()
        kept = self._read()
        self._write({**kept, report.epoch: metrics})
        self.tracker.log_metrics(metrics, step=report.epoch)  # a TrackingError stops the run; the backlog keeps it
        self.logged.add(report.epoch)
        self._write(kept)

    def catch_up(self, trained: int) -> list[int]:
        """Before the run trains on after epoch ``trained``: log the backlog's epochs that the run lacks, each at
        its step, and empty the backlog; warn, on one line, of the epochs up to ``trained`` that neither holds.
        Returns those epochs."""
        kept = self._read()
        for epoch in sorted(kept):
            if epoch <= trained and epoch not in self.logged:
                self.tracker.log_metrics(kept[epoch], step=epoch)
                self.logged.add(epoch)
        if kept:
            self._write({})
        missing = [epoch for epoch in range(1, trained + 1) if epoch not in self.logged]
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
