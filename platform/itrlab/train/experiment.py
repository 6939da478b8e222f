"""One training run from a validated config: data, method, trainer, MLflow, results on disk.

:func:`run_experiment` is what a run's lifecycle (:mod:`itrlab.train.lifecycle`: ``jobs/train.py``, every sweep
trial) trains with: :func:`start_run` builds and opens the run, its trainer fits it, :func:`finish_run` evaluates
its best checkpoint on test. The files of a run directory: docs/training.md#run-directory-and-checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from itrlab import threads as thread_policy
from itrlab.assembly import Experiment, check_experiment, stage_configs
from itrlab.config import ExperimentConfig
from itrlab.config.schema import PREHEAD
from itrlab.data.kinds import kind_of
from itrlab.data.precomp import fingerprint
from itrlab.data.text_features import resolve_folder
from itrlab.data.tokenizers import build_text_tokenizer, load_text_tokenizer
from itrlab.errors import UserInputError, failure_reason
from itrlab.eval import RecallTable, get_protocol, table_from_folds
from itrlab.eval.rank_file import RANKS_FILE, save_ranks
from itrlab.files import atomic_write_text, read_json
from itrlab.methods import BuildContext, build_method
from itrlab.methods.base import MethodModule
from itrlab.methods.registry import scheme_labels
from itrlab.models.glove import GloveCoverage
from itrlab.report.chance import chance_of_table
from itrlab.tracking import MlflowTracker
from itrlab.train.checkpoint import rng_state, seed_everything, set_rng_state
from itrlab.train.device import device_label, place
from itrlab.train.epoch_metrics import MlflowEpochLogger
from itrlab.train.loop import EpochCallback, Trainer, TrainingData
from itrlab.train.provenance import TEST_RECALL, record_data
from itrlab.train.stages import STAGE_TAG, StageStore, TrainedStage, publish_run, start_from, trained_stage
from itrlab.trained.gallery import ARTIFACT as GALLERY
from itrlab.trained.gallery import bundle_gallery
from itrlab.trained.sources import bundle_from_run, requirements_of

_log = logging.getLogger(__name__)
TEST = "test"
PREHEAD_TEST = f"{PREHEAD}_{TEST}"  # the test table read before the projection head (eval.log_prehead)
VOCAB_FILE = "vocab.json"
MLFLOW_FILE = "mlflow_run.json"


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    test: RecallTable
    best_epoch: int
    best_val_rsum: float
    mlflow_run_id: str | None
    mlflow_hint: str | None
    seconds: float = 0.0  # building the method (OAS: training its anchor), training, test evaluation: wall clock
    epochs: int = 0  # the epochs the run has trained, a restored checkpoint's included
    prehead: RecallTable | None = None  # eval.log_prehead: the best checkpoint's test table before the head

    def test_metrics(self) -> dict[str, float]:
        """The final test metrics a sweep's trial reports: ``test_<metric>``, and ``prehead_test_<metric>`` with
        ``eval.log_prehead``."""
        metrics = self.test.metrics(prefix=f"{TEST}_")
        return metrics if self.prehead is None else {**metrics, **self.prehead.metrics(prefix=f"{PREHEAD_TEST}_")}


def generate_if_synthetic(config: ExperimentConfig) -> None:
    """Write the files that ``config``'s dataset kind makes on first use, at its ``dataset.root`` (the synthetic
    generator's; idempotent: an existing one of the same spec is kept); data read as it is is left alone."""
    kind_of(config.dataset).prepare()


def prepare_data(config: ExperimentConfig, run_dir: Path) -> TrainingData:
    """Open the three splits (generating synthetic data first if needed) and the text tokenizer.

    The tokenizer (BiGRU: the vocabulary of the training captions only; BERT: the pretrained
    model's tokenizer) is stored in the run directory, so a resumed run encodes captions exactly as
    before.
    """
    dataset = config.dataset
    kind = kind_of(dataset)
    kind.prepare()
    splits = {role: kind.open_split(role) for role in ("train", "val", "test")}
    text = config.model.text
    vocab_path = run_dir / VOCAB_FILE
    if vocab_path.is_file():
        vocab = load_text_tokenizer(vocab_path, text.encoder, text.bert_path)
    else:
        vocab = build_text_tokenizer(
            text.encoder,
            splits["train"].captions,
            min_count=text.vocab_min_count,
            model_dir=text.bert_path,
            features_dir=resolve_folder(dataset.root, dataset.text_features),
        )
        run_dir.mkdir(parents=True, exist_ok=True)  # only once every split has been read
        vocab.save(vocab_path)
    return TrainingData(vocab=vocab, **splits)


def build_context(
    config: ExperimentConfig,
    data: TrainingData,
    run_dir: Path | None = None,
    device: torch.device | None = None,
    store: StageStore | None = None,
) -> BuildContext:
    """What the config's method is built from: the opened data, the run directory, and (OAS) a way to
    train the plain method first: its anchor, a stage (:mod:`itrlab.train.stages`) shared by every run
    of the same plain config, seed and data."""
    splits = {"train": data.train, "val": data.val, "test": data.test}

    def train_anchor(plain: ExperimentConfig) -> Path:
        with kept_rng_state():  # the build continues with the generators as they were
            stage = trained_stage(
                "anchor",
                plain,
                data,
                fingerprint(plain.dataset.root),
                store=store or stage_store(plain, run_dir),
                build=lambda c: build_run_method(c, data, device=device)[0],
                device=device,
            )
        context.notes["stages"] = {**context.notes.get("stages", {}), "anchor": stage}
        return stage.model

    context = BuildContext.of(
        vocab=data.vocab, splits=splits, run_dir=run_dir, train_anchor=train_anchor if run_dir is not None else None
    )
    return context


def build_run_method(
    config: ExperimentConfig,
    data: TrainingData,
    run_dir: Path | None = None,
    device: torch.device | None = None,
    store: StageStore | None = None,
) -> tuple[MethodModule, dict]:
    """The config's method for this data, each fresh branch prepared, and what preparing found
    (``notes``: ``glove``, the GloVe coverage with ``model.text.glove``; a method's own figures such
    as CODER's ``concepts``, a dict of numbers; ``stages``, the stages trained or found). An OAS anchor
    loaded from its checkpoint keeps its trained weights; a config with ``stages`` starts from the last."""
    context = build_context(config, data, run_dir, device, store)
    method = build_method(config, context)
    if config.stages:
        with kept_rng_state():
            trained = run_stages(config, data, method, device, store or stage_store(config, run_dir))
        context.notes["stages"] = {**context.notes.get("stages", {}), **trained}
    return method, context.notes


@contextlib.contextmanager
def kept_rng_state():
    """Stages seed and train on their own: the run goes on with its generators as they were, so that
    a stage trained here or found trained leaves the same run."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def stage_store(
    config: ExperimentConfig,
    run_dir: Path | None,
    tracker: MlflowTracker | None = None,
    parent_run_id: str | None = None,
) -> StageStore:
    """Where ``config``'s stages are kept: ``output.stages``, else ``stages/`` beside the run's folder
    (``runs/<experiment>/stages``: shared by the experiment's runs), else under ``output.dir``."""
    root = config.output.stages or (run_dir.parent / "stages" if run_dir is not None else config.output.dir / "stages")
    if tracker is None:
        return StageStore(Path(root))
    return StageStore(Path(root), tracker.tracking_uri, tracker.experiment, parent_run_id)


def run_stages(
    config: ExperimentConfig, data: TrainingData, method: MethodModule, device: torch.device | None, store: StageStore
) -> dict[str, TrainedStage]:
    """Train (or find) ``config``'s stages in order, each starting from the one before, and start
    ``method`` from the last."""
    digest = fingerprint(config.dataset.root)
    trained: dict[str, TrainedStage] = {}
    previous = None
    for spec, stage_config in zip(config.stages, stage_configs(config)):
        start = None if previous is None else (lambda m, p=previous: start_from(m, *p))
        stage = trained_stage(
            spec.name,
            stage_config,
            data,
            digest,
            store=store,
            build=lambda c: build_run_method(c, data, device=device)[0],
            start=start,
            device=device,
        )
        trained[spec.name], previous = stage, (stage, spec)
    counts = start_from(method, *previous)
    _log.info(
        f"starting from stage {previous[1].name}: {counts['copied']} weights copied, {counts['fresh']} new "
        f"under {', '.join(previous[1].copy_)}"
        + (f"; frozen: {', '.join(previous[1].freeze)}" if previous[1].freeze else "")
    )
    return trained


def preparation_metrics(notes: dict) -> dict[str, float]:
    """The numbers of :func:`build_run_method`'s notes, as metrics logged once at step 0."""
    metrics: dict[str, float] = {}
    for value in notes.values():
        if isinstance(value, GloveCoverage):
            metrics.update(value.metrics())
        elif isinstance(value, dict):
            metrics.update({k: float(v) for k, v in value.items() if isinstance(v, (int, float))})
    return metrics


def run_tags(config: ExperimentConfig) -> dict[str, str]:
    """Tags to filter runs by in the MLflow UI (each scheme's section on one line, ``none`` when unset:
    ``tags.<section> = 'none'`` keeps a plain method apart from the same method inside a scheme), and the
    run's description (``mlflow.note.content``)."""
    schemes = scheme_labels(config)
    inside = "".join(f" under {label}" for label in schemes.values() if label != "none")
    return {
        "method": config.method.name,
        "loss": config.loss.name,
        **schemes,
        "dataset": config.dataset.name,
        "protocol": config.eval.test_protocol,
        "seed": str(config.seed),
        "mlflow.note.content": f"{config.name}: method {config.method.name} (loss {config.loss.name}){inside} "
        f"on {config.dataset.name}, test protocol {config.eval.test_protocol}, "
        f"seed {config.seed}, {config.train.epochs} epochs",
    }


def device_hours(device: torch.device, world_size: int, seconds: float) -> dict[str, float]:
    """What a run cost, counted as a sweep's report counts it: wall time x the devices held, one GPU per
    worker (``gpu_hours``) or the CPUs Ray reserved per worker (``cpu_hours``; outside Ray, torch's threads)."""
    if device.type == "cuda":
        return {"gpu_hours": seconds * world_size / 3600}
    cpus = thread_policy.ray_reserved_cpus() or torch.get_num_threads()
    return {"cpu_hours": seconds * world_size * cpus / 3600}


def recorded_run_id(path: Path) -> str | None:
    """The MLflow run id that ``mlflow_run.json`` records (None without the file); UserInputError when
    the file is not what itrlab wrote."""
    if not path.is_file():
        return None
    payload = read_json(path, "the run's MLflow record")
    run_id = payload.get("run_id") if isinstance(payload, dict) else None
    if not isinstance(run_id, str) or not run_id.isalnum():
        raise UserInputError(
            f'{path} names no MLflow run (it must hold {{"run_id": ...}}); delete it to start '
            f"a new MLflow run for this directory"
        )
    return run_id


@dataclass
class StartedRun:
    """A run built and opened (:func:`start_run`), ready to train: its trainer, its MLflow run (when
    tracked), the stages it starts from and the clock of its cost."""

    config: ExperimentConfig
    run_dir: Path
    trainer: Trainer
    tracker: MlflowTracker | None
    run_id: str | None
    stages: dict[str, TrainedStage]
    stage_cost: float  # seconds of its stages beyond those spent here (a stage counts in full)
    started: float  # perf_counter when building the method began
    world_size: int = 1
    device_share: float = 1.0  # of the devices it trains on: 1 / G for a member of a group of G


def start_run(
    experiment: Experiment | ExperimentConfig,
    run_dir: Path,
    *,
    callbacks: list[EpochCallback] | None = None,
    tracker: MlflowTracker | None = None,
    parent_run_id: str | None = None,
    run_name: str | None = None,
    rank: int = 0,
    world_size: int = 1,
    device: torch.device | None = None,
    shared_resident=None,
) -> StartedRun:
    """Everything of :func:`run_experiment` before training: the experiment placed on its device
    (:func:`itrlab.train.device.place`, unless it was), the data, the method (and its stages), the trainer
    (restoring ``last.pt``), the MLflow run (reopened on resume) and ``config.yaml``."""
    if not isinstance(experiment, Experiment):
        experiment = check_experiment(experiment)
    experiment = place(experiment, device)  # once: an experiment placed where the run started keeps its device
    config, device = experiment.config, experiment.device
    data = prepare_data(config, run_dir)  # reads every split first: a data error leaves no file behind

    seed_everything(config.seed)
    started = time.perf_counter()  # the cost of the run includes building the method and its stages
    store = stage_store(config, run_dir, tracker if rank == 0 else None, parent_run_id)
    method, notes = build_run_method(config, data, run_dir, device, store)
    stages = notes.get("stages", {})
    # a stage counts in full in every run that starts from it (found trained or trained here), the
    # time spent here on stages (training one, or waiting for another run's) not twice
    stage_cost = sum(stage.seconds for stage in stages.values()) - (time.perf_counter() - started) if stages else 0.0
    if notes.get("glove") is not None:
        _log.info(notes["glove"].describe())
    callbacks = list(callbacks or [])
    # the trainer first: it restores last.pt, and a checkpoint that does not fit is refused before the
    # MLflow run is (re)opened, so a finished run never turns FAILED on a refused resume
    trainer = Trainer(
        config,
        method,
        data,
        run_dir,
        callbacks,
        rank=rank,
        world_size=world_size,
        device=device,
        shared_resident=shared_resident,
    )
    run_id = None
    if tracker is not None:
        run_id = open_mlflow_run(tracker, trainer, notes, run_name or f"{config.name}-{run_dir.name}", parent_run_id)
    # once nothing was refused
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(config.dump(), sort_keys=False))
    record_data(run_dir, config)  # what a --resume compares its data with (itrlab.train.provenance)
    return StartedRun(config, run_dir, trainer, tracker, run_id, stages, stage_cost, started, world_size)


def open_mlflow_run(
    tracker: MlflowTracker, trainer: Trainer, notes: dict, run_name: str, parent_run_id: str | None
) -> str:
    """The MLflow run of ``trainer``'s run, created or reopened (the one ``mlflow_run.json`` records) with its
    tags, params, data set and preparation's figures; its epochs logged by a callback of the training loop
    (:class:`~itrlab.train.epoch_metrics.MlflowEpochLogger`), those a failed store left caught up first."""
    config, run_dir = trainer.config, trainer.run_dir
    previous = run_dir / MLFLOW_FILE
    reuse = recorded_run_id(previous)
    stages = notes.get("stages", {})
    tags = {
        **run_tags(config),
        "run_dir": str(run_dir),
        "device": device_label(trainer.device),
        **{f"{STAGE_TAG}.{name}": stage.run_id for name, stage in stages.items() if stage.run_id},
    }
    run_id = tracker.start(
        run_name=run_name, tags=tags, params=config.flat(), run_id=reuse, parent_run_id=parent_run_id
    )
    atomic_write_text(previous, json.dumps({"run_id": run_id, "tracking_uri": tracker.tracking_uri}))
    if not reuse:
        tracker.log_dataset(config.dataset.name, fingerprint(config.dataset.root), str(config.dataset.root))
    if preparation_metrics(notes):
        tracker.log_final_metrics(preparation_metrics(notes))
    # MLflow first: an epoch whose checkpoint a sweep trial has reported is always in MLflow, so a
    # trial killed between the two and retried from that checkpoint leaves no gap in the metrics
    logger = MlflowEpochLogger(tracker, run_dir, config.train.lr_decay_choices or ())
    logger.catch_up(trainer.state.epoch, trainer.state.decay_after)  # epochs a failed store left, from the backlog
    trainer.callbacks.insert(0, logger)
    return run_id


def keeps_model_as_stage(run: StartedRun) -> bool:
    """Whether ``run`` keeps its best model as the stage of its config (:func:`itrlab.train.stages.publish_run`):
    it is asked to (``output.keep_as_stage``, which a sweep sets on a row that is another row's stage), has a
    stage folder to share (``output.stages``), trained from scratch (no stage, no OAS anchor) on whole
    devices, and this is the process that writes its model."""
    output = run.config.output
    return (
        output.keep_as_stage
        and output.stages is not None
        and not run.stages
        and run.trainer.rank == 0
        and run.device_share == 1.0
    )


def finish_run(run: StartedRun) -> RunResult:
    """Everything of :func:`run_experiment` after training: the test table of the best checkpoint, on disk
    and in MLflow with the run's cost."""
    trainer, tracker, state = run.trainer, run.tracker, run.trainer.state
    if keeps_model_as_stage(run):
        publish_run(
            run.config.output.stages,
            run.config,
            fingerprint(run.config.dataset.root),
            run.run_dir,
            run.run_id,
            time.perf_counter() - run.started,
        )
    protocol = get_protocol(run.config.eval.test_protocol).name
    folds = trainer.test()
    test = table_from_folds(folds, protocol, trainer.data.test.n_images)
    prehead = None
    if run.config.eval.log_prehead:  # the same checkpoint, read before its projection head
        prehead_folds = trainer.test_prehead()
        prehead = table_from_folds(prehead_folds, protocol, trainer.data.test.n_images)
        save_ranks(run.run_dir / f"{PREHEAD}_{RANKS_FILE}", prehead_folds, protocol)
        atomic_write_text(run.run_dir / f"{PREHEAD}_{TEST_RECALL}", json.dumps(prehead.to_dict(), indent=2))
    save_ranks(run.run_dir / RANKS_FILE, folds, protocol)
    chance = chance_of_table(test, run.config.dataset.captions_per_image)
    atomic_write_text(
        run.run_dir / "test_recall.md", test.to_markdown() + (f"\n\n{chance.markdown()}\n" if chance else "\n")
    )
    atomic_write_text(run.run_dir / TEST_RECALL, json.dumps(test.to_dict(), indent=2))  # last: the run finished
    seconds = time.perf_counter() - run.started + run.stage_cost
    if tracker is not None:
        cost = {"train_seconds": seconds, **device_hours(trainer.device, run.world_size, seconds * run.device_share)}
        # a finished run trained further (--resume with a larger train.epochs): its earlier training counts too
        earlier = tracker.run_metrics(tuple(cost))
        tracker.log_recall_table(test, TEST, epoch=state.epoch, chance=chance)
        tracker.log_file(run.run_dir / RANKS_FILE)
        if prehead is not None:
            tracker.log_recall_table(prehead, PREHEAD_TEST, epoch=state.epoch)
            tracker.log_file(run.run_dir / f"{PREHEAD}_{RANKS_FILE}")
        if run.config.output.log_model == "best" and trainer.rank == 0:
            log_best_model(run)
        stage_metrics = {"stage_seconds": sum(stage.seconds for stage in run.stages.values())} if run.stages else {}
        tracker.log_final_metrics(
            {
                "best_epoch": state.best_epoch,
                "best_val_rsum": state.best_rsum,
                **stage_metrics,
                **{key: value + earlier.get(key, 0.0) for key, value in cost.items()},
            }
        )
    return RunResult(
        run.run_dir,
        test,
        state.best_epoch,
        state.best_rsum,
        run.run_id,
        tracker.ui_hint() if tracker is not None else None,
        seconds,
        state.epoch,
        prehead,
    )


def log_best_model(run: StartedRun) -> str:
    """The run's best model logged to its MLflow run as a model (``runs:/<id>/model``, docs/models.md), and,
    when its data came from photos, the gallery of what it retrieves (``gallery.html``)."""
    # not "itrlab-": /tmp/itrlab-* are local clusters' folders (tests/cluster_harness), which tests count
    with tempfile.TemporaryDirectory(prefix="itrlab_bundle_") as scratch:
        bundle = bundle_from_run(run.run_dir, Path(scratch) / "bundle", run.run_id)
        uri = run.tracker.log_model(bundle, requirements_of(bundle))
        try:
            page = bundle_gallery(bundle, uri)  # the model by its URI, not the scratch folder
        except Exception as err:  # noqa: BLE001 - a gallery never fails a run whose model and table are logged
            _log.warning("the run's retrieval gallery was not made: %s", failure_reason(err))
            page = None
        if page is not None:
            run.tracker.log_gallery(page, GALLERY)
        return uri


def run_experiment(
    experiment: Experiment | ExperimentConfig,
    run_dir: Path,
    *,
    callbacks: list[EpochCallback] | None = None,
    tracker: MlflowTracker | None = None,
    parent_run_id: str | None = None,
    run_name: str | None = None,
    rank: int = 0,
    world_size: int = 1,
    device: torch.device | None = None,
) -> RunResult:
    """Train (or continue training in ``run_dir``), then evaluate the best checkpoint on test once.

    ``experiment``: an assembled experiment (:func:`itrlab.assembly.assemble`), or a config whose data
    is checked here. ``device`` overrides ``train.device`` (a Ray Train worker passes the GPU Ray gave it).
    """
    run = start_run(
        experiment,
        run_dir,
        callbacks=callbacks,
        tracker=tracker,
        parent_run_id=parent_run_id,
        run_name=run_name,
        rank=rank,
        world_size=world_size,
        device=device,
    )
    with tracker.ending() if tracker is not None else contextlib.nullcontext():
        if run.trainer.resumed_from_epoch:
            _log.info(f"resuming {run_dir} after epoch {run.trainer.resumed_from_epoch}")
        run.trainer.fit()
        return finish_run(run)
