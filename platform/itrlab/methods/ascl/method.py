"""AsCL (Gong et al.): generated samples per asymmetry type, the asymmetry-sensitive loss with τ, and hierarchical
cross-modal fusion scored without any ground-truth leak (``docs/papers/ascl.md`` §B).

* Model: :class:`~itrlab.methods.ascl.networks.AsclModel`, the fusion scorer of eq. 1-4 over the config's text
  encoder (``u1``, ``heads``; ``cross_attention: false`` is "w/o MF").
* Generated samples (§II-B, docs/papers/ascl.md §B1), in :meth:`AsclMethod.batch_similarities`, only those the loss
  reads: ``T⁻`` by the negative ``generator`` at the ``noise_site``, ``T⁺`` by the ``positives`` generator,
  ``T̃⁻`` the noise on ``T⁺`` (:mod:`itrlab.methods.ascl.text_augment`). Randomness comes from a generator seeded by
  (config seed, batch counter), the counter a buffer, so that a resumed run draws the same samples.
* Scores: the batch's B images against ``[T; T⁻; T⁺; T̃⁻]`` (B × 4B pairs, docs/papers/ascl.md §B3), each pair from
  that pair alone. ``T`` and ``T⁺`` go in (at most two) runs of similar length, each with its negatives through one
  text-encoder call and one scorer call, so that short captions are not padded to the concatenations' length. The
  ``loss`` section's loss reads them (``ascl``: eq. 5-7; ``ascl_triplet``: "w triplet"; ``use_positives`` /
  ``use_negatives``: "w/o Pos", "w/o Neg", "w/o P&N").
* Evaluation encodes images and captions independently and scores every pair in bounded-memory shards
  (:mod:`itrlab.methods.sharded`): no pair looks up its ground-truth partner, unlike the reference code
  (docs/papers/ascl.md §B3, #leak-free-scoring).
* Stored text features (``model.text.encoder: precomp``): ``T⁺`` cuts and joins states
  (:mod:`itrlab.methods.ascl.stored_positives`); ``T⁻`` perturbs the states (``input``) or ``W`` (``features``)
  without re-encoding, so ``shuffle`` is refused and ``mixture`` draws from the other four
  (docs/papers/ascl.md#stored-text-features), or perturbs the frozen model's input embeddings and encodes them again
  (``encoder_input``, :mod:`itrlab.methods.ascl.reencode`), where every generator applies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from itrlab.config import ExperimentConfig
from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.data.text_features import TextFeatures
from itrlab.errors import ConfigError
from itrlab.eval import ScoreFn
from itrlab.losses import Similarities
from itrlab.losses.parts import PartBound
from itrlab.methods.ascl.losses import I2T_GENERATED_NEG, I2T_POS, I2T_POS_GENERATED_NEG
from itrlab.methods.ascl.networks import (
    ENCODER_INPUT,
    NOISE_SITES,
    AsclModel,
    CaptionPool,
    SampleGenerators,
    frame_ids,
    length_buckets,
    stack_padded,
)
from itrlab.methods.ascl.reencode import InputReencoder
from itrlab.methods.ascl.stored_positives import StatePool
from itrlab.methods.ascl.text_augment import (
    MIXTURE_OF,
    NEGATIVE_GENERATORS,
    POSITIVE_GENERATORS,
    SIGMA_UNITS,
    NegativeGenerator,
    PositiveGenerator,
)
from itrlab.methods.base import MethodModule, MethodSettings, build_task_loss, task_loss_requires
from itrlab.methods.context import BuildContext
from itrlab.methods.dual import text_encoder_spec
from itrlab.methods.registry import register_method
from itrlab.methods.sharded import encode_split_features, refuse_pooled_settings, sharded_score_fn
from itrlab.numbers import number

GENERATED = (I2T_GENERATED_NEG, I2T_POS, I2T_POS_GENERATED_NEG)
PROVIDED = frozenset({"i2t", "image_ids", *GENERATED})
STORED = "precomp"  # model.text.encoder of stored token states
ORDER_BLIND = ("shuffle",)  # perturbations nothing after stored states would see (no re-encoding)


class AsclSettings(MethodSettings):
    """AsCL's keys in the ``method`` section (defaults: the reference code's and the paper's COCO ones)."""

    name: Literal["ascl"] = "ascl"
    generator: Literal[NEGATIVE_GENERATORS] = "mixture"  # type-I negatives (Fig. 3b)
    sigma: number(ge=0, meaning="the Gaussian noise scale σ of type-I negatives") = 1.0
    sigma_units: Literal[SIGMA_UNITS] = "absolute"  # σ as is (reference code) | x the perturbed entries' std
    p: number(ge=0, le=1, meaning="the dropout probability of type-I negatives") = 0.5
    cutoff_rows: int = Field(1, ge=0)  # tokens zeroed by token cutoff
    cutoff_cols: int = Field(1, ge=0)  # features zeroed by feature cutoff
    positives: Literal[POSITIVE_GENERATORS] = "mixture"  # type II (concat) / III (truncate) (Fig. 3a)
    # input embeddings (re-encoded; on stored states: the states), token features, or (stored states) the frozen
    # text model's input embeddings, encoded again in the step
    noise_site: Literal[NOISE_SITES] = "input"
    u1: number(ge=0, le=1, meaning="the weight of the local score, eq. 4") = 0.8  # 0.8 COCO, 0.6 F30K
    heads: int = Field(8, ge=1)  # H of the cross-attention (reference code)
    cross_attention: bool = True  # false: "w/o MF"
    shard_elements: int = Field(1 << 22, ge=1)  # evaluation: budget of a shard's largest intermediate


@register_method("ascl")
class AsclMethod(MethodModule):
    name = "ascl"
    settings = AsclSettings
    group_refusal = (
        "its step draws generated captions from a per-run generator on the host and groups captions "
        "by length (shapes that depend on the batch), which one vmapped step cannot do per member"
    )
    provides = frozenset(PROVIDED)
    part_bounds = {
        "dropped_generated": PartBound(0.0, "the share of generated negatives dropped by alpha", statistic=True),
        "own_outscores": PartBound(
            0.0, "the share of generated negatives that outscore the caption they were made from", statistic=True
        ),
    }

    def __init__(
        self,
        model: AsclModel,
        loss: torch.nn.Module,
        generators: SampleGenerators,
        *,
        seed: int = 0,
        max_len: int = 64,
        shard_elements: int | None = 1 << 22,
    ):
        super().__init__()
        self.model, self.loss, self.generators = model, loss, generators
        self.seed, self.max_len, self.shard_elements = seed, max_len, shard_elements
        self.register_buffer("generated_batches", torch.zeros((), dtype=torch.long))

    # ------------------------------------------------------------------ building

    @classmethod
    def validate_config(cls, config: ExperimentConfig) -> None:
        """What the fusion scorer cannot use (module docstring)."""
        super().validate_config(config)
        settings = cls.method_settings(config)
        refuse_pooled_settings(
            config,
            "attends over every token and region and pools them itself (eq. 1-3): "
            "a pooled (GPO) encoder has no place in its fusion scorer",
        )
        stored = config.model.text.encoder == STORED
        if settings.noise_site == ENCODER_INPUT and not stored:
            raise ConfigError(
                "method.noise_site",
                settings.noise_site,
                f"encoder_input encodes the captions of stored text states again with the frozen model that "
                f"computed them: it needs model.text.encoder=precomp; the {config.model.text.encoder} encoder "
                f"encodes its input itself: use noise_site=input",
            )
        if stored and settings.noise_site != ENCODER_INPUT and settings.generator in ORDER_BLIND:
            raise ConfigError(
                "method.generator",
                settings.generator,
                "stored text states are not encoded again, and the fusion scorer's attention and "
                "means ignore order: a shuffle of them is a no-op; use another generator (mixture "
                "draws from the other four), noise_site=encoder_input (the frozen model encodes the "
                "shuffled input again), or model.text.encoder=bigru or bert",
            )
        if settings.cutoff_rows >= config.model.text.max_len:
            raise ConfigError(
                "method.cutoff_rows",
                settings.cutoff_rows,
                f"fewer than model.text.max_len ({config.model.text.max_len}) tokens: token cutoff "
                f"zeroes that many tokens of a caption",
            )
        if config.model.embed_dim % settings.heads:
            raise ConfigError(
                "model.embed_dim",
                config.model.embed_dim,
                f"the fusion splits D into method.heads = {settings.heads} heads: a multiple of {settings.heads}",
            )
        if settings.noise_site == "features" and settings.generator == "shuffle":
            raise ConfigError(
                "method.generator",
                settings.generator,
                "a shuffle of encoded token features is a no-op for the fusion scorer (its attention "
                "and means ignore order): use noise_site=input, where BERT's position embeddings "
                "(or the BiGRU) see the new order, or another generator",
            )

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> AsclMethod:
        settings, model_config = cls.method_settings(config), config.model
        spec = text_encoder_spec(model_config.text)
        model = AsclModel.build(
            feature_dim=context.feature_dim,
            vocab_size=context.vocab_size,
            embed_dim=model_config.embed_dim,
            heads=settings.heads,
            u1=settings.u1,
            cross_attention=settings.cross_attention,
            text=spec,
        )
        max_len, stored = model_config.text.max_len, spec.encoder == STORED
        if stored:  # states framed by [CLS] / [SEP]; positives edit position ids, then frame them
            start, end, continuation, protect_ends = None, None, frozenset(), True
            positive_max_len = max_len - 2
            order_seen = settings.noise_site == ENCODER_INPUT  # the frozen model sees a shuffle
            mixture = MIXTURE_OF if order_seen else tuple(m for m in MIXTURE_OF if m not in ORDER_BLIND)
        else:
            tokenizer = context.vocab
            if tokenizer is None and spec.encoder == "bert":  # bare builds (unit tests): the model's own tokenizer
                from itrlab.data.tokenizers import PretrainedTokenizer

                tokenizer = PretrainedTokenizer(spec.bert_path)
            start, end, continuation = frame_ids(tokenizer)
            protect_ends, positive_max_len, mixture = start is not None and end is not None, max_len, MIXTURE_OF
        generators = SampleGenerators(
            NegativeGenerator(
                settings.generator,
                settings.sigma,
                settings.p,
                settings.cutoff_rows,
                settings.cutoff_cols,
                protect_ends=protect_ends,
                sigma_units=settings.sigma_units,
                mixture_of=mixture,
            ),
            PositiveGenerator(settings.positives, start, end, max_len=positive_max_len, continuation_ids=continuation),
            settings.noise_site,
            stored_stride=max_len + 1 if stored else None,
        )
        method = cls(
            model,
            build_task_loss(config.loss),
            generators,
            seed=config.seed,
            max_len=model_config.text.max_len,
            shard_elements=settings.shard_elements,
        )
        method.text_lr = model_config.text.lr
        return method

    def prepare(self, context: BuildContext) -> None:
        """GloVe rows (BiGRU), and the training captions of each image for type-II positives (token ids, or
        the training split's stored states); at ``encoder_input`` with a loss that reads type-I negatives, the
        frozen text model of the stored states and the training captions' token ids."""
        super().prepare(context)
        train, vocab = context.train, context.vocab
        if train is None or vocab is None:
            return
        if isinstance(vocab, TextFeatures):
            states = vocab.open_split(train.split, train.captions, self.max_len)
            self.generators.pool = StatePool(states, train.captions_per_image, self.generators.stored_stride)
            if self.generators.noise_site == ENCODER_INPUT and I2T_GENERATED_NEG in self.loss.requires:
                self.generators.reencoder = InputReencoder.for_split(vocab, states, train.captions)
        else:
            self.generators.pool = CaptionPool(train.captions, train.captions_per_image, vocab, self.max_len)

    @classmethod
    def cost_note(cls, config: ExperimentConfig) -> str:
        """``reencoded`` where the step encodes its type-I negatives with the frozen text model (about twice the
        stored path's step on Flickr8K's shapes: docs/papers/ascl.md#noise-at-the-encoders-input)."""
        reencodes = cls.method_settings(config).noise_site == ENCODER_INPUT
        return "reencoded" if reencodes and I2T_GENERATED_NEG in task_loss_requires(config.loss) else ""

    def bind_made_up_inputs(self, batch: Batch) -> None:
        """At ``encoder_input``, unless the training data bound them: the packaged MiniLM over made-up token ids
        of the batch's captions (their count and length), so that a step on made-up inputs encodes as a run's."""
        reencoder = self.generators.reencoder
        if self.generators.noise_site != ENCODER_INPUT or I2T_GENERATED_NEG not in self.loss.requires:
            return
        if reencoder is None or self.generators.made_up:
            captions = int(batch.caption_ids.max()) + 1
            if reencoder is None or len(reencoder.ids) < captions or reencoder.ids.shape[1] < batch.tokens.shape[1]:
                with torch.device("cpu"):  # a real model, also where the step is counted on the meta device
                    self.generators.reencoder = InputReencoder.made_up(captions, batch.tokens.shape[1])
                self.generators.made_up = True

    # ------------------------------------------------------------------ training

    def _generator(self) -> torch.Generator:
        """This batch's random stream: (seed, batch counter); the counter is a checkpointed buffer."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + int(self.generated_batches))
        self.generated_batches += 1
        return generator

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        """``i2t`` (B, B) and the generated-sample matrices that ``needs`` names (B, B or B, N each)."""
        needs = set(needs)
        unknown = needs - PROVIDED
        if unknown:
            raise ValueError(
                f"AsCL scores image-caption pairs and generated captions; it has no {', '.join(sorted(unknown))}"
            )
        regions, global_feats = self.model.encode_images(batch.images)
        generator = self._generator() if needs & set(GENERATED) else None
        tokens, lengths, size = batch.tokens, batch.lengths, len(batch)
        negative = bool(needs & {I2T_GENERATED_NEG, I2T_POS_GENERATED_NEG})
        ids = self.generators.caption_ids(batch.caption_ids, tokens.shape[1]) if negative else None
        if needs & {I2T_POS, I2T_POS_GENERATED_NEG}:  # T⁺ joins T: [T; T⁺]
            plus, plus_lengths, plus_ids = self.generators.positive_samples(
                tokens, lengths, batch.image_ids, batch.caption_ids, generator
            )
            tokens, lengths = stack_padded(tokens, plus), torch.cat([lengths, plus_lengths])
            ids = stack_padded(ids, plus_ids) if ids is not None and plus_ids is not None else None
        clean, noisy = self.score_captions(regions, global_feats, tokens, lengths, negative, generator, ids)
        wanted = {I2T_GENERATED_NEG: (noisy, 0), I2T_POS: (clean, size), I2T_POS_GENERATED_NEG: (noisy, size)}
        extras = {name: scores[:, start : start + size] for name, (scores, start) in wanted.items() if name in needs}
        return Similarities(i2t=clean[:, :size], image_ids=batch.image_ids, extras=extras)

    def score_captions(
        self,
        regions: Tensor,
        global_feats: Tensor,
        tokens: Tensor,
        lengths: Tensor,
        negative: bool,
        generator: torch.Generator | None,
        ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Scores (I, n) of the images against the captions and, with ``negative``, against their type-I
        negatives (I, n). Captions go in runs of similar length (:func:`length_buckets`), each run and
        its negatives through one text-encoder call and one scorer call, padded to the run's longest.
        ``ids`` (n, L): the captions' token ids, for negatives at ``encoder_input``."""
        clean, noisy, index = [], [], []
        for run in length_buckets(lengths):
            run = run.to(lengths.device)
            run_lengths = lengths[run]
            width = int(run_lengths.max())
            run_tokens = tokens[run, :width]
            run_ids = ids[run.to(ids.device), :width] if ids is not None else None
            words, perturbed = self.generators.encode(self.model, run_tokens, run_lengths, negative, generator, run_ids)
            if perturbed is not None:
                words, run_lengths = torch.cat([words, perturbed]), torch.cat([run_lengths, run_lengths])
            scores = self.model.pair_scores(regions, global_feats, words, run_lengths, max_elements=None)
            clean.append(scores[:, : len(run)])
            noisy.append(scores[:, len(run) :])
            index.append(run)
        inverse = torch.argsort(torch.cat(index))
        return torch.cat(clean, dim=1)[:, inverse], torch.cat(noisy, dim=1)[:, inverse] if negative else None

    # ------------------------------------------------------------------ evaluation

    def encode_split(
        self, split: PrecompSplit, vocab: Vocabulary, batch_size: int
    ) -> tuple[tuple[Tensor, Tensor], Tensor, Tensor]:
        """(``V`` (N, K, D), ``G`` (N, F)), ``W`` (cpi·N, L, D) and lengths: every item encoded alone."""
        return encode_split_features(
            self, split, vocab, batch_size, self.max_len, self.model.encode_images, self.model.encode_captions
        )

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        images, words, lengths = self.encode_split(split, vocab, batch_size)
        return sharded_score_fn(self.model.pair_scores, images, words, lengths, self.shard_elements)


__all__ = ["AsclMethod", "AsclSettings"]
