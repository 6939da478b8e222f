"""Stages: models trained before an experiment, once, and shared by every run that starts from them
(``stages:`` in a config, checked by :func:`itrlab.assembly.stage_configs`; docs/training.md#stages).

Per seed a stage is trained once, in ``<stages>/<name>-seed<seed>-<key>/`` (:func:`stage_folder`, the key
:func:`~itrlab.train.stage_identity.stage_key`), where runs and sweep trials that need it find it: a run that finds
it being trained waits on its lock, one cut short continues from its ``last.pt``, a finished one holds
``stage.json``. A run that trained the same config from scratch is the same training (same seed, same steps), so
a run asked to (``output.keep_as_stage``) keeps its best model there as ``run-seed<seed>-<key>/``
(:func:`publish_run`), and a stage of the same key, under any name, starts from it (:func:`find_trained`). Each
stage trained here is an MLflow run of its own (tag ``itrlab.stage``), and its training time counts in the cost
of every run that starts from it: a row's cost is what it would cost alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from itrlab.config import ExperimentConfig
from itrlab.config.schema import StageSpec
from itrlab.errors import UserInputError
from itrlab.files import atomic_write_text, file_lock, read_json
from itrlab.methods.base import MethodModule
from itrlab.tracking import MlflowTracker
from itrlab.train.callbacks import ConsoleProgress
from itrlab.train.checkpoint import MODEL, load_checkpoint, seed_everything
from itrlab.train.epoch_metrics import MlflowEpochLogger
from itrlab.train.loop import Trainer, TrainingData
from itrlab.train.stage_identity import stage_key

_log = logging.getLogger(__name__)

STAGE_TAG = "itrlab.stage"
DONE = "stage.json"
RUN_STAGE = "run"  # the name under which a finished run keeps its model as a stage (publish_run)


@dataclass(frozen=True)
class TrainedStage:
    """A finished stage: its folder, its model's weights, its MLflow run and what training it cost."""

    name: str
    folder: Path
    run_id: str | None
    seconds: float  # wall time of its training (every attempt), counted in each run that starts from it

    @property
    def model(self) -> Path:
        return self.folder / MODEL


@dataclass(frozen=True)
class StageStore:
    """Where stages are kept (``output.stages``; by default ``stages/`` beside the run's folder, a
    sweep's ``<sweep folder>/stages``) and where one trained here logs: the MLflow store and experiment,
    and the parent run (a sweep's); no MLflow run without ``tracking_uri``."""

    root: Path
    tracking_uri: str | None = None
    experiment: str | None = None
    parent_run_id: str | None = None


def stage_folder(root: Path, name: str, config: ExperimentConfig, data_digest: str) -> Path:
    return Path(root) / f"{name}-seed{config.seed}-{stage_key(config, data_digest)}"


def find_trained(root: Path, config: ExperimentConfig, data_digest: str) -> Path | None:
    """A finished folder of ``config`` on this data under any name: a stage trained for another name, or a
    run kept as one (:func:`publish_run`); None when there is none."""
    for folder in sorted(Path(root).glob(f"*-seed{config.seed}-{stage_key(config, data_digest)}")):
        if (folder / DONE).is_file():
            return folder
    return None


def _found(name: str, folder: Path) -> TrainedStage:
    record = read_json(folder / DONE, f"stage {name}'s record")
    return TrainedStage(name, folder, record.get("run_id"), float(record.get("seconds", 0.0)))


def publish_run(
    root: Path, config: ExperimentConfig, data_digest: str, run_dir: Path, run_id: str | None, seconds: float
) -> Path:
    """Keep the best model of a run that trained ``config`` from scratch through its last epoch as the stage
    of that config (``<root>/run-seed<seed>-<key>/``): a stage of the same key starts from it instead of
    training it again, and names the run (``run_id``) and its training time (``seconds``) as the stage's.
    Written under the folder's lock, the model before the record; a folder already finished stays."""
    folder = stage_folder(root, RUN_STAGE, config, data_digest)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder, blocking=True):
        if not (folder / DONE).is_file():
            partial = folder / f"{MODEL}.part"
            shutil.copyfile(Path(run_dir) / MODEL, partial)
            os.replace(partial, folder / MODEL)
            atomic_write_text(
                folder / DONE,
                json.dumps(
                    {"run_id": run_id, "seconds": seconds, "run_dir": str(run_dir), "config": config.dump()},
                    indent=2,
                    default=str,
                ),
            )
    return folder


def trained_stage(
    name: str,
    config: ExperimentConfig,
    data: TrainingData,
    data_digest: str,
    *,
    store: StageStore,
    build: Callable[[ExperimentConfig], MethodModule],
    start: Callable[[MethodModule], None] | None = None,
    device=None,
) -> TrainedStage:
    """The stage ``name`` (config ``config``), trained now unless another run has (or is training it:
    then this waits). ``build`` makes the stage's method; ``start`` initialises it (from the stage before)."""
    folder = stage_folder(store.root, name, config, data_digest)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder, blocking=True):
        done = folder / DONE
        if done.is_file():
            return _found(name, folder)
        found = find_trained(store.root, config, data_digest)
        if found is not None:  # a run of the same config, or a stage of another name, trained it
            _log.info(f"stage {name}: trained already in {found}")
            return _found(name, found)
        started = time.perf_counter()
        earlier = (
            float(read_json(folder / "seconds.json", "stage time").get("seconds", 0.0))
            if (folder / "seconds.json").is_file()
            else 0.0
        )
        seed_everything(config.seed)
        method = build(config)
        if start is not None:
            start(method)
        callbacks: list = [ConsoleProgress(prefix=f"stage {name} ")]
        tracker = run_id = logger = None
        if store.tracking_uri is not None:
            tracker = MlflowTracker(store.experiment or config.experiment_name, store.tracking_uri)
            record = folder / "mlflow_run.json"
            previous = read_json(record, "stage run record").get("run_id") if record.is_file() else None
            run_id = tracker.start(
                run_name=f"stage {name} seed={config.seed}",
                tags={STAGE_TAG: name, "itrlab.stage_key": folder.name, "run_dir": str(folder)},
                params=config.flat(),
                run_id=previous,
                parent_run_id=store.parent_run_id,
            )
            atomic_write_text(record, json.dumps({"run_id": run_id}))
            logger = MlflowEpochLogger(tracker, folder, config.train.lr_decay_choices or ())
            callbacks.insert(0, logger)
        trainer = Trainer(config, method, data, folder, callbacks, device=device)
        if logger is not None:
            logger.catch_up(trainer.state.epoch, trainer.state.decay_after)
        _log.info(f"stage {name}: training in {folder}")
        with tracker.ending() if tracker is not None else contextlib.nullcontext():
            try:
                trainer.fit()
            finally:  # an interrupted stage keeps the time it took: the next attempt adds to it
                atomic_write_text(
                    folder / "seconds.json", json.dumps({"seconds": earlier + time.perf_counter() - started})
                )
            seconds = earlier + time.perf_counter() - started
            if tracker is not None:
                tracker.log_final_metrics({"stage_seconds": seconds})
        atomic_write_text(done, json.dumps({"run_id": run_id, "seconds": seconds, "config": config.dump()}, indent=2))
        return TrainedStage(name, folder, run_id, seconds)


def _matching(names: Iterable[str], prefix: str) -> list[str]:
    return [name for name in names if name == prefix or name.startswith(prefix + ".")]


def start_from(method: nn.Module, stage: TrainedStage, spec: StageSpec) -> dict[str, int]:
    """Copy the stage's weights under ``spec.copy`` into ``method`` and freeze those under ``spec.freeze``.

    Parameters of ``method`` under a copied part that the stage lacks stay as built (a new projection
    head); returns the counts ``copied`` and ``fresh``. A part that matches nothing on either side, or
    a weight of another shape, is a UserInputError naming the stage and the part."""
    source = load_checkpoint(stage.model)["model"]
    target = method.state_dict()
    update, fresh = {}, 0
    for part in spec.copy_:
        ours, theirs = _matching(target, part), _matching(source, part)
        if not ours or not theirs:
            lacking = "the next model" if not ours else f"stage {stage.name}'s model"
            raise UserInputError(
                f"stages.{spec.name}.copy: {lacking} has no part '{part}' (its parts: "
                f"{', '.join(sorted({k.rsplit('.', 1)[0] for k in (target if ours else source)})[:8])}, ...)"
            )
        for key in ours:
            if key not in source:
                fresh += 1
                continue
            if source[key].shape != target[key].shape:
                raise UserInputError(
                    f"stages.{spec.name}.copy: '{key}' is {tuple(source[key].shape)} in stage "
                    f"{stage.name} but {tuple(target[key].shape)} in the next model"
                )
            update[key] = source[key]
    method.load_state_dict(update, strict=False)
    for part in spec.freeze:
        for name, parameter in method.named_parameters():
            if name == part or name.startswith(part + "."):
                parameter.requires_grad_(False)
    return {"copied": len(update), "fresh": fresh}
