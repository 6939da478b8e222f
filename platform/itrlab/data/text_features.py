"""Text features computed once: a pretrained text model's states of every caption, stored beside the images.

A frozen text model computes the same states for a caption at every step, so a run that keeps it frozen reads them
instead (``model.text.encoder: precomp``): its text tower becomes a projection and a pooling over stored features, as
the image tower is. :mod:`itrlab.extract.text` writes them; this module reads and checks them::

    <folder>/text.json             written last: model, settings, and per split the digest of its captions
    <folder>/{split}_tokens.npy    (T, H) float16: the last hidden state of every token ([CLS] ... [SEP]) of
                                   every caption, caption after caption (T tokens in all)
    <folder>/{split}_lengths.npy   (C,) int32: the tokens of each caption (caption j: its rows from the sum of
                                   the lengths before it)
    <folder>/{split}_sentence.npy  (C, H) float16, optional: each caption's sentence vector (the model's own
                                   pooling: the unit mean of its token states)

The captions are the precomp folder's ``{split}_caps.txt``, in order. ``text.json`` (typed by
:mod:`itrlab.data.text_manifest`) keeps the sha256 of each split's caption lines and of each array file's bytes
(``arrays_sha256``), so that features of other captions, or arrays changed after the extraction, are refused before
training (:meth:`TextFeatures.open_split`); each split's arrays are checked whole when a run starts and when a model
opens them (:mod:`itrlab.data.array_checks`). docs/data.md ("Checked before training") lists the checks.

``dataset.text_features`` names the folder; by default ``<dataset.root>/text``, or for a pooled layout derived from a
grid (``<grid>/pool3x3/``) the grid's ``<grid>/text``, whose captions the layouts copy. :class:`TextFeatures` is also
the run's text tokenizer: its captions arrive as states, so it encodes no text, and its ``len`` is the states' width.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.data.array_checks import array_content, open_array
from itrlab.data.kinds.registry import StoredFeatures, register_stored
from itrlab.data.text_manifest import TextManifest, typed_digests
from itrlab.errors import DataError
from itrlab.files import atomic_write_text, read_json, validate_record

MANIFEST = "text.json"
FORMAT = "itrlab-text-features"
FORMAT_VERSION = 1
TOKENIZER_FORMAT = "itrlab-stored-text"
KINDS = ("tokens", "sentence")  # what a folder may hold: token states, sentence vectors
DEFAULT_FOLDER = "text"
LAYOUT_MANIFEST = "layout.json"  # itrlab.extract.layouts: a pooled layout derived from a grid
_log = logging.getLogger(__name__)
_unbound: set[Path] = set()  # folders whose text.json records no digest of its arrays, said once per process


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


def array_files(folder: Path, split: str, kind: str = "tokens") -> dict[str, Path]:
    """The array files of ``split``'s stored ``kind``, by their role (``tokens``, ``lengths``; ``sentence``)."""
    if kind == "tokens":
        return {"tokens": tokens_path(folder, split), "lengths": lengths_path(folder, split)}
    return {"sentence": sentence_path(folder, split)}


def array_digests(folder: Path, split: str, kind: str = "tokens") -> dict[str, str]:
    """The sha256 of each array file of ``split``'s ``kind``, by role (read once, :mod:`~itrlab.data.array_checks`):
    what ``text.json`` records as the split's ``arrays_sha256``."""
    return {role: array_content(path).sha256 for role, path in array_files(folder, split, kind).items()}


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
        manifest = read_json(manifest_file, "text-feature manifest", 1 << 20)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise DataError(manifest_file, f"not an itrlab text-feature manifest (format {FORMAT!r} expected)")
        if manifest.get("version") != FORMAT_VERSION:
            raise DataError(
                manifest_file,
                f"format version {manifest.get('version')!r}; this itrlab reads {FORMAT_VERSION}: extract them again",
            )
        typed = validate_record(manifest_file, manifest, TextManifest, "text-feature manifest")
        self.manifest = manifest
        self.width = typed.hidden_size
        self.kinds = tuple(typed.kinds)
        self.splits: dict[str, dict[str, Any]] = {name: entry.model_dump() for name, entry in typed.splits.items()}

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
        if kind == "tokens":
            if entry.get("tokens") is None:
                raise DataError(manifest_file, f"split {split!r} lacks 'tokens' (the count of its token states)")
            open_array(tokens_path(self.folder, split), (entry["tokens"], self.width), "f", "text features")
            self._check_lengths(split, len(captions), entry["tokens"])
        else:
            open_array(sentence_path(self.folder, split), (len(captions), self.width), "f", "text features")
        self._check_content(split, kind)

    def _check_lengths(self, split: str, n_captions: int, tokens: int) -> None:
        """DataError unless ``{split}_lengths.npy`` holds one integer of at least 1 per caption, adding up to
        ``tokens``."""
        path = lengths_path(self.folder, split)
        lengths = np.asarray(open_array(path, (n_captions,), "iu", "caption lengths"))
        if len(lengths) and int(lengths.min()) < 1:
            first = int(lengths.argmin())
            raise DataError(path, f"caption {first} has {int(lengths[first])} tokens; each has at least 1")
        if int(lengths.sum(dtype=np.int64)) != tokens:
            raise DataError(
                path, f"the lengths add up to {int(lengths.sum(dtype=np.int64)):,} tokens, the manifest says {tokens:,}"
            )

    def array_files(self, split: str, kind: str = "tokens") -> dict[str, Path]:
        return array_files(self.folder, split, kind)

    def array_digests(self, split: str, kind: str = "tokens") -> dict[str, str]:
        return array_digests(self.folder, split, kind)

    def _check_content(self, split: str, kind: str) -> None:
        """DataError unless every value of the split's arrays is finite and their bytes are those ``text.json``
        recorded (a folder that recorded none: one warning, once)."""
        recorded = self.splits[split].get("arrays_sha256") or {}
        for role, path in self.array_files(split, kind).items():
            content = array_content(path)
            if not content.finite:
                raise DataError(path, "holds NaN or infinite values; extract the text features again")
            if role in recorded and recorded[role] != content.sha256:
                raise DataError(
                    path,
                    f"its bytes (sha256 {content.sha256[:12]}) are not those {MANIFEST} recorded "
                    f"({recorded[role][:12]}): changed after the extraction; extract the text features again",
                )
        if not recorded and self.folder not in _unbound:
            _unbound.add(self.folder)
            _log.warning(
                "text features in %s: %s records no digest of their arrays (extracted before itrlab recorded them): "
                "their shapes, lengths and values are checked, not that their bytes are the extraction's; "
                "extract them again to bind them",
                self.folder,
                MANIFEST,
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
            "arrays_sha256": self.every_digest(),
        }
        atomic_write_text(path, json.dumps(payload, indent=1) + "\n")

    def every_digest(self) -> dict[str, dict[str, str]]:
        """The sha256 of every array file of every split's token states, by split and role: what binds a run (its
        ``vocab.json``) and a model (its ``model.json``) to the bytes they read."""
        return {split: self.array_digests(split) for split in sorted(self.splits)} if "tokens" in self.kinds else {}

    def check_digests(self, recorded: dict[str, dict[str, str]], where: Path, what: str) -> None:
        """DataError naming ``where`` unless each array file ``recorded`` names still has the recorded digest."""
        for split, roles in recorded.items():
            if split not in self.splits:
                raise DataError(where, f"{what} read split {split!r}, which {self.folder / MANIFEST} no longer holds")
            found = self.array_digests(split)
            for role, digest in roles.items():
                if found.get(role) != digest:
                    raise DataError(
                        where,
                        f"the text features in {self.folder} changed since {what} read them "
                        f"({self.array_files(split)[role].name}: sha256 {str(found.get(role))[:12]}, "
                        f"{what} read {str(digest)[:12]})",
                    )

    @classmethod
    def load(cls, path: str | Path) -> TextFeatures:
        payload = read_json(path, "tokenizer file")
        if not isinstance(payload, dict) or payload.get("format") != TOKENIZER_FORMAT:
            raise DataError(path, "not an itrlab stored-text tokenizer file")
        if not isinstance(payload.get("folder"), str):
            raise DataError(path, f"'folder': got {payload.get('folder')!r}; the folder of the text features")
        features = cls(payload["folder"])
        if features.fingerprint != payload.get("fingerprint"):
            raise DataError(
                path,
                f"the text features in {features.folder} changed since this run started "
                f"(fingerprint {features.fingerprint}, the run used {payload.get('fingerprint')})",
            )
        recorded = payload.get("arrays_sha256")
        if recorded is not None:
            features.check_digests(typed_digests(path, recorded), path, "this run")
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


__all__ = [
    "DEFAULT_FOLDER",
    "KINDS",
    "MANIFEST",
    "SplitText",
    "StoredText",
    "TOKENIZER_FORMAT",
    "TextFeatures",
    "array_digests",
    "captions_digest",
    "lengths_path",
    "resolve_folder",
    "sentence_path",
    "tokens_path",
]
