"""Trials that train with several workers: a Ray Train ``TorchTrainer`` (DDP) inside the Tune trial (Ray Train V2
refuses ``Tuner(TorchTrainer(...))``), reporting to Tune through ``TuneReportCallback``.

Each worker runs the same :class:`~itrlab.train.Trainer` on every ``world_size``-th batch; rank 0 checkpoints,
saves the run folder in the sweep's storage after each epoch (:mod:`itrlab.sweep.trial_store`) and logs to MLflow.
A restarted trial reports again what it had, and every worker starts from the newest saved epoch. A TorchTrainer
costs many seconds to start, so one-worker trials take :mod:`itrlab.sweep.trial`'s in-process path.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray.train
import ray.train.torch
from ray import tune

from itrlab.sweep.points import trial_point
from itrlab.sweep.trial import (
    EpochReporter,
    TrialContext,
    board_writer,
    config_of,
    node_tags,
    replayed,
    reuse_child_run,
    run_trial,
    train_and_report,
    trial_params,
    trial_run_name,
    trial_tags,
)
from itrlab.sweep.trial_store import TrialStore, trial_key
from itrlab.tracking import MlflowTracker
from itrlab.train.lifecycle import RunLifecycle


def worker_loop(loop_config: dict[str, Any]) -> None:
    """``train_loop_per_worker`` of the TorchTrainer: one data-parallel training run."""
    context: TrialContext = loop_config["context"]
    params = loop_config["params"]
    train_context = ray.train.get_context()
    rank, world_size = train_context.get_world_rank(), train_context.get_world_size()
    run_dir = Path(loop_config["run_dir"]) / ("run" if rank == 0 else f"worker{rank}")
    shutil.rmtree(run_dir, ignore_errors=True)  # every worker starts from the trial's newest saved epoch
    run_dir.mkdir(parents=True)
    store = TrialStore(context.sweep_dir, loop_config["key"])
    reports = store.restore(run_dir)

    tracker = None
    if rank == 0:
        tracker = MlflowTracker(context.experiment, context.tracking_uri)
        reuse_child_run(tracker, run_dir, store.key, context.parent_run_id)
        tracker.default_tags = {**loop_config["tags"], **node_tags(tracker, run_dir)}  # rank 0's node
        tracker.default_params = trial_params(params)
    reporter = EpochReporter(
        run_dir, ray.train.report, metric=context.metric, store=store if rank == 0 else None, reports=reports
    )
    run = RunLifecycle(None, run_dir, tracker, context.parent_run_id, trial_run_name(params))

    def train():
        config = config_of(context, params)
        # with GPUs, each worker sees its node's share: Ray Train names this worker's one
        device = ray.train.torch.get_device() if config.train.device == "auto" else None
        # rank 0 notes the trial's phase and step on the sweep's progress board
        callbacks = [reporter, *(board_writer(context, loop_config["trial_id"]) if rank == 0 else [])]
        return run.train(callbacks, config, rank=rank, world_size=world_size, device=device)

    train_and_report(train, reporter, run)


def run_torch_trainer_trial(
    params: dict[str, Any],
    context: TrialContext,
    *,
    num_workers: int,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
) -> None:
    """A Tune function trial that trains with ``num_workers`` DDP workers."""
    store = TrialStore(context.sweep_dir, trial_key(params))
    with store.held():
        if not replayed(store, params)[1]:  # one that had ended: its result reported again, nothing trained
            _fit(params, context, store, num_workers, cpus_per_worker, gpus_per_worker)


def _fit(
    params: dict[str, Any],
    context: TrialContext,
    store: TrialStore,
    num_workers: int,
    cpus_per_worker: float,
    gpus_per_worker: float,
) -> None:
    """The trial's TorchTrainer, fitted: its workers continue from the trial's newest saved epoch."""
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    tune_context = tune.get_context()
    trial_id = tune_context.get_trial_id()
    resources = {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if gpus_per_worker else {})}
    trainer = TorchTrainer(
        worker_loop,
        train_loop_config={
            "params": params,
            "context": context,
            "trial_id": trial_id,
            "key": store.key,
            "run_dir": tune_context.get_trial_dir(),
            "tags": dict(context.source) | trial_tags(store.key, context.sweep_name, params, run_dir=str(store.folder)),
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=num_workers, use_gpu=gpus_per_worker > 0, resources_per_worker=resources
        ),
        run_config=ray.train.RunConfig(
            name=f"train-{trial_id}", storage_path=context.storage_dir, callbacks=[TuneReportCallback()]
        ),
    )
    trainer.fit()


def trial_function(
    num_workers: int, cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0, torch_trainer: bool = False
) -> Callable[..., None]:
    """The Tune trainable: in-process for one worker, a TorchTrainer for several (or when forced)."""
    if num_workers == 1 and not torch_trainer:
        return run_trial

    def trainable(params: dict[str, Any], context: TrialContext) -> None:
        run_torch_trainer_trial(
            trial_point(params),
            context,
            num_workers=num_workers,
            cpus_per_worker=cpus_per_worker,
            gpus_per_worker=gpus_per_worker,
        )

    trainable.__name__ = "torch_trainer_trial"
    return trainable
