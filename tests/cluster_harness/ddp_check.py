"""The DDP check of the local cluster (``jobs/local_cluster.py ddp``, submitted as a Ray job): the same tiny
data-parallel trial (two workers) with its two ranks on two nodes and on one, and what the worker nodes see of
the driver's disk and of the shared storage. Run on the cluster, its driver on the head. The Ray Train worker
is defined inside :func:`ddp_run`, so that Ray sends it by value: the worker nodes have the package on their
path, not this harness.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from itrlab.interrupts import ctrl_c_kept

_log = logging.getLogger(__name__)


# The platform's own tiny baseline (VSE++, whose loss is the shared itrlab.losses'), no paper's method or scheme:
# the check is of DDP across nodes, not of a method
DEFAULT_EXPERIMENT = "vsepp_synthetic_tiny"


def ddp_check(storage: Path, overrides: Sequence[str] = (), experiment: str = DEFAULT_EXPERIMENT) -> dict[str, Any]:
    """The same tiny DDP trial on two nodes and on one; writes and returns both results
    (``<storage>/ddp_check.json``), with what the worker nodes see of the driver's working directory and
    of the storage."""
    from itrlab.sweep.runner import base_tree
    from itrlab.sweep.trial import trial_config
    from itrlab.tracking import check_tracking_store, resolve_tracking_uri
    from itrlab.train.experiment import generate_if_synthetic

    storage = Path(storage).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    tree = base_tree(SimpleNamespace(experiment=experiment, overrides=list(overrides)), [])
    generate_if_synthetic(trial_config(tree, {}))  # once, on the shared storage
    tracking_uri = check_tracking_store(resolve_tracking_uri())
    # the driver's working directory (the job's, on the head's disk) and the storage, as workers see them
    seen, runs = placed_ddp_runs(
        tree, storage, tracking_uri, time.strftime("%Y%m%d-%H%M%S"), [os.getcwd(), str(storage)]
    )
    report = {
        "experiment": experiment,
        "overrides": list(overrides),
        "runs": runs,
        "driver_cwd": os.getcwd(),
        "workers_see": seen,
    }
    (storage / "ddp_check.json").write_text(json.dumps(report, indent=2))
    for placement, run in runs.items():
        _log.info(f"{placement}: ranks on nodes {run['nodes']}; test_rsum {run['metrics'].get('test_rsum')!r}")
    return report


PLACEMENTS = ("STRICT_SPREAD", "STRICT_PACK")  # the two ranks on two nodes, then on one


def ddp_run(tree: dict[str, Any], placement: str, storage: Path, tracking_uri: str, name: str) -> dict[str, Any]:
    """Train the experiment ``tree`` as a two-worker DDP trial (gloo, one CPU each) whose workers Ray
    places by ``placement`` (``STRICT_SPREAD``: two nodes; ``STRICT_PACK``: one); its final metrics and
    the node of each rank. Rank 0 logs the run to MLflow (experiment ``name``)."""
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from itrlab.sweep.trial import TRIAL_TAG, TrialContext, trial_tags
    from itrlab.tracking import MlflowTracker, source_tags

    # defined here, so that Ray pickles it by value: the worker nodes import the package, not this harness
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

    folder = storage / name
    context = TrialContext(
        tree,
        name,
        tracking_uri,
        parent_run_id="",
        sweep_name=name,
        storage_dir=str(folder),
        sweep_dir=str(folder),  # the run's saved state: <folder>/trials/<name>
        source=tuple(source_tags().items()),
    )
    trainer = TorchTrainer(
        _ddp_worker,
        train_loop_config={
            "params": {},
            "context": context,
            "trial_id": name,
            "key": name,
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
