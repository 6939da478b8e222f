"""Run a sweep: validate every trial's config, start (or join) Ray, run Tune, and log to MLflow.

MLflow layout: one experiment per sweep definition (its ``name``), one parent run per invocation
(reused by ``--resume``), one child run per trial (tagged with the trial id, so a restarted trial
finds its run again). On the parent: the trials ranked by the objective, the best config, and,
for grids with a ``table`` section, the grid pivoted into the paper's layout (mean and standard
deviation over seeds, the published number beside ours).

Sweep directories live under ``<storage>/<sweep name>/<timestamp>/`` (Tune's experiment state and
the trials' checkpoints); ``--resume`` continues the newest one.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from itrlab.config import compose
from itrlab.config.checks import check_data, synthetic_spec_of
from itrlab.config.loader import config_dir
from itrlab.data import generate_synthetic
from itrlab.errors import UserInputError
from itrlab.sweep.distributed import trial_function
from itrlab.sweep.spec import SweepSpec
from itrlab.sweep.summary import TrialRow, compact_pivot, pivot, ranked, ranked_table, to_markdown, to_text
from itrlab.sweep.trial import TrialContext, trial_config
from itrlab.tracking import MlflowTracker, resolve_tracking_uri

STATE_FILE = "itrlab_sweep.json"
SWEEP_TAG = "itrlab.sweep"


@dataclass(frozen=True)
class SweepResult:
    rows: list[TrialRow]
    best: TrialRow | None
    sweep_dir: Path
    parent_run_id: str
    ui_hint: str


def base_tree(spec: SweepSpec, overrides: list[str]) -> dict[str, Any]:
    """The composed base experiment with paths made absolute (trials run in other directories)."""
    tree = compose(spec.experiment, [*spec.overrides, *overrides])
    dataset = tree.get("dataset", {})
    if "root" in dataset:
        dataset["root"] = str(Path(dataset["root"]).expanduser().resolve())
    output = tree.setdefault("output", {})
    output["dir"] = str(Path(output.get("dir", "runs")).expanduser().resolve())
    cooperative = tree.get("cooperative") or {}
    if cooperative.get("anchor_checkpoint"):
        cooperative["anchor_checkpoint"] = str(Path(cooperative["anchor_checkpoint"]).expanduser().resolve())
    return tree


def check_trials(spec: SweepSpec, tree: dict[str, Any]) -> None:
    """Validate every grid point (or the corners of the search space) before anything starts."""
    points = spec.search_corners() if spec.optuna else spec.grid_points()
    configs = [trial_config(tree, point) for point in points]
    check_data(configs[0])
    for config in configs[1:]:
        if config.dataset != configs[0].dataset or config.train.batch_size > configs[0].train.batch_size:
            check_data(config)


def param_space(spec: SweepSpec) -> dict[str, Any]:
    if spec.optuna is None:
        space = {key: tune.grid_search(values) for key, values in spec.grid.items()}
        space["seed"] = tune.grid_search(spec.seeds)
        return space
    samplers = {"uniform": lambda d: tune.uniform(d.low, d.high),
                "loguniform": lambda d: tune.loguniform(d.low, d.high),
                "int": lambda d: tune.randint(int(d.low), int(d.high) + 1),
                "choice": lambda d: tune.choice(d.values)}
    space = {key: samplers[dim.type](dim) for key, dim in spec.optuna.space.items()}
    space["seed"] = spec.seeds[0]
    return space


def tune_config(spec: SweepSpec, epochs: int, reuse_actors: bool) -> tune.TuneConfig:
    search_alg = scheduler = None
    if spec.optuna is not None:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(sampler=optuna.samplers.TPESampler(seed=spec.optuna.seed))
    if spec.asha is not None:
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(time_attr="training_iteration", max_t=epochs + 1,
                                  grace_period=spec.asha.grace_period, reduction_factor=spec.asha.reduction_factor)
    return tune.TuneConfig(metric=spec.objective.metric, mode=spec.objective.mode, search_alg=search_alg,
                           scheduler=scheduler, num_samples=spec.optuna.num_trials if spec.optuna else 1,
                           max_concurrent_trials=spec.concurrency,
                           # in-process trials reuse their worker process: no re-import of torch and
                           # MLflow, no new store connection (seconds per trial on 2 cores)
                           reuse_actors=reuse_actors)


def latest_sweep_dir(storage: Path, name: str) -> Path | None:
    runs = sorted(p for p in (storage / name).glob("*") if (p / STATE_FILE).is_file())
    return runs[-1] if runs else None


def init_ray(tracking_uri: str, logical_cpus: float = 0) -> None:
    """Join ``$RAY_ADDRESS`` (a cluster, or the job's own cluster under ``ray job submit``) or start a
    local Ray with at least ``logical_cpus`` (a TorchTrainer trial needs CPUs to spare beside its
    workers for its controller, or it waits forever on a 2-core machine)."""
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS") or None
    num_cpus = None if address else max(os.cpu_count() or 1, math.ceil(logical_cpus)) or None
    wanted = {"MLFLOW_TRACKING_URI": tracking_uri, "ITRLAB_CONFIG_DIR": str(config_dir().resolve())}
    # Under `ray job submit` the job's runtime env already sets some; repeating a key is refused.
    env_vars = {key: value for key, value in wanted.items() if key not in os.environ}
    ray.init(address=address, num_cpus=num_cpus, runtime_env={"env_vars": env_vars} if env_vars else None,
             log_to_driver=True)


def check_local_gpus(spec: SweepSpec) -> None:
    """A sweep that starts its own Ray must not ask for more GPUs than this machine has (Tune would
    wait for them forever). On a cluster the autoscaler may add GPU nodes, so nothing is checked."""
    workers, _, gpus = spec.workers
    wanted = gpus * workers
    if wanted == 0 or os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if wanted > visible:
        raise UserInputError(f"--gpus-per-trial / resources.gpu: a trial asks for {wanted:g} GPU(s) "
                             f"({gpus:g} per worker x {workers} workers) and this machine "
                             f"has {visible}; ask for fewer, or submit the sweep to a cluster with GPU nodes")


def trial_rows(results) -> list[TrialRow]:
    rows = []
    for result in results:
        metrics = dict(result.metrics or {})
        if result.error is not None:
            status = "error"
        elif metrics.get("diverged"):
            status = "diverged"
        elif metrics.get("done"):
            status = "finished"
        else:
            status = "stopped"  # early-stopped by ASHA
        params = {k: v for k, v in (result.config or {}).items()}
        rows.append(TrialRow(str(metrics.get("trial_id", result.path.rsplit("/", 1)[-1])), params, metrics, status))
    return rows


def run_sweep(spec: SweepSpec, *, overrides: list[str] | None = None, resume: bool = False,
              storage: Path = Path("runs/sweeps")) -> SweepResult:
    """Run (or resume) a sweep; every config is validated before Ray or MLflow start."""
    overrides = list(overrides or [])
    storage = storage.expanduser().resolve()
    if resume:
        sweep_dir = latest_sweep_dir(storage, spec.name)
        if sweep_dir is None:
            raise UserInputError(f"--resume: no interrupted sweep '{spec.name}' under {storage / spec.name}")
        state = json.loads((sweep_dir / STATE_FILE).read_text())
        overrides = state["overrides"]
    tree = base_tree(spec, overrides)
    check_trials(spec, tree)
    check_local_gpus(spec)
    first = trial_config(tree, {})
    if first.dataset.kind == "synthetic":  # generate once, before trials share it
        generate_synthetic(first.dataset.root, synthetic_spec_of(first))

    tracking_uri = resolve_tracking_uri()
    parent = MlflowTracker(spec.name, tracking_uri)
    if resume:
        parent.start(run_name=state["run_name"], tags={}, params={}, run_id=state["parent_run_id"])
    else:
        sweep_dir = storage / spec.name / time.strftime("%Y%m%d-%H%M%S")
        sweep_dir.mkdir(parents=True)
        run_name = f"{spec.name}-{sweep_dir.name}"
        params = {"sweep.experiment": spec.experiment, "sweep.overrides": " ".join([*spec.overrides, *overrides]),
                  "sweep.grid": json.dumps(spec.grid), "sweep.seeds": str(spec.seeds),
                  "sweep.optuna": spec.optuna.model_dump_json() if spec.optuna else "none",
                  "sweep.objective": f"{spec.objective.mode} {spec.objective.metric}"}
        parent.start(run_name=run_name, tags={SWEEP_TAG: spec.name, "itrlab.sweep_dir": str(sweep_dir)}, params=params)
        (sweep_dir / STATE_FILE).write_text(json.dumps({"parent_run_id": parent.run_id, "run_name": run_name,
                                                        "overrides": overrides, "tracking_uri": tracking_uri}))
    print(f"sweep {spec.name}: {sweep_dir}; MLflow parent run {parent.run_id} at {tracking_uri}", flush=True)

    workers, cpus, gpus = spec.workers
    in_process = workers == 1 and spec.trainer == "auto"
    try:
        init_ray(tracking_uri, 0 if in_process else workers * cpus + 2)
        context = TrialContext(tree, spec.name, tracking_uri, parent.run_id, spec.name, str(sweep_dir / "train"))
        trainable = tune.with_resources(
            tune.with_parameters(trial_function(workers, cpus, gpus,
                                                torch_trainer=spec.trainer == "torch"), context=context),
            # a TorchTrainer trial's own process only waits on its workers, which hold the resources
            {"cpu": cpus, "gpu": gpus} if in_process else {"cpu": 0.1},
        )
        if resume and tune.Tuner.can_restore(str(sweep_dir / "tune")):
            tuner = tune.Tuner.restore(str(sweep_dir / "tune"), trainable, resume_unfinished=True, resume_errored=True)
        else:
            run_config = tune.RunConfig(
                name="tune", storage_path=str(sweep_dir),
                failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            )
            tuner = tune.Tuner(trainable, param_space=param_space(spec), run_config=run_config,
                               tune_config=tune_config(spec, first.train.epochs, reuse_actors=in_process))
        results = tuner.fit()
        rows = trial_rows(results)
        summarise(spec, rows, parent)
    except KeyboardInterrupt:
        parent.end("KILLED")
        raise
    except BaseException:
        parent.end("FAILED")
        raise
    parent.end("FINISHED")
    best = next(iter(ranked(rows, spec.objective.metric, spec.objective.mode)), None)
    return SweepResult(rows, best, sweep_dir, parent.run_id, parent.ui_hint())


def summarise(spec: SweepSpec, rows: list[TrialRow], parent: MlflowTracker) -> None:
    """Print and log the ranked trials, the best config and the paper pivot on the parent run."""
    table = ranked_table(rows, spec)
    parent.log_table(table, "sweep/trials.json")
    text = to_markdown(table, f"{spec.name}: trials ranked by {spec.objective.mode} {spec.objective.metric}")
    print("\n" + to_text(table, f"{spec.name}: trials ranked by {spec.objective.mode} {spec.objective.metric}"))
    best = next(iter(ranked(rows, spec.objective.metric, spec.objective.mode)), None)
    if best is not None:
        parent.log_dict({"trial": best.trial_id, "params": best.params,
                         "metrics": {k: v for k, v in best.metrics.items() if isinstance(v, (int, float))}},
                        "sweep/best.json")
        parent.set_tags({"itrlab.best_trial": best.trial_id})
        value = best.metrics.get(spec.objective.metric)
        if isinstance(value, (int, float)):
            parent.log_metrics({f"best_{spec.objective.metric}": value}, step=0)
    if spec.table is not None and spec.optuna is None:
        grid = pivot(rows, spec)
        parent.log_table(grid, "sweep/table.json")
        text += "\n\n" + to_markdown(grid, f"{spec.name}: mean ± std over seeds {spec.seeds}")
        published = " (published number in brackets)" if spec.table.paper else ""
        print("\n" + to_text(compact_pivot(grid, spec), f"{spec.name}: mean ± std over seeds {spec.seeds}{published}"))
    parent.log_text(text, "sweep/summary.md")
    counts = {status: sum(r.status == status for r in rows) for status in ("finished", "diverged", "stopped", "error")}
    parent.log_metrics({f"trials_{k}": v for k, v in counts.items()}, step=0)
