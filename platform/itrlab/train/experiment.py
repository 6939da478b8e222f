"""One training run from a validated config: data, method, trainer, MLflow, results on disk.

``run_experiment`` is what ``jobs/train.py`` (and, later, every sweep trial) calls. Layout of a run
directory::

    runs/<experiment>/<run>/
        config.yaml        the resolved config
        vocab.json         the text tokenizer: vocabulary of the training captions (BiGRU), or the
                           pretrained model directory whose tokenizer encodes them (BERT)
        last.pt, best.pt   checkpoints (see itrlab.train.checkpoint)
        mlflow_run.json    the MLflow run this directory logs to (reused on resume)
        test_recall.json   the final test table (also .md)
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch
import yaml

from itrlab import threads as thread_policy
from itrlab.config import ExperimentConfig
from itrlab.assembly import Experiment, check_experiment
from itrlab.config.checks import synthetic_spec_of
from itrlab.errors import UserInputError
from itrlab.files import read_json
from itrlab.data import generate_synthetic, open_precomp
from itrlab.data.precomp import fingerprint
from itrlab.data.tokenizers import build_text_tokenizer, load_text_tokenizer
from itrlab.eval import RecallTable
from itrlab.methods import BuildContext, build_method
from itrlab.methods.base import MethodModule
from itrlab.models.glove import GloveCoverage
from itrlab.tracking import MlflowTracker
from itrlab.train.checkpoint import MODEL, rng_state, seed_everything, set_rng_state
from itrlab.train.device import describe, resolve_device
from itrlab.train.loop import EpochCallback, EpochReport, Trainer, TrainingData

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


def generate_if_synthetic(config: ExperimentConfig) -> None:
    """Generate the synthetic data set ``config`` names, at its ``dataset.root`` (idempotent: an existing
    one of the same spec is kept); real data is left alone."""
    if config.dataset.kind == "synthetic":
        generate_synthetic(config.dataset.root, synthetic_spec_of(config))


def prepare_data(config: ExperimentConfig, run_dir: Path) -> TrainingData:
    """Open the three splits (generating synthetic data first if needed) and the text tokenizer.

    The tokenizer (BiGRU: the vocabulary of the training captions only; BERT: the pretrained
    model's tokenizer) is stored in the run directory, so a resumed run encodes captions exactly as
    before.
    """
    dataset = config.dataset
    generate_if_synthetic(config)
    splits = {role: open_precomp(dataset.root, getattr(dataset.splits, role), dataset.captions_per_image)
              for role in ("train", "val", "test")}
    text = config.model.text
    vocab_path = run_dir / VOCAB_FILE
    if vocab_path.is_file():
        vocab = load_text_tokenizer(vocab_path, text.encoder, text.bert_path)
    else:
        vocab = build_text_tokenizer(text.encoder, splits["train"].captions, min_count=text.vocab_min_count,
                                     model_dir=text.bert_path)
        run_dir.mkdir(parents=True, exist_ok=True)  # only once every split has been read
        vocab.save(vocab_path)
    return TrainingData(vocab=vocab, **splits)


class ConsoleProgress:
    """Prints one line per epoch."""

    def __init__(self, stream: TextIO = sys.stdout, prefix: str = ""):
        self.stream = stream
        self.prefix = prefix

    def on_epoch_end(self, report: EpochReport) -> None:
        val = report.val
        marker = " *best*" if report.is_best else ""
        print(f"{self.prefix}epoch {report.epoch:>3}/{report.epochs}  loss {report.loss:9.4f}  lr {report.lr:.2e}  "
              f"val rsum {val.rsum:6.1f} (i2t R@1 {val.i2t_r1:5.1f}, t2i R@1 {val.t2i_r1:5.1f})  "
              f"{report.seconds:5.1f}s{marker}", file=self.stream, flush=True)


class MlflowEpochLogger:
    def __init__(self, tracker: MlflowTracker):
        self.tracker = tracker

    def on_epoch_end(self, report: EpochReport) -> None:
        self.tracker.log_metrics(report.metrics(), step=report.epoch)


def build_context(config: ExperimentConfig, data: TrainingData, run_dir: Path | None = None,
                  device: torch.device | None = None) -> BuildContext:
    """What the config's method is built from: the opened data, the run directory, and (OAS stage 1)
    a way to train the plain method first in ``run_dir/anchor``."""
    splits = {"train": data.train, "val": data.val, "test": data.test}

    def train_anchor(plain: ExperimentConfig) -> Path:
        # stage 1 seeds and trains on its own; the build continues with the generators as they were
        state = rng_state()
        try:
            return train_plain_anchor(plain, data, run_dir / "anchor", device)
        finally:
            set_rng_state(state)

    return BuildContext.of(vocab=data.vocab, splits=splits, run_dir=run_dir,
                           train_anchor=train_anchor if run_dir is not None else None)


def build_run_method(config: ExperimentConfig, data: TrainingData, run_dir: Path | None = None,
                     device: torch.device | None = None) -> tuple[MethodModule, dict]:
    """The config's method for this data, each fresh branch prepared, and what preparing found
    (``notes``: ``glove``, the GloVe coverage with ``model.text.glove``; a method's own figures such
    as CODER's ``concepts``, a dict of numbers). An OAS anchor loaded from its checkpoint keeps its
    trained weights."""
    context = build_context(config, data, run_dir, device)
    method = build_method(config, context)
    return method, context.notes


def preparation_metrics(notes: dict) -> dict[str, float]:
    """The numbers of :func:`build_run_method`'s notes, as metrics logged once at step 0."""
    metrics: dict[str, float] = {}
    for value in notes.values():
        if isinstance(value, GloveCoverage):
            metrics.update(value.metrics())
        elif isinstance(value, dict):
            metrics.update({k: float(v) for k, v in value.items() if isinstance(v, (int, float))})
    return metrics


def train_plain_anchor(plain: ExperimentConfig, data: TrainingData, anchor_dir: Path,
                       device: torch.device | None = None) -> Path:
    """OAS stage 1: train the plain method (no cooperative section) in ``anchor_dir``; its ``model.pt``.

    The stage resumes from its own ``last.pt`` and is skipped once finished, so a restarted run never
    trains the anchor twice.
    """
    anchor_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(plain.seed)
    anchor, _ = build_run_method(plain, data)
    trainer = Trainer(plain, anchor, data, anchor_dir, [ConsoleProgress(prefix="anchor ")], device=device)
    if trainer.resumed_from_epoch < plain.train.epochs:
        print(f"OAS stage 1: training the anchor in {anchor_dir}", flush=True)
    trainer.fit()
    print(f"OAS stage 2: boosting from {anchor_dir / MODEL}", flush=True)
    return anchor_dir / MODEL


def cooperative_label(config: ExperimentConfig) -> str:
    """The cooperative scheme on one line (``oss strategy=F``, ``oss loss=dml``), or ``none``."""
    coop = config.cooperative
    if coop is None:
        return "none"
    return f"{coop.scenario} " + (f"strategy={coop.strategy}" if coop.strategy else f"loss={coop.loss}")


def run_tags(config: ExperimentConfig) -> dict[str, str]:
    """Tags to filter runs by in the MLflow UI (``tags.cooperative = 'none'`` keeps plain VSE++ apart
    from DBL's boosted VSE++), and the run's description (``mlflow.note.content``)."""
    cooperative = cooperative_label(config)
    scheme = "" if cooperative == "none" else f" under {cooperative}"
    return {"method": config.method.name, "loss": config.loss.name, "cooperative": cooperative,
            "dataset": config.dataset.name, "protocol": config.eval.test_protocol, "seed": str(config.seed),
            "mlflow.note.content": f"{config.name}: method {config.method.name} (loss {config.loss.name}){scheme} "
                                   f"on {config.dataset.name}, test protocol {config.eval.test_protocol}, "
                                   f"seed {config.seed}, {config.train.epochs} epochs"}


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
        raise UserInputError(f"{path} names no MLflow run (it must hold {{\"run_id\": ...}}); delete it to start "
                             f"a new MLflow run for this directory")
    return run_id


def run_experiment(experiment: Experiment | ExperimentConfig, run_dir: Path, *, callbacks: list[EpochCallback] | None = None,
                   tracker: MlflowTracker | None = None, parent_run_id: str | None = None,
                   run_name: str | None = None, rank: int = 0, world_size: int = 1,
                   device: torch.device | None = None) -> RunResult:
    """Train (or continue training in ``run_dir``), then evaluate the best checkpoint on test once.

    ``experiment``: an assembled experiment (:func:`itrlab.assembly.assemble`), or a config whose data
    is checked here. ``device`` overrides ``train.device`` (a Ray Train worker passes the GPU Ray gave it).
    """
    if not isinstance(experiment, Experiment):
        experiment = check_experiment(experiment)
    config = experiment.config
    device = device or resolve_device(config.train.device)
    thread_policy.apply(config.train.threads)  # torch's CPU threads (itrlab.threads): a Ray trial's reserved CPUs, ...
    data = prepare_data(config, run_dir)  # reads every split first: a data error leaves no file behind

    seed_everything(config.seed)
    started = time.perf_counter()  # the cost of the run includes building the method: OAS trains its anchor there
    method, notes = build_run_method(config, data, run_dir, device)
    if notes.get("glove") is not None:
        print(notes["glove"].describe(), flush=True)
    callbacks = list(callbacks or [])
    # the trainer first: it restores last.pt, and a checkpoint that does not fit is refused before the
    # MLflow run is (re)opened, so a finished run never turns FAILED on a refused resume
    trainer = Trainer(config, method, data, run_dir, callbacks, rank=rank, world_size=world_size, device=device)
    run_id = None
    if tracker is not None:
        previous = run_dir / MLFLOW_FILE
        reuse = recorded_run_id(previous)
        tags = {**run_tags(config), "run_dir": str(run_dir), "device": describe(device)}
        run_id = tracker.start(run_name=run_name or f"{config.name}-{run_dir.name}", tags=tags,
                               params=config.flat(), run_id=reuse, parent_run_id=parent_run_id)
        previous.write_text(json.dumps({"run_id": run_id, "tracking_uri": tracker.tracking_uri}))
        if not reuse:
            tracker.log_dataset(config.dataset.name, fingerprint(config.dataset.root), str(config.dataset.root))
        if preparation_metrics(notes):
            tracker.log_final_metrics(preparation_metrics(notes))
        # MLflow first: an epoch whose checkpoint a sweep trial has reported is always in MLflow, so a
        # trial killed between the two and retried from that checkpoint leaves no gap in the metrics
        callbacks.insert(0, MlflowEpochLogger(tracker))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.dump(), sort_keys=False))  # once nothing was refused
    with tracker.ending() if tracker is not None else contextlib.nullcontext():
        if trainer.resumed_from_epoch:
            print(f"resuming {run_dir} after epoch {trainer.resumed_from_epoch}", flush=True)
        state = trainer.fit()
        test = trainer.test()
        (run_dir / "test_recall.json").write_text(json.dumps(test.to_dict(), indent=2))
        (run_dir / "test_recall.md").write_text(test.to_markdown())
        if tracker is not None:
            tracker.log_recall_table(test, "test", epoch=state.epoch)
            seconds = time.perf_counter() - started
            tracker.log_final_metrics({"best_epoch": state.best_epoch, "best_val_rsum": state.best_rsum,
                                       "train_seconds": seconds, **device_hours(trainer.device, world_size, seconds)})
    return RunResult(run_dir, test, state.best_epoch, state.best_rsum, run_id,
                     tracker.ui_hint() if tracker is not None else None, time.perf_counter() - started)
