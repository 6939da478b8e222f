"""Text features computed once: a pretrained text model's states of every caption, stored beside the images.

A frozen text model computes the same states for a caption at every step, so a run that keeps it frozen
can read them instead (``model.text.encoder: precomp``): its text tower becomes a projection and a pooling
over stored features, as the image tower already is. ``jobs/extract_features.py --text`` writes them
(:mod:`itrlab.extract.text`); this module reads and checks them. A folder of text features::

    <folder>/text.json             written last: model, settings, and per split the digest of its captions
    <folder>/{split}_tokens.npy    (T, H) float16: the last hidden state of every token ([CLS] ... [SEP]) of
                                   every caption, caption after caption (T tokens in all)
    <folder>/{split}_lengths.npy   (C,) int32: the tokens of each caption (caption j: its rows from the sum of
                                   the lengths before it)
    <folder>/{split}_sentence.npy  (C, H) float16, optional: each caption's sentence vector (the model's own
                                   pooling: the unit mean of its token states)

Which captions: ``{split}_caps.txt`` of the precomp folder, in its order. ``text.json`` keeps the sha256
of each split's caption lines, so text features of another data set, or of the same captions in another
order, are refused before training (:meth:`TextFeatures.open_split`).

Where: ``dataset.text_features`` names the folder; by default ``<dataset.root>/text``, or, for a pooled
layout derived from a grid (``<grid>/pool3x3/``, which holds ``layout.json``), the grid's ``<grid>/text``:
the layouts copy the grid's captions, and the digest check holds either way.

:class:`TextFeatures` is also the run's text tokenizer (``vocab.json`` names the folder): its captions
arrive as states, not ids, so it encodes no text, and its ``len`` is the states' width, the size of the
text encoder's input.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.data.kinds.registry import StoredFeatures, register_stored
from itrlab.errors import DataError
from itrlab.files import atomic_write_text, read_json

MANIFEST = "text.json"
FORMAT = "itrlab-text-features"
FORMAT_VERSION = 1
TOKENIZER_FORMAT = "itrlab-stored-text"
KINDS = ("tokens", "sentence")  # what a folder may hold: token states, sentence vectors
DEFAULT_FOLDER = "text"
LAYOUT_MANIFEST = "layout.json"  # itrlab.extract.layouts: a pooled layout derived from a grid


def tokens_path(folder: Path, split: str) -> Path:
    return Path(folder) / f"{split}_tokens.npy"


def lengths_path(folder: Path, split: str) -> Path:
    return Path(folder) / f"{split}_lengths.npy"


def sentence_path(folder: Path, split: str) -> Path:
    return Path(folder) / f"{split}_sentence.npy"


def captions_digest(captions: Sequence[str]) -> str:
    """sha256 of a split's caption lines in order: what ties text features to their captions."""
    digest = hashlib.sha256()
    for caption in captions:
        digest.update(caption.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def resolve_folder(root: str | Path, configured: str | Path | None = None) -> Path:
    """The text-feature folder of a data set: ``configured``, else ``<root>/text``, else (a derived layout)
    ``<root>/../text`` where that exists and ``<root>/text`` does not."""
    if configured is not None:
        return Path(configured)
    root = Path(root)
    own = root / DEFAULT_FOLDER
    grid = root.parent / DEFAULT_FOLDER
    if not own.exists() and (root / LAYOUT_MANIFEST).is_file() and grid.exists():
        return grid
    return own


@dataclass
class SplitText:
    """The stored states of one split's captions: caption ``j`` as a (L_j, H) float32 tensor.

    Memory-mapped (never read whole); pickles as its paths, so loader workers re-open the maps."""

    folder: Path
    split: str
    max_len: int | None = None  # keep at most this many tokens of each caption (the first ones)

    def __post_init__(self) -> None:
        self._open()

    def _open(self) -> None:
        self.lengths = np.load(lengths_path(self.folder, self.split), allow_pickle=False).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.states = np.load(tokens_path(self.folder, self.split), mmap_mode="r", allow_pickle=False)

    def __getstate__(self) -> dict:
        return {"folder": self.folder, "split": self.split, "max_len": self.max_len}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def width(self) -> int:
        return int(self.states.shape[1])

    def kept(self, index: int) -> int:
        length = int(self.lengths[index])
        return length if self.max_len is None else min(length, self.max_len)

    def __getitem__(self, index: int):
        import torch

        start = int(self.offsets[index])
        return torch.from_numpy(np.array(self.states[start : start + self.kept(index)], dtype=np.float32))

    def padded(self):
        """Every caption's states as one (C, L_max, H) float16 tensor padded with zeros, and the lengths (C,):
        for device-resident batches (the encoder reads them in its own dtype)."""
        import torch

        kept = np.minimum(self.lengths, self.max_len) if self.max_len is not None else self.lengths
        width = int(kept.max(initial=1))
        out = torch.zeros((len(self), width, self.width), dtype=torch.float16)
        for index in range(len(self)):
            start = int(self.offsets[index])
            out[index, : kept[index]] = torch.from_numpy(np.array(self.states[start : start + kept[index]]))
        return out, torch.from_numpy(kept.astype(np.int64))


class TextFeatures:
    """A folder of stored text features (see the module docstring), checked on open."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser().resolve()
        manifest_file = self.folder / MANIFEST
        if not self.folder.is_dir():
            raise DataError(
                self.folder,
                "no text features here (write them with jobs/extract_features.py --text, "
                "or set dataset.text_features to their folder)",
            )
        if not manifest_file.is_file():
            raise DataError(
                manifest_file,
                "missing: the text features in this folder are unfinished or absent "
                "(re-run jobs/extract_features.py --text; it resumes)",
            )
        manifest = read_json(manifest_file, "text-feature manifest")
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise DataError(manifest_file, f"not an itrlab text-feature manifest (format {FORMAT!r} expected)")
        if manifest.get("version") != FORMAT_VERSION:
            raise DataError(
                manifest_file,
                f"format version {manifest.get('version')!r}; this itrlab reads {FORMAT_VERSION}: extract them again",
            )
        self.manifest = manifest
        self.width = int(manifest["hidden_size"])
        self.kinds = tuple(manifest.get("kinds", ()))
        self.splits: dict[str, dict[str, Any]] = dict(manifest.get("splits", {}))

    @property
    def model(self) -> dict[str, Any]:
        return dict(self.manifest.get("model", {}))

    @property
    def fingerprint(self) -> str:
        """What the features were computed from: the extraction's digest of its model, settings and every
        split's captions (the same inputs extracted again give the same fingerprint); a manifest without one,
        a digest of the whole manifest."""
        recorded = self.manifest.get("fingerprint")
        if isinstance(recorded, str) and recorded:
            return recorded
        return hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode()).hexdigest()[:16]

    def __len__(self) -> int:
        return self.width

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextFeatures) and (self.folder, self.fingerprint) == (other.folder, other.fingerprint)

    def __repr__(self) -> str:
        return f"TextFeatures({self.folder}, {self.width}-d, {'+'.join(self.kinds)})"

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        raise TypeError(
            "stored text features encode no new text: their captions arrive as states (model.text.encoder=precomp)"
        )

    def holds(self, split: str, captions: Sequence[str]) -> bool:
        """Whether ``split``'s stored states are those of ``captions`` (their count and digest)."""
        entry = self.splits.get(split) or {}
        return entry.get("captions") == len(captions) and entry.get("captions_sha256") == captions_digest(captions)

    def check_split(self, split: str, captions: Sequence[str], kind: str = "tokens") -> None:
        """DataError naming the file unless ``split``'s stored ``kind`` is there, whole, and of these captions."""
        manifest_file = self.folder / MANIFEST
        if kind not in self.kinds:
            held = " and ".join(self.kinds) or "nothing"
            raise DataError(
                manifest_file,
                f"holds {held}, not {kind} states: extract them again with "
                f"--text {'both' if kind == 'tokens' else kind}",
            )
        entry = self.splits.get(split)
        if entry is None:
            raise DataError(manifest_file, f"has no split {split!r} (it holds {', '.join(sorted(self.splits))})")
        if not self.holds(split, captions):
            raise DataError(
                manifest_file,
                f"split {split!r}: these text features belong to other captions "
                f"({entry.get('captions')} captions, digest {str(entry.get('captions_sha256'))[:12]}; "
                f"the data set's {split}_caps.txt has {len(captions)}, digest "
                f"{captions_digest(captions)[:12]}): another data set or another caption "
                f"order; extract them again for this data set",
            )
        expected = {
            "tokens": [(tokens_path, (int(entry.get("tokens", -1)), self.width)), (lengths_path, (len(captions),))],
            "sentence": [(sentence_path, (len(captions), self.width))],
        }[kind]
        for path_of, shape in expected:
            _check_array(path_of(self.folder, split), shape)
        if kind == "tokens":
            lengths = np.load(lengths_path(self.folder, split), allow_pickle=False)
            if int(lengths.sum()) != int(entry.get("tokens", -1)) or (lengths < 1).any():
                raise DataError(
                    lengths_path(self.folder, split),
                    f"the lengths add up to {int(lengths.sum()):,} tokens, the manifest says {entry.get('tokens')}",
                )

    def open_split(self, split: str, captions: Sequence[str], max_len: int | None = None) -> SplitText:
        """The token states of ``split``, checked against its ``captions`` (see :meth:`check_split`)."""
        self.check_split(split, captions, "tokens")
        return SplitText(self.folder, split, max_len)

    def save(self, path: str | Path) -> None:
        """Write the run's ``vocab.json``: which folder, and its fingerprint (a resume on others is refused)."""
        payload = {
            "format": TOKENIZER_FORMAT,
            "version": FORMAT_VERSION,
            "folder": str(self.folder),
            "fingerprint": self.fingerprint,
            "width": self.width,
        }
        atomic_write_text(path, json.dumps(payload, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TextFeatures:
        payload = read_json(path, "tokenizer file")
        if not isinstance(payload, dict) or payload.get("format") != TOKENIZER_FORMAT:
            raise DataError(path, "not an itrlab stored-text tokenizer file")
        features = cls(payload["folder"])
        if features.fingerprint != payload.get("fingerprint"):
            raise DataError(
                path,
                f"the text features in {features.folder} changed since this run started "
                f"(fingerprint {features.fingerprint}, the run used {payload.get('fingerprint')})",
            )
        return features


@register_stored("text")
class StoredText(StoredFeatures):
    """The text features as a data set's stored features: read with ``model.text.encoder=precomp``, checked
    before anything starts (:func:`itrlab.config.checks.check_data`); data its kind generates, not written yet,
    has no captions to hold them against."""

    @classmethod
    def wanted(cls, config) -> bool:
        return config.model.text.encoder == "precomp"

    @classmethod
    def check(cls, config, kind) -> None:
        from itrlab.data.precomp import read_captions

        dataset = config.dataset
        if not kind.on_disk():
            return
        features = TextFeatures(resolve_folder(dataset.root, dataset.text_features))
        for role in ("train", "val", "test"):
            split = kind.split_name(role)
            features.check_split(split, read_captions(dataset.root, split), "tokens")


def _check_array(path: Path, shape: tuple[int, ...]) -> None:
    """DataError unless ``path`` is a whole .npy of ``shape`` (a truncated file is caught by its size)."""
    if not path.is_file():
        raise DataError(path, "missing (the text features are incomplete: re-run jobs/extract_features.py --text)")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(path, f"unreadable or truncated ({exc})") from None
    if tuple(array.shape) != tuple(shape):
        raise DataError(
            path, f"shape {tuple(array.shape)}, expected {tuple(shape)}: truncated or from another extraction"
        )


__all__ = [
    "DEFAULT_FOLDER",
    "KINDS",
    "MANIFEST",
    "SplitText",
    "StoredText",
    "TOKENIZER_FORMAT",
    "TextFeatures",
    "captions_digest",
    "lengths_path",
    "resolve_folder",
    "sentence_path",
    "tokens_path",
]
