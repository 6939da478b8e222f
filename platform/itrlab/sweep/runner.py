"""Run a sweep: validate every trial's config, start (or join) Ray, run Tune, and log to MLflow.

MLflow layout: one experiment per sweep definition (its ``name``), one parent run per invocation
(reused by ``--resume``), one child run per trial (tagged with the trial id, so a restarted trial
finds its run again). On the parent: the trials ranked by the objective, the best config, and,
for grids with a ``table`` section, the paper-shaped report (:mod:`itrlab.sweep.reporting`: means over
seeds with 95% intervals, differences to the baseline row, a chance row, one honest headline, and the
published numbers where the data and protocol are the paper's).

Sweep directories live under ``<storage>/<sweep name>/<timestamp>/``: the invocation's state file, each trial's
saved state under ``trials/`` (:mod:`itrlab.sweep.trial_store`), an Optuna search's study and Tune's own folder,
which nothing reads back. ``--resume`` continues the newest unfinished one by its recorded start
(:mod:`itrlab.sweep.resume`) and runs exactly what that invocation recorded (or, with ``--allow-changes``,
records what changed on the parent run): a new Tune experiment of the same trials, each continuing from its saved
state, one that had ended reporting its result again. Nothing of the storage is unpickled.

Every fault ends in a clear state. Before Ray or MLflow start: the sweep's keys, every trial's config
and data, the storage folder, the resources a trial asks of a local Ray, and the MLflow store (which
must answer within seconds). A running sweep holds a lock on its folder, so a second ``--resume`` of
it is refused. Afterwards no trial's MLflow run is left RUNNING: a trial that failed (its real error in
``itrlab.stop_reason``) ends FAILED, one that the interruption of the sweep cut short ends KILLED, and
the parent ends FINISHED, FAILED (no trial finished) or KILLED (interrupted).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import tune

from itrlab.assembly import check_experiment
from itrlab.config import ExperimentConfig
from itrlab.config.checks import check_data_content
from itrlab.config.profiles import COMMAND_OVERRIDES_TAG, DEVIATIONS_TAG, PROFILE_TAG
from itrlab.config.sweep import SweepSpec, check_sweep_keys, check_table_rows
from itrlab.errors import StorageError, failure_reason
from itrlab.files import check_writable_dir, claim_new_dir, file_lock
from itrlab.interrupts import interruption, sigterm_as_sigint
from itrlab.report.pivot import check_published
from itrlab.report.summary import TrialRow, best_row
from itrlab.sweep.board import BOARD_FOLDER
from itrlab.sweep.cluster import check_local_resources, init_ray, wait_for_room
from itrlab.sweep.ddp_trial import trial_function
from itrlab.sweep.dry_run import own_key, stages_trained_by_rows
from itrlab.sweep.group_trial import run_group_trial
from itrlab.sweep.groups import group_param_space, sweep_groups
from itrlab.sweep.outcome import (
    NoRetryOnInputError,
    SigintWatch,
    StopOnStorageError,
    earlier_rows,
    kill_running_trial_runs,
    mark_stopped,
    settle_trial_runs,
    trial_rows,
    with_unstarted,
)
from itrlab.sweep.points import POINT, base_tree, check_decay_choices, point_key, trial_config
from itrlab.sweep.reporting import SweepReport, report_sweep
from itrlab.sweep.resume import (
    STATE_FILE,
    check_layout,
    check_parent,
    check_unchanged,
    data_digests,
    invocation_record,
    nothing_left_to_run,
    pick,
    read_sweep_state,
    set_status,
    write_state,
)
from itrlab.sweep.runs_table import save_trials_view
from itrlab.sweep.search import optuna_search
from itrlab.sweep.storage import fit_checking_storage
from itrlab.sweep.trial import TrialContext
from itrlab.tracking import (
    OWNER_TAG,
    STOP_REASON_TAG,
    SWEEP_TAG,
    MlflowTracker,
    check_tracking_store,
    close_orphaned_runs,
    owner_id,
    resolve_tracking_uri,
    source_tags,
)
from itrlab.tracking.store import OVERVIEW_TAB
from itrlab.tracking.watchdog import watching
from itrlab.train.experiment import generate_if_synthetic

_log = logging.getLogger(__name__)

TUNE_FOLDER = "tune"  # Tune's own folder of the invocation, under the sweep's


@dataclass(frozen=True)
class SweepResult:
    rows: list[TrialRow]
    best: TrialRow | None  # the best finished trial
    sweep_dir: Path
    parent_run_id: str
    ui_hint: str
    interrupted: bool = False  # stopped by Ctrl-C / SIGINT: --resume continues it
    status: str = "FINISHED"  # of the parent run: FINISHED, FAILED (no trial finished) or KILLED
    headline: str | None = None  # the pivot's one headline (itrlab.report.headline); None without a table
    unchanged: bool = False  # a --resume of a finished sweep that had nothing left to run: nothing was touched

    @property
    def failed(self) -> list[TrialRow]:
        return [row for row in self.rows if row.status == "error"]


def check_trials(spec: SweepSpec, tree: dict[str, Any]) -> dict[str, ExperimentConfig]:
    """Validate every grid point (or the corners of the search space) before anything starts. Returns the
    checked config of every grid point by :func:`~itrlab.sweep.trial.point_key`: the trials take them as
    they are instead of checking them again (an Optuna trial's point is sampled once the sweep runs: it
    checks its own, and this returns nothing)."""
    points = spec.search_corners() if spec.optuna else spec.grid_points()
    configs = [trial_config(tree, point) for point in points]
    check_decay_choices(spec, configs)
    check_experiment(configs[0])
    for config in configs[1:]:
        if (
            config.dataset != configs[0].dataset
            or config.train.batch_size > configs[0].train.batch_size
            or config.method != configs[0].method
        ):
            check_experiment(config)
    return {} if spec.optuna else {point_key(point): config for point, config in zip(points, configs)}


def param_space(spec: SweepSpec) -> dict[str, Any]:
    """Tune's space: the grid and the seeds, every combination, or, where rows run their own seeds, each grid point
    under :data:`~itrlab.sweep.points.POINT`; for an Optuna sweep only the first seed (Optuna suggests the rest,
    and with several seeds each suggestion's seed: :class:`~itrlab.sweep.search.SeedRepeater`)."""
    if spec.optuna is not None:
        return {"seed": spec.seeds[0]}
    if spec.row_seeds:  # no product: one value per grid point
        return {POINT: tune.grid_search(spec.grid_points())}
    space = {key: tune.grid_search(values) for key, values in spec.grid.items()}
    space["seed"] = tune.grid_search(spec.seeds)
    return space


def tune_config(
    spec: SweepSpec, epochs: int, reuse_actors: bool, sweep_dir: Path, resume: bool = False
) -> tune.TuneConfig:
    """Tune's settings of the sweep: its objective, its search (an Optuna search's study in ``sweep_dir``,
    continued on ``resume``: only the configurations left are asked for), its scheduler and concurrency."""
    search_alg = scheduler = None
    samples = 1
    if spec.optuna is not None:
        search_alg, ended = optuna_search(spec, sweep_dir, resume)
        samples = max(spec.trial_count - ended * len(spec.seeds), 0)
    if spec.asha is not None:
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(
            time_attr="training_iteration",
            max_t=epochs + 1,
            grace_period=spec.asha.grace_period,
            reduction_factor=spec.asha.reduction_factor,
        )
    return tune.TuneConfig(
        metric=spec.objective.metric,
        mode=spec.objective.mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=samples,  # Optuna's configurations left times the seeds; a grid's points once
        max_concurrent_trials=spec.concurrency,
        # in-process trials reuse their worker process: no re-import of torch and
        # MLflow, no new store connection (seconds per trial on 2 cores)
        reuse_actors=reuse_actors,
    )


def tune_trials(spec: SweepSpec, tree: dict[str, Any]) -> int:
    """How many trials Tune runs: the sweep's, or its groups where trials train in groups."""
    return len(sweep_groups(spec, tree)) if spec.group > 1 else spec.trial_count


def new_sweep_dir(storage: Path, name: str) -> Path:
    """A fresh ``<storage>/<name>/<timestamp>`` folder (a suffix when two sweeps start in one second)."""
    return claim_new_dir(storage / name, time.strftime("%Y%m%d-%H%M%S"), attempts=100)


def profile_tags(spec: SweepSpec) -> dict[str, str]:
    """The profile a sweep runs under and its deviations from the paper (itrlab.config.profiles), as tags
    of the parent and of every trial."""
    if spec.profile is None:
        return {}
    return {PROFILE_TAG: spec.profile, DEVIATIONS_TAG: "\n".join(spec.deviations) or "none"}


def sweep_lock(sweep_dir: Path, name: str):
    """The running sweep's hold on its folder: a second --resume of it fails at once (exit 2)."""
    return file_lock(sweep_dir, blocking=False, what=f"sweep '{name}' ({sweep_dir})")


def run_sweep(
    spec: SweepSpec,
    *,
    overrides: list[str] | None = None,
    resume: bool | str = False,
    storage: Path = Path("runs/sweeps"),
    allow_changes: bool = False,
) -> SweepResult:
    """Run (or resume) a sweep; every config is validated before Ray or MLflow start.

    ``resume``: True continues the newest unfinished invocation, a folder name (or path) that one whatever
    its state. A resume runs what the invocation recorded; ``allow_changes`` lets it run an edited sweep,
    new overrides or other data, and records them on the parent run."""
    started = time.monotonic()  # this invocation's wall time runs from here to its report
    overrides = list(overrides or [])
    check_sweep_keys(spec)
    check_published(spec)
    storage = check_writable_dir(storage, "--storage")
    with contextlib.ExitStack() as held:
        state: dict[str, Any] = {}
        if resume:
            sweep_dir = pick(storage, spec.name, resume if isinstance(resume, str) else None)
            check_writable_dir(sweep_dir, "--storage")
            held.enter_context(sweep_lock(sweep_dir, spec.name))  # a running sweep: refused at once
            check_layout(sweep_dir)  # before anything is reopened
            state = read_sweep_state(sweep_dir)
            # the parent run it names, which the storage's writers cannot change, against the folder's state
            tracking_uri = check_tracking_store(resolve_tracking_uri())
            parent_record = MlflowTracker.for_reading(tracking_uri).run_record(state["parent_run_id"])
            check_parent(sweep_dir, spec.name, state, parent_record)
            overrides = [*state["overrides"], *overrides]  # this command line's on top of the recorded ones
        tree = base_tree(spec, overrides)
        if resume and nothing_left_to_run(sweep_dir, state, tune_trials(spec, tree)):
            return SweepResult([], None, sweep_dir, state["parent_run_id"], "", unchanged=True)  # as recorded
        checked = check_trials(spec, tree)
        if spec.group > 1:  # its groups, checked before Ray (itrlab.sweep.groups)
            sweep_groups(spec, tree)
        check_table_rows(spec)
        check_local_resources(spec)
        first = first_trial(tree, checked)
        for config in {str(c.dataset.root): c for c in (first, *checked.values())}.values():
            check_data_content(config)  # captions and sampled features, before MLflow or the sweep's folder
        if resume:
            generate_if_synthetic(first)  # the data the record's digest is compared with
            now = invocation_record(spec, overrides, first, data_digests([first, *checked.values()]))
            state["accepted"] = check_unchanged(state, now, allow_changes, sweep_dir)
            state["now"] = now
        if not resume:
            tracking_uri = check_tracking_store(resolve_tracking_uri())  # answers, in seconds; a new store created once
        close_orphaned_runs(tracking_uri)  # runs of processes that died, on this machine: KILLED with the reason
        if not resume:
            sweep_dir = new_sweep_dir(storage, spec.name)
            held.enter_context(sweep_lock(sweep_dir, spec.name))
        held.enter_context(watching("the sweep's driver"))  # it owns the parent and trial runs from here on
        try:
            return _run_locked(spec, tree, checked, overrides, sweep_dir, tracking_uri, state, started, bool(resume))
        except BaseException:
            if not resume and not (sweep_dir / STATE_FILE).exists():  # stopped before it began: leave no folder
                shutil.rmtree(sweep_dir, ignore_errors=True)
            raise


def _run_locked(
    spec: SweepSpec,
    tree: dict[str, Any],
    checked: dict[str, ExperimentConfig],
    overrides: list[str],
    sweep_dir: Path,
    tracking_uri: str,
    state: dict[str, Any],
    started: float,
    resume: bool,
) -> SweepResult:
    """The sweep's life, its folder locked: its data, Ray, the parent run, the trials, their report."""
    first = first_trial(tree, checked)
    generate_if_synthetic(first)  # once, before trials share it
    now = state.pop("now", None) or invocation_record(spec, overrides, first, data_digests([first, *checked.values()]))
    tree, checked = share_stages(tree, checked, sweep_dir)
    started_ray = start_ray(spec, tracking_uri)
    parent = open_parent_run(spec, sweep_dir, overrides, tracking_uri, state, now)
    save_trials_view(spec, parent, sweep_dir.name)  # the trials, one row each: the parent's description links it
    _log.info(f"sweep {spec.name}: {sweep_dir}; MLflow parent run {parent.run_id} at {tracking_uri}")
    try:
        source = {**source_tags(), **profile_tags(spec), OWNER_TAG: owner_id()}  # the driver settles the trials' runs
        context = TrialContext(
            tree,
            spec.name,
            tracking_uri,
            parent.run_id,
            spec.name,
            str(sweep_dir / "train"),
            sweep_dir=str(sweep_dir),
            metric=spec.objective.metric,
            source=tuple(source.items()),
            checked=checked,
        )
        tuner = build_tuner(spec, context, sweep_dir, first.train.epochs, resume=resume)
        rows, interrupted = fit_trials(tuner, spec, sweep_dir, started_ray)
        settle_trial_runs(parent, rows)
        report = report_sweep(spec, rows, parent, first, invocation_seconds=time.monotonic() - started)
    except BaseException as err:
        end_parent_early(parent, err, started_ray, sweep_dir)
        raise
    return end_parent(spec, parent, rows, interrupted, sweep_dir, report)


def first_trial(tree: dict[str, Any], checked: dict[str, ExperimentConfig]) -> ExperimentConfig:
    """The config the sweep's own steps read (its data, epochs and provenance): the first grid point's, as
    checked; the base alone may lack what every point sets (a DBL sweep whose grid names the strategy).
    An Optuna search checks no points here: its base."""
    return next(iter(checked.values()), None) or trial_config(tree, {})


def share_stages(
    tree: dict[str, Any], checked: dict[str, ExperimentConfig], sweep_dir: Path
) -> tuple[dict[str, Any], dict[str, ExperimentConfig]]:
    """The trials share their trained stages (:mod:`itrlab.train.stages`) in ``<sweep_dir>/stages`` unless the
    experiment names a folder: set in the base tree and in the checked configs alike. A trial that trains
    another trial's stage from scratch as it is (a baseline row that is the other rows' base network) keeps
    its model there as that stage (``output.keep_as_stage``): the stage is not trained a second time."""
    if not (tree.get("output") or {}).get("stages"):
        stages = sweep_dir / "stages"
        for config in checked.values():
            config.output.stages = stages
        tree = {**tree, "output": {**(tree.get("output") or {}), "stages": str(stages)}}
    kept = stages_trained_by_rows(list(checked.values()))
    for config in checked.values():
        config.output.keep_as_stage = not config.stages and own_key(config) in kept
    return tree, checked


def in_process(spec: SweepSpec) -> bool:
    """Whether a trial trains in its own process (one worker), not through a TorchTrainer."""
    return spec.workers[0] == 1 and spec.trainer == "auto"


def start_ray(spec: SweepSpec, tracking_uri: str) -> bool:
    """Join the cluster or start a local Ray (True: this process started it), with room for a trial."""
    workers, cpus, _ = spec.workers
    fast = in_process(spec)  # one-worker trials: no TorchTrainer, so no need of the dashboard
    started_ray = init_ray(tracking_uri, 0 if fast else workers * cpus + 2, dashboard=not fast)
    sigterm_as_sigint()  # again: the Ray driver replaced the handler
    if not started_ray:
        wait_for_room(spec)
    return started_ray


def open_parent_run(
    spec: SweepSpec,
    sweep_dir: Path,
    overrides: list[str],
    tracking_uri: str,
    state: dict[str, Any],
    now: dict[str, Any],
) -> MlflowTracker:
    """The sweep's parent run: reopened on ``--resume`` (``state``; the changes ``--allow-changes`` accepted
    recorded on it), else created with the sweep's params; the sweep's state file written beside it."""
    parent = MlflowTracker(spec.name, tracking_uri)
    if state:
        changes = state.pop("accepted", [])
        parent.start(run_name=state["run_name"], tags={}, params={}, run_id=state["parent_run_id"])
        parent.set_tags({COMMAND_OVERRIDES_TAG: json.dumps(overrides)})  # what this invocation runs with
        if changes:
            parent.record_changes(changes)
            _log.info(
                f"--allow-changes: resuming with {len(changes)} change(s), recorded on the parent run: "
                f"{'; '.join(changes)}"
            )
            state = {**state, **now}  # the next --resume compares with what runs now
        write_state(sweep_dir, {**now, **state, "status": "RUNNING"})
        return parent
    run_name = f"{spec.name}-{sweep_dir.name}"
    params = {
        "sweep.experiment": spec.experiment,
        "sweep.overrides": " ".join([*spec.overrides, *overrides]),
        "sweep.grid": json.dumps(spec.grid),
        "sweep.seeds": str(spec.seeds),
        "sweep.optuna": spec.optuna.model_dump_json() if spec.optuna else "none",
        "sweep.objective": f"{spec.objective.mode} {spec.objective.metric}",
    }
    parent.start(
        run_name=run_name,
        tags={
            SWEEP_TAG: spec.name,
            "itrlab.sweep_dir": str(sweep_dir),
            COMMAND_OVERRIDES_TAG: json.dumps(overrides),
            **profile_tags(spec),
        },
        params=params,
    )
    write_state(
        sweep_dir,
        {
            "parent_run_id": parent.run_id,
            "run_name": run_name,
            "tracking_uri": tracking_uri,
            "started_at": time.time(),
            "status": "RUNNING",
            **now,
        },
    )
    return parent


def build_tuner(spec: SweepSpec, context: TrialContext, sweep_dir: Path, epochs: int, resume: bool) -> tune.Tuner:
    """The Tuner of the trials, new in every invocation: nothing Tune saved in an earlier one is read back (each
    trial continues from its own saved state, :mod:`itrlab.sweep.trial_store`)."""
    from itrlab.sweep.console import ended_before, trial_rows, with_console  # progress line, quiet console

    board = sweep_dir / BOARD_FOLDER  # where each trial notes its phase and step (itrlab.sweep.board)

    workers, cpus, gpus = spec.workers
    groups = sweep_groups(spec, context.base_tree) if spec.group > 1 else None  # one Tune trial per group
    function = run_group_trial if groups else trial_function(workers, cpus, gpus, torch_trainer=spec.trainer == "torch")
    trainable = tune.with_resources(
        tune.with_parameters(function, context=context),
        # a TorchTrainer trial's own process only waits on its workers, which hold the resources
        {"cpu": cpus, "gpu": gpus} if in_process(spec) else {"cpu": 0.1},
    )
    settings = tune_config(spec, epochs, in_process(spec), sweep_dir, resume)
    run_config = with_console(
        tune.RunConfig(
            name=TUNE_FOLDER,
            storage_path=str(sweep_dir),
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            callbacks=[NoRetryOnInputError()],
            stop=StopOnStorageError(),
        ),
        spec,
        board=board,
        total=len(groups or []) or (settings.num_samples if spec.optuna else 0),
        ended=ended_before(sweep_dir) if resume and spec.optuna is None else None,
        rows=trial_rows(spec) if spec.optuna is None and not groups else None,
    )
    return tune.Tuner(
        trainable,
        param_space=group_param_space(groups) if groups else param_space(spec),
        run_config=run_config,
        tune_config=settings,
    )


def fit_trials(tuner: tune.Tuner, spec: SweepSpec, sweep_dir: Path, started_ray: bool) -> tuple[list[TrialRow], bool]:
    """Run the trials: a row per trial (those of an earlier invocation that this one did not run again, and the
    grid points never started, included) and whether Ctrl-C or SIGTERM cut the sweep short. A trial the
    scheduler stopped early is recorded as ended in its saved state."""
    StopOnStorageError.reason = None
    with SigintWatch() as sigint:
        results = fit_checking_storage(tuner, sweep_dir)
    if StopOnStorageError.reason is not None:
        raise StorageError(
            f"the sweep's storage can no longer be written: {StopOnStorageError.reason}; "
            f"--resume continues the sweep once it can"
        )
    rows, interrupted = trial_rows(results, sigint.interrupted)
    mark_stopped(sweep_dir, rows)
    rows += earlier_rows(sweep_dir, rows)
    if interrupted and started_ray:  # the cut-short trials' processes end before their runs are settled
        ray.shutdown()
    return with_unstarted(rows, spec), interrupted


def end_parent_early(parent: MlflowTracker, err: BaseException, started_ray: bool, sweep_dir: Path) -> None:
    """The sweep stopped by ``err`` before its report: the trials' runs still RUNNING and the parent end
    KILLED (Ctrl-C, SIGTERM: ``--resume`` continues it) or FAILED, with the reason."""
    if isinstance(err, KeyboardInterrupt):
        kill_running_trial_runs(parent, "the sweep was interrupted; --resume continues it")
        with contextlib.suppress(Exception):
            parent.set_tags({STOP_REASON_TAG: f"{interruption()[0]}; --resume continues the sweep"})
        parent.end("KILLED")
        set_status(sweep_dir, "KILLED")
        return
    kill_running_trial_runs(parent, f"the sweep failed: {failure_reason(err)}")
    with contextlib.suppress(Exception):
        parent.set_tags({STOP_REASON_TAG: failure_reason(err)})
    parent.end("FAILED")
    set_status(sweep_dir, "FAILED")
    if started_ray:  # the trials' processes end now: what Ray forwards of their exit comes before the one line
        with contextlib.suppress(Exception):
            ray.shutdown()


def end_parent(
    spec: SweepSpec,
    parent: MlflowTracker,
    rows: list[TrialRow],
    interrupted: bool,
    sweep_dir: Path,
    report: SweepReport,
) -> SweepResult:
    """The parent run ended KILLED (interrupted), FAILED (no trial finished) or FINISHED; the sweep's result. Its
    link opens the parent run's page on its report (the Artifacts tab, ``sweep/report.html`` shown: the headline
    first, then the table), or, without a report, on its Overview (the description: the link to the trials)."""
    best = best_row(rows, spec.objective.metric, spec.objective.mode)
    if interrupted:
        status, reason = "KILLED", f"{interruption()[0]}; --resume continues the sweep"
    elif best is None:
        status, reason = "FAILED", "no trial finished"
    else:
        status, reason = "FINISHED", None
    if reason:
        parent.set_tags({STOP_REASON_TAG: reason})
    if not reason:  # a resumed sweep that finishes no longer carries the reason it stopped before
        parent.delete_tag(STOP_REASON_TAG)
    parent.end(status)
    set_status(sweep_dir, status)
    link = parent.ui_hint(artifact=report.page) if report.page else parent.ui_hint(tab=OVERVIEW_TAB)
    return SweepResult(rows, best, sweep_dir, parent.run_id, link, interrupted, status, report.headline)
