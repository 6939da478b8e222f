"""A group of runs trained together (:mod:`itrlab.train.grouped`), each still a whole run of its own.

:func:`run_group` is :func:`~itrlab.train.experiment.run_experiment` for G configs of one model shape:
each member is built and opened as its run would be (:func:`~itrlab.train.experiment.start_run`: its
data, its seed's weights, its stages, ``last.pt`` restored, its MLflow run reopened on resume), the
group trains them together, and each ends as its run would (:func:`~itrlab.train.experiment.finish_run`:
the test table of its best checkpoint). A member that fails (at its start, on a NaN loss, at its epoch's
end or its test) ends FAILED with its reason in its own MLflow run while the others go on; an error of
the group itself (the joint step, Ctrl-C) ends every open member's run as ``run_experiment`` would.
All members read one device copy of the training split (the resident path).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from itrlab.config import ExperimentConfig
from itrlab.errors import StorageError
from itrlab.tracking import MlflowTracker
from itrlab.train.experiment import RunResult, StartedRun, finish_run, start_run
from itrlab.train.grouped.trainer import GroupedTrainer
from itrlab.train.loop import EpochCallback

_log = logging.getLogger(__name__)


@dataclass
class MemberResult:
    """How one member of a group ended: its run's result, or the error that stopped it."""

    config: ExperimentConfig
    run_dir: Path
    result: RunResult | None = None
    failure: BaseException | None = None


def _end(context, error: BaseException | None) -> None:
    """Leave a member's ``tracker.ending()`` block: FINISHED, or with ``error`` (FAILED, KILLED)."""
    if error is None:
        context.__exit__(None, None, None)
    else:
        context.__exit__(type(error), error, error.__traceback__)


def run_group(
    configs: Sequence[ExperimentConfig],
    run_dirs: Sequence[Path],
    *,
    callbacks: Sequence[list[EpochCallback]] | None = None,
    trackers: Sequence[MlflowTracker | None] | None = None,
    parent_run_id: str | None = None,
    run_names: Sequence[str | None] | None = None,
    on_epoch_end: Callable[[int], None] | None = None,
    device: torch.device | None = None,
) -> list[MemberResult]:
    """Train ``configs`` as one group, member ``k`` in ``run_dirs[k]``; one result per member, in order."""
    count = len(configs)
    callbacks = callbacks or [[] for _ in range(count)]
    trackers = trackers or [None] * count
    run_names = run_names or [None] * count
    results = [MemberResult(config, Path(run_dir)) for config, run_dir in zip(configs, run_dirs)]
    runs: dict[int, StartedRun] = {}
    endings: dict[int, contextlib.AbstractContextManager] = {}
    shared = None
    try:
        for k, config in enumerate(configs):
            try:
                runs[k] = start_run(
                    config,
                    Path(run_dirs[k]),
                    callbacks=callbacks[k],
                    tracker=trackers[k],
                    parent_run_id=parent_run_id,
                    run_name=run_names[k],
                    device=device,
                    shared_resident=shared,
                )
            except StorageError:
                raise
            except Exception as err:  # noqa: BLE001 - this member fails (its record, by its caller), the others go on
                results[k].failure = err
                continue
            shared = shared or runs[k].trainer.resident
            endings[k] = trackers[k].ending() if trackers[k] is not None else contextlib.nullcontext()
            endings[k].__enter__()
            if runs[k].trainer.resumed_from_epoch:
                _log.info(f"resuming {run_dirs[k]} after epoch {runs[k].trainer.resumed_from_epoch}")
        for run in runs.values():  # the members share the devices: each costs its share
            run.device_share = 1.0 / len(runs)
        if runs:
            members = GroupedTrainer([run.trainer for run in runs.values()], on_epoch_end).fit()
            for k, member in zip(runs, members):
                results[k].failure = member.failure
        for k, run in runs.items():
            if results[k].failure is None:
                try:
                    results[k].result = finish_run(run)
                except StorageError:
                    raise
                except Exception as err:  # noqa: BLE001 - its test failed: this member alone
                    results[k].failure = err
            _end(endings.pop(k), results[k].failure)
    except BaseException as err:
        for context in endings.values():
            _end(context, err)
        raise
    return results
