"""Interaction methods: the score of a pair comes from cross-attention between its regions and words.

``xattn`` is DBL's single-branch baseline (DBL paper §III-A, eq. 1-2; see
:mod:`itrlab.models.interaction`): text-to-image cross-attention, a vectorised similarity and a
tanh score, trained with the config's task loss (VSE++'s max of hinges, eq. 5, by default) on the
batch's ``B x B`` score matrix.

Evaluation encodes the split once (``N x R x d`` region features and ``cpi·N x L x d`` word
features, kept in memory) and scores each block that the evaluator asks for pairwise, in shards
of bounded memory: no per-query loop. :func:`encode_split_features` and :func:`sharded_score_fn`
do that for any interaction method (AsCL's fusion scorer uses them too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from itrlab.config import ExperimentConfig
from itrlab.data import Batch, PrecompSplit, Vocabulary, eval_loaders
from itrlab.errors import ConfigError
from itrlab.eval import ScoreFn
from itrlab.losses import Similarities
from itrlab.methods.base import MethodModule, build_task_loss
from itrlab.methods.context import BuildContext
from itrlab.methods.registry import register_method
from itrlab.methods.dual import text_encoder_spec
from itrlab.models.interaction import InteractionModel, shard_budget


@register_method("xattn")
class InteractionMethod(MethodModule):
    name = "xattn"

    def __init__(self, model: InteractionModel, loss: torch.nn.Module, max_len: int = 64,
                 shard_elements: int | None | str = "device"):
        super().__init__()
        self.model = model
        self.loss = loss
        self.max_len = max_len
        self.shard_elements = shard_elements  # elements; None: one shard; "device": shard_budget(device)

    @classmethod
    def validate_config(cls, config: ExperimentConfig) -> None:
        """Settings of the dual encoders that this model has no place for: refused rather than ignored."""
        super().validate_config(config)
        refuse_pooled_settings(config, "scores words against regions and pools nothing")
        refuse_losses_needing(config, {"i2t", "image_ids"}, "scores image-caption pairs only")

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> "InteractionMethod":
        cls.validate_config(config)
        model_config = config.model
        model = InteractionModel.build(
            feature_dim=context.feature_dim, vocab_size=context.vocab_size, embed_dim=model_config.embed_dim,
            sim_dim=model_config.sim_dim, lambda_=model_config.attention_lambda,
            text=text_encoder_spec(model_config.text),
        )
        method = cls(model, build_task_loss(config.loss), model_config.text.max_len,
                     config.eval.shard_elements or "device")
        method.name = config.method.name
        method.text_lr = model_config.text.lr
        return method

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        """``Similarities`` of the batch: ``i2t`` is the ``B x B`` score matrix of eq. 1-2."""
        unknown = set(needs) - {"i2t", "image_ids"}
        if unknown:
            raise ValueError(f"an interaction model scores image-caption pairs only; it has no {', '.join(sorted(unknown))}")
        return Similarities(i2t=self.model(batch.images, batch.tokens, batch.lengths), image_ids=batch.image_ids)

    def encode_split(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """Unit-norm region features (N, R, d), word features (cpi·N, L, d) and lengths (cpi·N,).

        ``L`` is the split's longest caption; shorter ones are zero-padded.
        """
        (regions,), words, lengths = encode_split_features(
            self, split, vocab, batch_size, self.max_len,
            lambda images: (self.model.encode_images(images),), self.model.encode_captions)
        return regions, words, lengths

    def split_score_fn(self, regions: Tensor, words: Tensor, lengths: Tensor) -> ScoreFn:
        """A :data:`ScoreFn` over encoded features: each block scored pairwise, in shards."""
        budget = shard_budget(regions.device) if self.shard_elements == "device" else self.shard_elements
        return sharded_score_fn(self.model.pair_scores, (regions,), words, lengths, budget)

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        return self.split_score_fn(*self.encode_split(split, vocab, batch_size))


# --------------------------------------------------------------------------- shared by interaction methods


def refuse_pooled_settings(config: ExperimentConfig, why: str) -> None:
    """ConfigError for the dual-encoder settings a token-level scorer has no place for: a projection
    head, or pooling other than the default ``mean`` (``why`` completes "method 'x' ...")."""
    model_config = config.model
    if model_config.projection_hidden is not None:
        raise ConfigError("model.projection_hidden", model_config.projection_hidden,
                          f"method '{config.method.name}' has no projection head; leave it unset")
    for part in ("image", "text"):
        pooling = getattr(model_config, part).pooling
        if pooling != "mean":
            raise ConfigError(f"model.{part}.pooling", pooling,
                              f"method '{config.method.name}' {why}; leave it 'mean' (the default)")


def refuse_losses_needing(config: ExperimentConfig, provided: set[str], why: str) -> None:
    """ConfigError when the task loss reads inputs beyond ``provided`` (``why`` completes "method 'x' ...")."""
    needs = set(getattr(build_task_loss(config.loss), "requires", ())) - provided
    if needs:
        raise ConfigError("loss.name", config.loss.name,
                          f"method '{config.method.name}' {why}; this loss needs {', '.join(sorted(needs))}")


@torch.no_grad()
def encode_split_features(method: torch.nn.Module, split: PrecompSplit, vocab: Vocabulary, batch_size: int,
                          max_len: int, encode_images: Callable[[Tensor], tuple[Tensor, ...]],
                          encode_captions: Callable[[Tensor, Tensor], Tensor],
                          ) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    """Every image and caption of a split encoded independently, in split order, in eval mode.

    Returns the tuple ``encode_images`` gives per image batch, each part concatenated over the split
    (N, ...); the token features ``encode_captions`` gives, zero-padded to the split's longest caption
    (cpi·N, L, d); and the caption lengths (cpi·N,). No item ever sees another.
    """
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
        words[start:start + len(part), :part.shape[1]] = part
        start += len(part)
    return images, words, lengths


def sharded_score_fn(pair_scores: Callable[..., Tensor], images: tuple[Tensor, ...], words: Tensor, lengths: Tensor,
                     shard_elements: int | None) -> ScoreFn:
    """A :data:`ScoreFn` over encoded features: block ``(image_slice, caption_slice)`` scored by
    ``pair_scores(*image_parts, words, lengths, max_elements=shard_elements)`` (shards of bounded memory)."""

    def score(image_slice: slice, caption_slice: slice) -> Tensor:
        with torch.no_grad():  # the scorers have no train/eval-dependent layers
            return pair_scores(*(part[image_slice] for part in images), words[caption_slice], lengths[caption_slice],
                               max_elements=shard_elements)

    return score
