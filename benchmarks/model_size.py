"""The size of each paper profile's trained model as a run logs it (docs/models.md#model-sizes gives it): a Markdown
table. Nothing is timed, and nothing is trained.

    python benchmarks/model_size.py                         # VSE++ and each paper's main table
    python benchmarks/model_size.py --preset dbl_table2     # one preset

What a run logs as its model is its state dict (``weights.pt``: the plain method's, a cooperative scheme's target
branch; itrlab.trained.bundle) beside a few kB of JSON and YAML. Here the model of each distinct method of a
preset's profile is built from the profile's first trial config of that method, as a trained model is rebuilt
(:func:`itrlab.trained.model.plain_config`), and its state dict's bytes are counted; nothing is trained. The data
shape comes from the data's files, else from the paper's data description (``configs/paper/data/``). A BiGRU's
word embeddings grow with the vocabulary of the training captions: counted from those captions when they are
here, else given per word (the difference of two builds one word apart).
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from itrlab.config import ExperimentConfig
from itrlab.config.loader import config_dir, read_yaml
from itrlab.config.sweep import load_sweep, resolve_sweep_path
from itrlab.data.kinds import kind_of
from itrlab.data.precomp import captions_path, read_captions
from itrlab.data.tokenizers import PretrainedTokenizer, Vocabulary
from itrlab.errors import ItrlabError, report
from itrlab.methods import METHODS
from itrlab.methods.context import BuildContext
from itrlab.report.chance import config_data_shape
from itrlab.sweep.dry_run import trial_configs
from itrlab.trained.model import plain_config

# the sweeps whose profiles are measured by default: VSE++ (ConVSE's Table III), then each paper's main table
PRESETS = ["convse_table3", "convse_table2", "dbl_table2", "coder_table2", "ascl_table2"]
STORED_WIDTH = 384  # stored text features' width when their folder is absent: the packaged MiniLM's


@dataclass(frozen=True)
class ModelSize:
    preset: str
    profile: str
    method: str
    layout: str  # regions x feature width
    text: str  # the text encoder, and where the vocabulary comes from
    parameters: int
    bytes: int
    per_word: int | None  # bytes per vocabulary word, when the vocabulary is not counted


def state_bytes(module: torch.nn.Module) -> tuple[int, int]:
    """The parameters and the bytes of ``module``'s state dict (buffers included, shared tensors once)."""
    state = module.state_dict()
    unique = {tensor.data_ptr(): tensor for tensor in state.values()}.values()
    return (sum(p.numel() for p in module.parameters()), sum(t.numel() * t.element_size() for t in unique))


def shape_of(config: ExperimentConfig) -> tuple[int, int, int]:
    """Regions, feature width and training captions of ``config``'s data (its files, else the paper's)."""
    shape = config_data_shape(config)
    if shape is not None:
        return shape.regions, shape.feature_dim, shape.train_images * shape.captions_per_image
    paper = read_yaml(config_dir() / "paper" / "data" / f"{config.dataset.name}.yaml", "data shape")
    return (
        int(paper["regions"]),
        int(paper["feature_dim"]),
        int(paper["train_images"]) * int(paper["captions_per_image"]),
    )


def build(config: ExperimentConfig, feature_dim: int, train_size: int, tokenizer, vocab_size: int) -> torch.nn.Module:
    context = BuildContext(
        feature_dim=feature_dim,
        vocab_size=vocab_size,
        vocab=tokenizer,
        train_size=train_size,
        vocab_words=getattr(tokenizer, "words", None),
    )
    return METHODS[config.method.name].from_config(config, context)


def model_size(preset: str, profile: str, config: ExperimentConfig) -> ModelSize:
    """The logged size of ``config``'s model (see the module doc)."""
    plain = plain_config(config)
    regions, dim, train_size = shape_of(plain)
    text, root = plain.model.text, Path(plain.dataset.root)
    per_word, label = None, text.encoder
    if text.encoder == "bigru":
        train = captions_path(root, plain.dataset.splits.train)
        if train.is_file():
            captions = read_captions(root, plain.dataset.splits.train)
            tokenizer = Vocabulary.build(captions, min_count=text.vocab_min_count)
            label = f"bigru, {len(tokenizer):,} words"
        else:
            tokenizer = Vocabulary.build(["a"])
            one, two = (
                state_bytes(build(plain, dim, train_size, None, size))[1]
                for size in (len(tokenizer), len(tokenizer) + 1)
            )
            per_word, label = two - one, "bigru, vocabulary not here"
        size = len(tokenizer)
    elif text.encoder == "bert":
        tokenizer = PretrainedTokenizer(text.bert_path)
        size = len(tokenizer)
        label = f"bert ({Path(str(getattr(tokenizer, 'path', 'packaged'))).name})"
    else:
        tokenizer, size = None, STORED_WIDTH
        label = "stored text features"
    parameters, total = state_bytes(build(plain, dim, train_size, tokenizer, size))
    return ModelSize(preset, profile, plain.method.name, f"{regions} x {dim}", label, parameters, total, per_word)


def with_data(config: ExperimentConfig, scratch: Path) -> ExperimentConfig:
    """``config``, the data its kind generates (the synthetic data) generated under ``scratch`` when its folder
    holds none (the data folder a training would write is left alone)."""
    kind = kind_of(config.dataset)
    if not kind.generates or kind.on_disk():
        return config
    root = scratch / f"{config.dataset.name}-{len(list(scratch.iterdir()))}"
    moved = config.model_copy(update={"dataset": config.dataset.model_copy(update={"root": root})})
    kind_of(moved.dataset).prepare()
    return moved


def preset_sizes(preset: str) -> list[ModelSize]:
    """Each profile's distinct methods of ``preset``, in the order of its trials."""
    found = []
    with tempfile.TemporaryDirectory(prefix="itrlab_sizes_") as scratch:
        for profile in read_yaml(resolve_sweep_path(preset), "sweep").get("profiles") or ["default"]:
            spec = load_sweep(preset, None if profile == "default" else profile)
            seen = set()
            for config in trial_configs(spec, [])[1]:
                name = plain_config(config).method.name
                if name not in seen:
                    seen.add(name)
                    found.append(model_size(preset, profile, with_data(config, Path(scratch))))
    return found


def table(sizes: list[ModelSize]) -> str:
    """A Markdown table of ``sizes`` (docs/models.md)."""
    lines = [
        "| preset | profile | method | image features | text | parameters | weights.pt |",
        "|---|---|---|---|---|---:|---:|",
    ]
    for s in sizes:
        weights = f"{s.bytes / 2**20:.1f} MiB" + (f" + {s.per_word} B per word" if s.per_word else "")
        lines.append(
            f"| {s.preset} | {s.profile} | {s.method} | {s.layout} | {s.text} | {s.parameters / 1e6:.2f} M "
            f"| {weights} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", help=f"a preset (repeatable; default: {', '.join(PRESETS)})")
    args = parser.parse_args(argv)
    try:
        sizes = [size for preset in args.preset or PRESETS for size in preset_sizes(preset)]
    except ItrlabError as err:
        return report(err)
    print(table(sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
