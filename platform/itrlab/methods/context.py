"""What a method is built from besides its config: :class:`BuildContext`, handed to ``MethodModule.from_config`` and
``prepare``, holds what only the opened data knows (feature width, tokenizer words, split sizes, the training split for
vocabularies and graphs), the run directory (for state kept beside the checkpoints), ``train_anchor`` (the trainer's way
of training a plain copy of a method first, given by the training layer so that methods never import it) and ``notes``,
what preparing found, for the run to print and log."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itrlab.data import PrecompSplit


@dataclass
class BuildContext:
    feature_dim: int
    vocab_size: int
    vocab_words: Sequence[str] | None = None  # id order; None: not known (unit tests)
    vocab: Any = None  # the run's text tokenizer (encodes splits for methods that embed them in prepare)
    splits: Mapping[str, PrecompSplit] = field(default_factory=dict)  # by role: train, val, test
    run_dir: Path | None = None
    train_anchor: Callable[[Any], Path] | None = None  # config of the plain method -> its model.pt
    notes: dict[str, Any] = field(default_factory=dict)
    # captions of the training split when only their count is known (a trained model rebuilt without its
    # data, itrlab.trained: state sized by the training set, CODER's prototypes, keeps its shape)
    train_size: int | None = None

    @property
    def train(self) -> PrecompSplit | None:
        return self.splits.get("train")

    @property
    def n_train_captions(self) -> int | None:
        """Captions of the training split: the opened split's, else ``train_size`` (None: not known)."""
        train = self.train
        return train.n_captions if train is not None else self.train_size

    @property
    def split_sizes(self) -> dict[str, int]:
        """Images per split role."""
        return {role: split.n_images for role, split in self.splits.items()}

    @classmethod
    def of(
        cls,
        *,
        vocab,
        splits: Mapping[str, PrecompSplit],
        run_dir: Path | None = None,
        train_anchor: Callable[[Any], Path] | None = None,
    ) -> BuildContext:
        """The context of opened data: ``vocab`` is the run's text tokenizer."""
        return cls(
            feature_dim=splits["train"].feature_dim,
            vocab_size=len(vocab),
            vocab_words=getattr(vocab, "words", None),
            vocab=vocab,
            splits=dict(splits),
            run_dir=run_dir,
            train_anchor=train_anchor,
        )
