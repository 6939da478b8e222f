"""One training run from a validated config: data, method, trainer, MLflow, results on disk.

``run_experiment`` is what ``jobs/train.py`` (and, later, every sweep trial) calls. Layout of a run
directory::

    runs/<experiment>/<run>/
        config.yaml        the resolved config
        vocab.json         vocabulary of the training captions
        last.pt, best.pt   checkpoints (see itrlab.train.checkpoint)
        mlflow_run.json    the MLflow run this directory logs to (reused on resume)
        test_recall.json   the final test table (also .md)
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import yaml

from itrlab.config import ExperimentConfig
from itrlab.config.checks import check_data, synthetic_spec_of
from itrlab.data import Vocabulary, generate_synthetic, open_precomp
from itrlab.eval import RecallTable
from itrlab.methods import build_method
from itrlab.tracking import MlflowTracker
from itrlab.train.checkpoint import seed_everything
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


def prepare_data(config: ExperimentConfig, run_dir: Path) -> TrainingData:
    """Open the three splits (generating synthetic data first if needed) and the vocabulary.

    The vocabulary comes from the training captions only and is stored in the run directory, so a
    resumed run encodes captions exactly as before.
    """
    dataset = config.dataset
    if dataset.kind == "synthetic":
        generate_synthetic(dataset.root, synthetic_spec_of(config))
    splits = {role: open_precomp(dataset.root, getattr(dataset.splits, role), dataset.captions_per_image)
              for role in ("train", "val", "test")}
    vocab_path = run_dir / VOCAB_FILE
    if vocab_path.is_file():
        vocab = Vocabulary.load(vocab_path)
    else:
        vocab = Vocabulary.build(splits["train"].captions, min_count=config.model.text.vocab_min_count)
        vocab.save(vocab_path)
    return TrainingData(vocab=vocab, **splits)


class ConsoleProgress:
    """Prints one line per epoch."""

    def __init__(self, stream: TextIO = sys.stdout):
        self.stream = stream

    def on_epoch_end(self, report: EpochReport) -> None:
        val = report.val
        marker = " *best*" if report.is_best else ""
        print(f"epoch {report.epoch:>3}/{report.epochs}  loss {report.loss:9.4f}  lr {report.lr:.2e}  "
              f"val rsum {val.rsum:6.1f} (i2t R@1 {val.i2t_r1:5.1f}, t2i R@1 {val.t2i_r1:5.1f})  "
              f"{report.seconds:5.1f}s{marker}", file=self.stream, flush=True)


class MlflowEpochLogger:
    def __init__(self, tracker: MlflowTracker):
        self.tracker = tracker

    def on_epoch_end(self, report: EpochReport) -> None:
        self.tracker.log_metrics(report.metrics(), step=report.epoch)


def run_tags(config: ExperimentConfig) -> dict[str, str]:
    return {"method": config.method.name, "loss": config.loss.name, "dataset": config.dataset.name,
            "protocol": config.eval.test_protocol, "seed": str(config.seed)}


def run_experiment(config: ExperimentConfig, run_dir: Path, *, callbacks: list[EpochCallback] | None = None,
                   tracker: MlflowTracker | None = None, parent_run_id: str | None = None) -> RunResult:
    """Train (or continue training in ``run_dir``), then evaluate the best checkpoint on test once."""
    check_data(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    data = prepare_data(config, run_dir)

    seed_everything(config.seed)
    method = build_method(config, vocab_size=len(data.vocab), feature_dim=data.train.feature_dim)
    callbacks = list(callbacks or [])
    run_id = None
    if tracker is not None:
        previous = run_dir / MLFLOW_FILE
        reuse = json.loads(previous.read_text())["run_id"] if previous.is_file() else None
        run_id = tracker.start(run_name=f"{config.name}-{run_dir.name}", tags={**run_tags(config), "run_dir": str(run_dir)},
                               params=config.flat(), run_id=reuse, parent_run_id=parent_run_id)
        previous.write_text(json.dumps({"run_id": run_id, "tracking_uri": tracker.tracking_uri}))
        callbacks.append(MlflowEpochLogger(tracker))
    try:
        trainer = Trainer(config, method, data, run_dir, callbacks)
        if trainer.resumed_from_epoch:
            print(f"resuming {run_dir} after epoch {trainer.resumed_from_epoch}", flush=True)
        started = time.perf_counter()
        state = trainer.fit()
        test = trainer.test()
        (run_dir / "test_recall.json").write_text(json.dumps(test.to_dict(), indent=2))
        (run_dir / "test_recall.md").write_text(test.to_markdown())
        if tracker is not None:
            tracker.log_recall_table(test, "test", step=state.epoch)
            tracker.log_metrics({"best_epoch": state.best_epoch, "best_val_rsum": state.best_rsum,
                                 "train_seconds": time.perf_counter() - started}, step=state.epoch)
            tracker.end("FINISHED")
    except KeyboardInterrupt:
        if tracker is not None:
            tracker.end("KILLED")
        raise
    except BaseException:
        if tracker is not None:
            tracker.end("FAILED")
        raise
    return RunResult(run_dir, test, state.best_epoch, state.best_rsum, run_id,
                     tracker.ui_hint() if tracker is not None else None)
