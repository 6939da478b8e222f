"""Text features computed once: the packaged MiniLM's token states of every caption of a precomp folder.

``jobs/extract_features.py --text`` (or ``--text-only`` on any precomp folder) passes every caption of every split
through the text model once (at most ``max_len`` tokens with [CLS]/[SEP]) and stores each token's last hidden
state in float16 with the caption's length; ``sentence`` stores the model's sentence vector (the unit mean of the
token states) instead or as well. The layout is :mod:`itrlab.data.text_features`'s; ``text.json`` is written
last. As for images the folder is a cache of its inputs (the model's files, the settings, each split's caption
digest): unchanged captions compute nothing, changed ones are extracted again, another kind or max length is
refused without ``--overwrite``; shards of ``chunk_size`` captions in ``{out}/.work/`` keep Ctrl-C to one lost chunk.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.data.precomp import captions_path, read_captions
from itrlab.data.text_features import (
    DEFAULT_FOLDER,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    TextFeatures,
    array_digests,
    captions_digest,
    lengths_path,
    sentence_path,
    tokens_path,
)
from itrlab.errors import DataError, UserInputError
from itrlab.extract.plan import extraction_lock
from itrlab.extract.steps import Step, register_step
from itrlab.files import atomic_write_text, read_json

TEXT_KINDS = {"tokens": ("tokens",), "sentence": ("sentence",), "both": ("tokens", "sentence")}
WORK_DIR = ".work"
DTYPE = "float16"


@dataclass(frozen=True)
class TextOptions:
    """What ``--text`` asks for."""

    precomp: Path  # the precomp folder whose captions are encoded
    out: Path | None = None  # default: <precomp>/text
    kind: str = "tokens"  # tokens, sentence or both
    model_dir: Path | None = None  # None: the packaged all-MiniLM-L6-v2
    max_len: int = 64
    batch_size: int = 128
    chunk_size: int = 4096
    threads: int | None = None
    device: str = "cpu"
    overwrite: bool = False
    progress: bool = True

    @property
    def folder(self) -> Path:
        return Path(self.out) if self.out is not None else Path(self.precomp) / DEFAULT_FOLDER

    def check(self) -> None:
        if self.kind not in TEXT_KINDS:
            raise UserInputError(f"--text: got {self.kind!r}; allowed: {', '.join(TEXT_KINDS)}")
        for flag, value, low in (
            ("--text-max-len", self.max_len, 2),
            ("--text-batch-size", self.batch_size, 1),
            ("--text-chunk-size", self.chunk_size, 1),
        ):
            if value < low:
                raise UserInputError(f"{flag}: got {value}; must be >= {low}")


@dataclass
class TextPlan:
    """The splits and their captions, the settings, and which chunks are still to compute."""

    options: TextOptions
    captions: dict[str, list[str]]
    settings: dict[str, Any]
    fingerprint: str
    model_dir: Path | None = None  # where the model was found (recorded, not part of the fingerprint)
    pending: list[tuple[str, int]] = field(default_factory=list)  # (split, chunk index)

    @property
    def work_dir(self) -> Path:
        return self.options.folder / WORK_DIR

    def chunk_range(self, split: str, index: int) -> tuple[int, int]:
        size = self.options.chunk_size
        return index * size, min((index + 1) * size, len(self.captions[split]))

    def chunks(self, split: str) -> range:
        return range(-(-len(self.captions[split]) // self.options.chunk_size))

    def shard(self, split: str, index: int) -> Path:
        return self.work_dir / f"{split}-{index:05d}.npz"


def precomp_splits(folder: Path) -> list[str]:
    """The splits of a precomp folder: every ``{split}_caps.txt`` beside a ``{split}_ims.npy``."""
    names = sorted(p.name[: -len("_caps.txt")] for p in Path(folder).glob("*_caps.txt"))
    return [name for name in names if (Path(folder) / f"{name}_ims.npy").is_file()]


def plan_text(options: TextOptions, log: Callable[[str], None]) -> TextPlan | dict[str, Any]:
    """The plan, or the finished manifest when the folder already holds these features."""
    from itrlab.data.tokenizers import model_identity, require_model_dir

    options.check()
    precomp = Path(options.precomp)
    splits = precomp_splits(precomp)
    if not splits:
        raise DataError(
            precomp,
            "no precomp split here ({split}_ims.npy with {split}_caps.txt): extract the images "
            "first, or point --out at a precomp folder",
        )
    captions = {split: read_captions(precomp, split) for split in splits}
    model_dir = require_model_dir(options.model_dir)
    settings = {
        "model": model_identity(model_dir),
        "max_len": options.max_len,
        "kinds": list(TEXT_KINDS[options.kind]),
        "dtype": DTYPE,
        "splits": {
            split: {"captions": len(caps), "captions_sha256": captions_digest(caps)} for split, caps in captions.items()
        },
    }
    fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    manifest_file = options.folder / MANIFEST
    if manifest_file.is_file():
        old = read_json(manifest_file, "text-feature manifest")
        if isinstance(old, dict) and old.get("fingerprint") == fingerprint and _binds_its_arrays(old):
            return old
        if isinstance(old, dict) and not options.overwrite:
            chosen = [
                f"{key} {old.get('settings', {}).get(key)} -> {settings[key]}"
                for key in ("max_len", "kinds")
                if old.get("settings", {}).get(key) != settings[key]
            ]
            if chosen:
                raise UserInputError(
                    f"{options.folder} holds text features with other settings ({'; '.join(chosen)}); "
                    f"pass --overwrite to replace them"
                )
        changed = [
            name
            for name in ("model", "splits")
            if isinstance(old, dict) and old.get("settings", {}).get(name) != settings[name]
        ]
        log(
            f"text features in {options.folder} are out of date ({' and '.join(changed) or 'format'} changed): "
            f"extracting them again"
        )
    return TextPlan(options, captions, settings, fingerprint, model_dir=model_dir)


def _binds_its_arrays(manifest: dict[str, Any]) -> bool:
    """Whether a manifest records the digest of every split's arrays (one written before it did is extracted
    again: its arrays cannot be checked against the extraction)."""
    splits = manifest.get("splits")
    return isinstance(splits, dict) and all(
        isinstance(entry, dict) and isinstance(entry.get("arrays_sha256"), dict) for entry in splits.values()
    )


def _prepare_work(plan: TextPlan) -> None:
    """Keep the shards of an interrupted run of the same settings; clear any other."""
    work = plan.work_dir
    stamp = work / "settings.json"
    if work.is_dir():
        kept = read_json(stamp, "shard settings") if stamp.is_file() else None
        if not isinstance(kept, dict) or kept.get("fingerprint") != plan.fingerprint:
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    if not stamp.is_file():
        atomic_write_text(stamp, json.dumps({"fingerprint": plan.fingerprint}) + "\n")
    plan.pending = [
        (split, index)
        for split in plan.captions
        for index in plan.chunks(split)
        if not plan.shard(split, index).is_file()
    ]


class CaptionEncoder:
    """The pretrained text model and its tokenizer, loaded once, in eval mode."""

    def __init__(self, model_dir: Path | None, device: str, max_len: int):
        import torch

        from itrlab.data.tokenizers import PretrainedTokenizer
        from itrlab.models.bert_text import load_pretrained_model

        self.tokenizer = PretrainedTokenizer(model_dir)
        self.device = torch.device(
            "cuda" if device == "auto" and torch.cuda.is_available() else "cpu" if device == "auto" else device
        )
        self.model = load_pretrained_model(self.tokenizer.path).to(self.device).eval()
        self.max_len = max_len
        self.pad_id = self.tokenizer.hf_pad_id

    def encode(
        self, captions: list[str], batch_size: int, on_batch=lambda n: None
    ) -> tuple[list[np.ndarray], np.ndarray]:
        """Each caption's token states (L_j, H) float16 and its unit sentence vector (H,), in the given order."""
        import torch

        from itrlab.data.tokenizers import swap_pad_id

        ids = [self.tokenizer.encode(caption, max_len=self.max_len) for caption in captions]
        order = sorted(range(len(ids)), key=lambda j: len(ids[j]))  # batches of similar lengths: little padding
        states: list[np.ndarray | None] = [None] * len(ids)
        sentences = np.zeros((len(ids), self.model.config.hidden_size), dtype=np.float16)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                width = max(len(ids[j]) for j in rows)
                batch = torch.zeros((len(rows), width), dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, j in enumerate(rows):
                    batch[r, : len(ids[j])] = torch.tensor(ids[j])
                    mask[r, : len(ids[j])] = 1
                batch = swap_pad_id(batch, self.pad_id).to(self.device)
                hidden = self.model(input_ids=batch, attention_mask=mask.to(self.device)).last_hidden_state.float()
                weights = mask.to(self.device, hidden.dtype).unsqueeze(-1)
                mean = (hidden * weights).sum(1) / weights.sum(1)
                sentence = torch.nn.functional.normalize(mean, dim=-1).cpu().numpy().astype(np.float16)
                hidden = hidden.cpu().numpy().astype(np.float16)
                for r, j in enumerate(rows):
                    states[j] = hidden[r, : len(ids[j])]
                    sentences[j] = sentence[r]
                on_batch(len(rows))
        return states, sentences  # type: ignore[return-value]


def _compute(plan: TextPlan, log: Callable[[str], None]) -> dict[str, float]:
    """Encode the pending chunks (one shard each); the seconds spent."""
    from tqdm import tqdm

    from itrlab.extract.image_encoder import torch_threads

    options = plan.options
    stats = {"model_load_s": 0.0, "encode_s": 0.0, "captions_this_run": 0}
    if not plan.pending:
        return stats
    with torch_threads(options.threads) as threads:
        start = time.perf_counter()
        encoder = CaptionEncoder(options.model_dir, options.device, options.max_len)
        stats["model_load_s"] = time.perf_counter() - start
        stats["threads"] = threads
        total = sum(high - low for low, high in (plan.chunk_range(s, i) for s, i in plan.pending))
        log(
            f"encoding {total} captions with {plan.settings['model']['name']} ({threads} thread(s), {encoder.device}) "
            f"-> {options.folder}"
        )
        start = time.perf_counter()
        with tqdm(
            total=total, unit="cap", desc="text", disable=not options.progress, file=sys.stderr, dynamic_ncols=True
        ) as bar:
            for split, index in plan.pending:
                low, high = plan.chunk_range(split, index)
                states, sentences = encoder.encode(plan.captions[split][low:high], options.batch_size, bar.update)
                lengths = np.array([len(s) for s in states], dtype=np.int32)
                tmp = plan.shard(split, index).with_suffix(".tmp.npz")
                np.savez(tmp, tokens=np.concatenate(states), lengths=lengths, sentence=sentences)
                os.replace(tmp, plan.shard(split, index))
                stats["captions_this_run"] += high - low
        stats["encode_s"] = time.perf_counter() - start
    return stats


def _write_array(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
    os.replace(tmp, path)


def _assemble(plan: TextPlan, stats: dict[str, float], started: float) -> dict[str, Any]:
    """Concatenate each split's shards into its final files and write ``text.json`` last."""
    folder, kinds = plan.options.folder, plan.settings["kinds"]
    (folder / MANIFEST).unlink(missing_ok=True)  # the folder is unfinished until the new manifest is written
    splits: dict[str, dict[str, Any]] = {}
    hidden = 0
    for split in plan.captions:
        parts = []
        for index in plan.chunks(split):
            with np.load(plan.shard(split, index), allow_pickle=False) as shard:
                parts.append({key: shard[key] for key in ("tokens", "lengths", "sentence")})
        lengths = np.concatenate([p["lengths"] for p in parts])
        if len(lengths) != len(plan.captions[split]):
            raise DataError(
                plan.work_dir,
                f"split {split!r}: the shards hold {len(lengths)} captions, "
                f"{captions_path(plan.options.precomp, split).name} {len(plan.captions[split])}",
            )
        hidden = int(parts[0]["sentence"].shape[1])
        if "tokens" in kinds:
            _write_array(tokens_path(folder, split), np.concatenate([p["tokens"] for p in parts]))
            _write_array(lengths_path(folder, split), lengths)
        if "sentence" in kinds:
            _write_array(sentence_path(folder, split), np.concatenate([p["sentence"] for p in parts]))
        splits[split] = {
            **plan.settings["splits"][split],
            "tokens": int(lengths.sum()),
            "max_tokens": int(lengths.max()),
            "mean_tokens": round(float(lengths.mean()), 2),
            "arrays_sha256": {role: sha for kind in kinds for role, sha in array_digests(folder, split, kind).items()},
        }
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {**plan.settings["model"], "dir": str(plan.model_dir)},
        "hidden_size": hidden,
        "max_len": plan.settings["max_len"],
        "dtype": DTYPE,
        "kinds": kinds,
        "source": str(Path(plan.options.precomp).resolve()),
        "splits": splits,
        "run": {key: round(value, 2) if isinstance(value, float) else value for key, value in stats.items()}
        | {"wall_s": round(time.perf_counter() - started, 2)},
        "settings": plan.settings,
        "fingerprint": plan.fingerprint,
    }
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    shutil.rmtree(plan.work_dir, ignore_errors=True)
    features = TextFeatures(folder)  # the written folder must open and check like any other
    for split, captions in plan.captions.items():
        for kind in kinds:
            features.check_split(split, captions, kind)
    return manifest


def extract_text(options: TextOptions, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Write (or find up to date) the text features of ``options.precomp``; returns the manifest (with
    ``"up_to_date": True`` when nothing was computed)."""
    started = time.perf_counter()
    planned = plan_text(options, log)
    if isinstance(planned, dict):
        log(f"{options.folder} already holds these text features; nothing to extract")
        return {**planned, "up_to_date": True}
    with extraction_lock(options.folder):
        _prepare_work(planned)
        return _assemble(planned, _compute(planned, log), started)


def summary_lines(manifest: dict[str, Any]) -> list[str]:
    """The text extraction's closing report."""
    run = manifest["run"]
    lines = [
        "text features: "
        + ", ".join(
            f"{s} {c['captions']} captions ({c['tokens']:,} tokens, at most {c['max_tokens']})"
            for s, c in manifest["splits"].items()
        )
        + f"; {'+'.join(manifest['kinds'])}, {manifest['hidden_size']}-d {manifest['dtype']}, "
        f"{manifest['model']['name']}"
    ]
    if manifest.get("up_to_date"):
        lines.append("nothing to extract: the text features were already complete; when they were written:")
    rate = run["captions_this_run"] / run["encode_s"] if run.get("encode_s") else 0.0
    lines.append(
        f"{run['captions_this_run']} captions encoded in {run.get('encode_s', 0):.1f} s: {rate:.0f} captions/s "
        f"({run.get('threads', '?')} thread(s); model load {run.get('model_load_s', 0):.1f} s; "
        f"wall {run['wall_s']:.1f} s)"
    )
    return lines


@register_step("text")
class TextStep(Step):
    """``--text`` after the images, or ``--text-only`` on any precomp folder
    (docs/data.md#text-features-computed-once)."""

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        text = parser.add_argument_group(
            "text features (model.text.encoder=precomp, docs/data.md#text-features-computed-once)"
        )
        text.add_argument(
            "--text",
            nargs="?",
            const="tokens",
            default=None,
            choices=list(TEXT_KINDS),
            help="also encode every caption once with the packaged MiniLM into OUT/text/: its token "
            "states (tokens, the default), its sentence vectors (sentence) or both",
        )
        text.add_argument(
            "--text-only",
            action="store_true",
            help="only the text features, of the precomp folder --out (any precomp folder, SCAN's too)",
        )
        text.add_argument(
            "--text-model",
            type=Path,
            default=None,
            help="a local Hugging Face model folder (default: the packaged all-MiniLM-L6-v2)",
        )
        text.add_argument(
            "--text-max-len",
            type=int,
            default=64,
            help="tokens per caption, [CLS] and [SEP] included (default: %(default)s)",
        )
        text.add_argument(
            "--text-batch-size", type=int, default=128, help="captions per forward pass (default: %(default)s)"
        )

    @classmethod
    def only(cls, args: argparse.Namespace) -> str | None:
        return "--text-only encodes the captions of the precomp folder --out" if args.text_only else None

    @classmethod
    def options(cls, args: argparse.Namespace, out: Callable[[], Path]) -> TextOptions | None:
        if args.text_only:
            if args.out is None:
                raise UserInputError("--text-only needs --out: the precomp folder whose captions to encode")
        elif args.text is None:
            return None
        options = TextOptions(
            precomp=out(),
            kind=args.text or "tokens",
            model_dir=args.text_model,
            max_len=args.text_max_len,
            batch_size=args.text_batch_size,
            threads=args.threads,
            device=args.device,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
        options.check()
        return options

    @classmethod
    def run(cls, options: TextOptions, log: Callable[[str], None]) -> list[str]:
        return summary_lines(extract_text(options, log=log))

    @classmethod
    def work_dir(cls, options: TextOptions) -> Path:
        return options.folder / WORK_DIR

    @classmethod
    def written(cls, options: TextOptions) -> str:
        return f"{options.folder} ({MANIFEST})"


__all__ = ["TEXT_KINDS", "TextOptions", "TextStep", "extract_text", "precomp_splits", "summary_lines"]
