"""Interaction methods: the score of a pair comes from cross-attention between its regions and words.

``xattn`` is DBL's single-branch baseline (DBL paper §III-A, eq. 1-2: :mod:`itrlab.models.interaction`), trained with
the config's task loss (VSE++'s max of hinges, eq. 5, by default) on the batch's ``B x B`` score matrix. Evaluation
encodes the split once and scores each block the evaluator asks for pairwise, in shards of bounded memory
(:mod:`itrlab.methods.sharded`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from itrlab.config import ExperimentConfig
from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.eval import ScoreFn
from itrlab.losses import Similarities
from itrlab.methods.base import MethodModule, MethodSettings, build_task_loss
from itrlab.methods.context import BuildContext
from itrlab.methods.dual import text_encoder_spec
from itrlab.methods.registry import register_method
from itrlab.methods.sharded import encode_split_features, refuse_pooled_settings, sharded_score_fn
from itrlab.models.interaction import InteractionModel, shard_budget


class XattnSettings(MethodSettings):
    """xattn's keys in the ``method`` section (DBL §III-A)."""

    name: Literal["xattn"] = "xattn"
    # λ, the inverse temperature of the softmax over regions in the text-to-image attention (eq. 1).
    attention_lambda: float = Field(9.0, gt=0, allow_inf_nan=False)
    # Size of the vectorised similarity A = norm(W1 |T - V'|² + b1) of eq. 2 (256 in the paper).
    sim_dim: int = Field(256, ge=1)
    # Evaluation: budget of a shard's largest intermediate, in elements; None = from the device (free
    # memory on a GPU, the last-level cache on a CPU; itrlab.models.interaction.shard_budget).
    shard_elements: int | None = Field(None, ge=1)


@register_method("xattn")
class InteractionMethod(MethodModule):
    name = "xattn"
    settings = XattnSettings
    provides = frozenset({"i2t", "image_ids"})

    def __init__(
        self,
        model: InteractionModel,
        loss: torch.nn.Module,
        max_len: int = 64,
        shard_elements: int | None | str = "device",
    ):
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

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> InteractionMethod:
        settings, model_config = cls.method_settings(config), config.model
        model = InteractionModel.build(
            feature_dim=context.feature_dim,
            vocab_size=context.vocab_size,
            embed_dim=model_config.embed_dim,
            sim_dim=settings.sim_dim,
            lambda_=settings.attention_lambda,
            text=text_encoder_spec(model_config.text),
        )
        method = cls(
            model, build_task_loss(config.loss), model_config.text.max_len, settings.shard_elements or "device"
        )
        method.name = config.method.name
        method.text_lr = model_config.text.lr
        return method

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        """``Similarities`` of the batch: ``i2t`` is the ``B x B`` score matrix of eq. 1-2."""
        unknown = set(needs) - {"i2t", "image_ids"}
        if unknown:
            raise ValueError(
                f"an interaction model scores image-caption pairs only; it has no {', '.join(sorted(unknown))}"
            )
        return Similarities(i2t=self.model(batch.images, batch.tokens, batch.lengths), image_ids=batch.image_ids)

    def encode_split(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """Unit-norm region features (N, R, d), word features (cpi·N, L, d) and lengths (cpi·N,).

        ``L`` is the split's longest caption; shorter ones are zero-padded.
        """
        (regions,), words, lengths = encode_split_features(
            self,
            split,
            vocab,
            batch_size,
            self.max_len,
            lambda images: (self.model.encode_images(images),),
            self.model.encode_captions,
        )
        return regions, words, lengths

    def split_score_fn(self, regions: Tensor, words: Tensor, lengths: Tensor) -> ScoreFn:
        """A :data:`ScoreFn` over encoded features: each block scored pairwise, in shards."""
        budget = shard_budget(regions.device) if self.shard_elements == "device" else self.shard_elements
        return sharded_score_fn(self.model.pair_scores, (regions,), words, lengths, budget)

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        return self.split_score_fn(*self.encode_split(split, vocab, batch_size))
