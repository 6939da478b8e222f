"""What token-level scorers share (DBL's ``xattn`` and AsCL's fusion scorer): the settings they refuse,
and evaluation that encodes a split once and scores each block the evaluator asks for pairwise, in
shards of bounded memory (no per-query loop).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from itrlab.config import ExperimentConfig
from itrlab.data import PrecompSplit, Vocabulary, eval_loaders
from itrlab.errors import ConfigError
from itrlab.eval import ScoreFn


def refuse_pooled_settings(config: ExperimentConfig, why: str) -> None:
    """ConfigError for the dual-encoder settings a token-level scorer has no place for: a projection
    head, or pooling other than the default ``mean`` (``why`` completes "method 'x' ...")."""
    model_config = config.model
    if model_config.projection_hidden is not None:
        raise ConfigError(
            "model.projection_hidden",
            model_config.projection_hidden,
            f"method '{config.method.name}' has no projection head; leave it unset",
        )
    for part in ("image", "text"):
        pooling = getattr(model_config, part).pooling
        if pooling != "mean":
            raise ConfigError(
                f"model.{part}.pooling", pooling, f"method '{config.method.name}' {why}; leave it 'mean' (the default)"
            )


@torch.no_grad()
def encode_split_features(
    method: torch.nn.Module,
    split: PrecompSplit,
    vocab: Vocabulary,
    batch_size: int,
    max_len: int,
    encode_images: Callable[[Tensor], tuple[Tensor, ...]],
    encode_captions: Callable[[Tensor, Tensor], Tensor],
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    """Every image and caption of a split encoded independently, in split order, in eval mode: the parts
    ``encode_images`` gives, each concatenated over the split (N, ...); the token features of ``encode_captions``,
    zero-padded to the longest caption (cpi·N, L, d); and the caption lengths (cpi·N,)."""
    was_training = method.training
    method.eval()
    device = next(method.parameters()).device
    image_batches, caption_batches = eval_loaders(split, vocab, batch_size, max_len)
    images = tuple(torch.cat(parts) for parts in zip(*(encode_images(b.images.to(device)) for b in image_batches)))
    word_parts, length_parts = [], []
    for b in caption_batches:
        word_parts.append(encode_captions(b.tokens.to(device), b.lengths.to(device)))
        length_parts.append(b.lengths.to(device))
    method.train(was_training)
    lengths = torch.cat(length_parts)
    words = word_parts[0].new_zeros((len(lengths), int(lengths.max()), word_parts[0].shape[-1]))
    start = 0
    for part in word_parts:
        words[start : start + len(part), : part.shape[1]] = part
        start += len(part)
    return images, words, lengths


def sharded_score_fn(
    pair_scores: Callable[..., Tensor],
    images: tuple[Tensor, ...],
    words: Tensor,
    lengths: Tensor,
    shard_elements: int | None,
) -> ScoreFn:
    """A :data:`ScoreFn` over encoded features: block ``(image_slice, caption_slice)`` scored by
    ``pair_scores(*image_parts, words, lengths, max_elements=shard_elements)`` (shards of bounded memory)."""

    def score(image_slice: slice, caption_slice: slice) -> Tensor:
        with torch.no_grad():  # the scorers have no train/eval-dependent layers
            return pair_scores(
                *(part[image_slice] for part in images),
                words[caption_slice],
                lengths[caption_slice],
                max_elements=shard_elements,
            )

    return score
