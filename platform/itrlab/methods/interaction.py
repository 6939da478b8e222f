"""Interaction methods: the score of a pair comes from cross-attention between its regions and words.

``xattn`` is DBL's single-branch baseline (DBL paper §III-A, eq. 1-2; see
:mod:`itrlab.models.interaction`): text-to-image cross-attention, a vectorised similarity and a
tanh score, trained with the config's task loss (VSE++'s max of hinges, eq. 5, by default) on the
batch's ``B x B`` score matrix.

Evaluation encodes the split once (``N x R x d`` region features and ``cpi·N x L x d`` word
features, kept in memory) and scores each block that the evaluator asks for pairwise, in shards
of bounded memory: no per-query loop.
"""

from __future__ import annotations

from collections.abc import Iterable

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
from itrlab.models.interaction import DEFAULT_SHARD_ELEMENTS, InteractionModel


@register_method("xattn")
class InteractionMethod(MethodModule):
    name = "xattn"

    def __init__(self, model: InteractionModel, loss: torch.nn.Module, max_len: int = 64,
                 shard_elements: int | None = DEFAULT_SHARD_ELEMENTS):
        super().__init__()
        self.model = model
        self.loss = loss
        self.max_len = max_len
        self.shard_elements = shard_elements

    @classmethod
    def validate_config(cls, config: ExperimentConfig) -> None:
        """Settings of the dual encoders that this model has no place for: refused rather than ignored."""
        super().validate_config(config)
        model_config = config.model
        if model_config.projection_hidden is not None:
            raise ConfigError("model.projection_hidden", model_config.projection_hidden,
                              f"method '{config.method.name}' has no projection head; leave it unset")
        for part in ("image", "text"):
            pooling = getattr(model_config, part).pooling
            if pooling != "mean":
                raise ConfigError(f"model.{part}.pooling", pooling,
                                  f"method '{config.method.name}' scores words against regions and pools "
                                  "nothing; leave it 'mean' (the default)")
        needs = set(getattr(build_task_loss(config.loss), "requires", ())) - {"i2t", "image_ids"}
        if needs:
            raise ConfigError("loss.name", config.loss.name,
                              f"method '{config.method.name}' scores image-caption pairs only; this loss "
                              f"needs {', '.join(sorted(needs))}")

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> "InteractionMethod":
        cls.validate_config(config)
        model_config = config.model
        model = InteractionModel.build(
            feature_dim=context.feature_dim, vocab_size=context.vocab_size, embed_dim=model_config.embed_dim,
            sim_dim=model_config.sim_dim, lambda_=model_config.attention_lambda,
            text=text_encoder_spec(model_config.text),
        )
        method = cls(model, build_task_loss(config.loss), model_config.text.max_len)
        method.name = config.method.name
        method.text_lr = model_config.text.lr
        return method

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        """``Similarities`` of the batch: ``i2t`` is the ``B x B`` score matrix of eq. 1-2."""
        unknown = set(needs) - {"i2t", "image_ids"}
        if unknown:
            raise ValueError(f"an interaction model scores image-caption pairs only; it has no {', '.join(sorted(unknown))}")
        return Similarities(i2t=self.model(batch.images, batch.tokens, batch.lengths), image_ids=batch.image_ids)

    @torch.no_grad()
    def encode_split(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """Unit-norm region features (N, R, d), word features (cpi·N, L, d) and lengths (cpi·N,).

        ``L`` is the split's longest caption; shorter ones are zero-padded.
        """
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        image_batches, caption_batches = eval_loaders(split, vocab, batch_size, self.max_len)
        regions = torch.cat([self.model.encode_images(b.images.to(device)) for b in image_batches])
        word_parts, length_parts = [], []
        for b in caption_batches:
            word_parts.append(self.model.encode_captions(b.tokens.to(device), b.lengths.to(device)))
            length_parts.append(b.lengths.to(device))
        self.train(was_training)
        lengths = torch.cat(length_parts)
        words = regions.new_zeros((len(lengths), int(lengths.max()), regions.shape[-1]))
        start = 0
        for part in word_parts:
            words[start:start + len(part), :part.shape[1]] = part
            start += len(part)
        return regions, words, lengths

    def split_score_fn(self, regions: Tensor, words: Tensor, lengths: Tensor) -> ScoreFn:
        """A :data:`ScoreFn` over encoded features: each block scored pairwise, in shards."""
        model, shard_elements = self.model, self.shard_elements

        def score(image_slice: slice, caption_slice: slice) -> Tensor:
            with torch.no_grad():  # the similarity head has no train/eval-dependent layers
                return model.pair_scores(regions[image_slice], words[caption_slice], lengths[caption_slice],
                                         max_elements=shard_elements)

        return score

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        return self.split_score_fn(*self.encode_split(split, vocab, batch_size))
