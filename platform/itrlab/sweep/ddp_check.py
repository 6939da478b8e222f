"""The Ray side of the cluster's DDP check (:mod:`itrlab.local_cluster.ddp_check`, ``jobs/local_cluster.py
ddp``): the same two-worker data-parallel trial placed on two nodes and on one, and what each live worker
node sees of given paths. Run by a driver on the cluster's head.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from itrlab.interrupts import ctrl_c_kept

PLACEMENTS = ("STRICT_SPREAD", "STRICT_PACK")  # the two ranks on two nodes, then on one


def _ddp_worker(loop_config: dict[str, Any]) -> None:
    """A Ray Train worker of the DDP check: notes its node on the shared storage, then trains as a
    sweep trial's TorchTrainer worker does (:func:`itrlab.sweep.ddp_trial.worker_loop`)."""
    import ray
    import ray.train

    from itrlab.sweep.ddp_trial import worker_loop

    rank = ray.train.get_context().get_world_rank()
    nodes = Path(loop_config["nodes_dir"])
    nodes.mkdir(parents=True, exist_ok=True)
    (nodes / f"rank{rank}").write_text(ray.get_runtime_context().get_node_id())
    worker_loop(loop_config)


def ddp_run(tree: dict[str, Any], placement: str, storage: Path, tracking_uri: str, name: str) -> dict[str, Any]:
    """Train the experiment ``tree`` as a two-worker DDP trial (gloo, one CPU each) whose workers Ray
    places by ``placement`` (``STRICT_SPREAD``: two nodes; ``STRICT_PACK``: one); its final metrics and
    the node of each rank. Rank 0 logs the run to MLflow (experiment ``name``)."""
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from itrlab.sweep.trial import TRIAL_TAG, TrialContext, trial_tags
    from itrlab.tracking import MlflowTracker, source_tags

    folder = storage / name
    context = TrialContext(
        tree,
        name,
        tracking_uri,
        parent_run_id="",
        sweep_name=name,
        storage_dir=str(folder),
        source=tuple(source_tags().items()),
    )
    trainer = TorchTrainer(
        _ddp_worker,
        train_loop_config={
            "params": {},
            "context": context,
            "trial_id": name,
            "run_dir": str(folder / "local"),
            "tags": dict(context.source) | trial_tags(name, name, {}, run_dir=str(folder)),
            "nodes_dir": str(folder / "nodes"),
        },
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ray.train.ScalingConfig(
            num_workers=2, resources_per_worker={"CPU": 1}, placement_strategy=placement
        ),
        run_config=ray.train.RunConfig(name=name, storage_path=str(folder / "ray")),
    )
    with ctrl_c_kept():
        trainer.fit()
    nodes = [(folder / "nodes" / f"rank{rank}").read_text() for rank in range(2)]
    # the run's metrics as MLflow holds them (the last epoch's validation, the test table, ...)
    tracker = MlflowTracker(name, tracking_uri)
    run_id = tracker.find_run({TRIAL_TAG: name})
    return {
        "name": name,
        "placement": placement,
        "nodes": nodes,
        "run_id": run_id,
        "status": tracker.status(run_id),
        "metrics": tracker.metrics(run_id),
    }


def probe_workers(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What each live worker node sees of ``paths`` (run from a driver on the head): per node id, for each
    path, None where it does not exist, else its entries."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def look(wanted: list[str]) -> dict[str, Any]:
        return {path: sorted(os.listdir(path)) if os.path.isdir(path) else None for path in wanted}

    head = ray.get_runtime_context().get_node_id()
    workers = [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeID"] != head]
    return {
        node: ray.get(
            look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(list(paths))
        )
        for node in workers
    }


def placed_ddp_runs(
    tree: dict[str, Any], storage: Path, tracking_uri: str, stamp: str, paths: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """On the cluster (joined, or a local Ray), what the worker nodes see of ``paths``
    (:func:`probe_workers`), then :func:`ddp_run` under each of :data:`PLACEMENTS`; Ray is shut down after."""
    import ray

    from itrlab.sweep.cluster import init_ray

    init_ray(tracking_uri)
    try:
        seen = probe_workers(paths)
        runs = {
            placement: ddp_run(tree, placement, storage, tracking_uri, f"ddp_{placement.lower()}_{stamp}")
            for placement in PLACEMENTS
        }
    finally:
        ray.shutdown()
    return seen, runs
