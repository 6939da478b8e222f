"""Build the caption encoder a config names, from plain arguments (no config imports).

``bigru``: word embedding (random, or GloVe 6B 50-d with ``glove=True``) -> BiGRU -> pooling. ``bert``: a pretrained
transformer from a local directory (``bert_path``; None: the packaged all-MiniLM-L6-v2) -> linear projection ->
pooling; ``freeze`` fixes its weights. ``precomp``: that transformer's stored token states
(:mod:`itrlab.models.stored_text`) -> projection or MLP -> pooling, its input width ``vocab_size`` (the stored
features' width). Each returns unit vectors (B, embed_dim) from ``(tokens, lengths)`` and per-token features from
``word_features``. Models call :class:`TextEncoderSpec`'s ``build`` after building their image encoder, so that a
seed gives the image encoder the same weights whatever the text encoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from itrlab.models.encoders import GRUTextEncoder

TEXT_ENCODERS = ("bigru", "bert", "precomp")


def build_text_encoder(
    encoder: str = "bigru",
    *,
    vocab_size: int,
    embed_dim: int,
    word_dim: int = 300,
    num_layers: int = 1,
    pooling: str = "mean",
    projection_hidden: int | None = None,
    glove: bool = False,
    bert_path: str | Path | None = None,
    freeze: bool = False,
    mlp_hidden: int | None = None,
) -> nn.Module:
    """The text encoder: ``vocab_size``/``word_dim``/``num_layers``/``glove`` apply to ``bigru``,
    ``bert_path``/``freeze`` to ``bert`` (whose vocabulary is its tokenizer's)."""
    if encoder == "bigru":
        return GRUTextEncoder(vocab_size, word_dim, embed_dim, num_layers, pooling, projection_hidden, glove=glove)
    if encoder == "bert":
        from itrlab.models.bert_text import BertTextEncoder  # imports transformers: only when asked for

        return BertTextEncoder(bert_path, embed_dim, pooling, freeze=freeze, projection_hidden=projection_hidden)
    if encoder == "precomp":
        from itrlab.models.stored_text import StoredTextEncoder

        return StoredTextEncoder(vocab_size, embed_dim, pooling, projection_hidden, mlp_hidden)
    raise ValueError(f"unknown text encoder {encoder!r}; allowed: {', '.join(TEXT_ENCODERS)}")


@dataclass(frozen=True)
class TextEncoderSpec:
    """Which text encoder to build, and its own settings (see :func:`build_text_encoder`)."""

    encoder: str = "bigru"
    word_dim: int = 300
    num_layers: int = 1
    pooling: str = "mean"
    glove: bool = False
    bert_path: str | Path | None = None
    freeze: bool = False
    mlp_hidden: int | None = None

    def build(self, *, vocab_size: int, embed_dim: int, projection_hidden: int | None = None) -> nn.Module:
        return build_text_encoder(
            self.encoder,
            vocab_size=vocab_size,
            embed_dim=embed_dim,
            word_dim=self.word_dim,
            num_layers=self.num_layers,
            pooling=self.pooling,
            projection_hidden=projection_hidden,
            glove=self.glove,
            bert_path=self.bert_path,
            freeze=self.freeze,
            mlp_hidden=self.mlp_hidden,
        )


__all__ = ["TEXT_ENCODERS", "TextEncoderSpec", "build_text_encoder"]
