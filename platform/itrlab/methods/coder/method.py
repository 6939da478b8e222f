"""CODER (Wang et al.): DCL, coupled momentum memory banks, the concept graph and PGC (C eq. 1-8).

The method owns every stateful part; the losses (``itrlab.methods.coder.losses``) only see similarities.

* Instance level (C eq. 1): the dual encoder of the config (``model``: GPO or mean pooling,
  BiGRU or BERT); its loss is the ``loss`` section (``vsepp`` = BTR, ``dcl_i`` = IE, ``dcl`` = EE,
  with ``memory_div: true`` = MB; ``reading``: eq. 4-5 as printed, in InfoNCE form or in multi-similarity
  form), weighted by λ (``method.lambda``, eq. 8; null: 3 for a DCL, 1 for BTR's VSE++, which is then plain
  VSE++).
* M-DCL (eq. 6; docs/papers/coder.md §A3): a momentum copy of the instance encoder (``momentum`` 0.995, every step)
  and a pair-aligned queue of ``queue_size`` momentum embeddings (:class:`MomentumQueue`). The
  memory is the batch's momentum keys, then the queue; same-image entries are never negatives.
  The M-DCL term's μ, γ, ε, diversity and memory diversity are ``mdcl_*`` (null: the instance DCL's); it
  reads the DCL equation as the instance loss does (``loss.reading``, ``loss.alpha``).
* Concepts (C §3.3; S eq. 4-6): ``concept_size`` words of the training captions split 7:2:1 by
  POS, their co-occurrence graph binarised at ``graph_eps``, a GCN over GloVe vectors, concept
  embeddings by attention (λ_c = ``concept_smooth``; unit concepts and batch-normalised queries, as
  CVSE, docs/papers/coder.md#collapse), the concept-level DCL (batch only, ``concept_div``,
  ``concept_mu/gamma/eps``; the instance DCL's reading). Queries (docs/papers/coder.md §A7.4): the image side
  pools its own region FC with the instance encoder's pooling module; the text side pools the instance text
  encoder's word features (under stop-gradient unless ``concept_text_gradient``) with a separate pooling and FC.
  Every step logs how far the branch is from collapse (attention top weight and entropy, the mean
  pairwise cosine of the concept embeddings).
* PGC (eq. 7; docs/papers/coder.md §A4): ``K`` clusters of the training pairs, reclustered each epoch from the
  second, on momentum embeddings (:class:`ClusterPrototypes`), classified by cosines over a
  temperature (``pgc_temperature``).
* Inference (§3.5): S = β·instance + (1−β)·concept (β = ``beta``), computed as one dense product
  of ``[√β·v̂^I ; √(1−β)·v̂^C]`` with the caption counterpart.

Every component switches from the config, so each row of Tables 2-4 and supplement Table 3 is a
config (``configs/sweeps/coder_*.yaml``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from itrlab.config import ExperimentConfig
from itrlab.config.checks import DataSummary
from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.errors import ConfigError
from itrlab.eval import ScoreFn, dense_score_fn
from itrlab.losses import LOSSES, LossOutput, Similarities, build_loss
from itrlab.losses.parts import PartBound
from itrlab.methods.base import MethodSettings, mark_reinitialised, task_loss_requires, union
from itrlab.methods.coder import losses as D
from itrlab.methods.coder.concepts import ConceptEmbedder, ConceptGCN, collapse_figures
from itrlab.methods.coder.kmeans import cluster_count_problem
from itrlab.methods.coder.memory import MomentumQueue
from itrlab.methods.coder.prototypes import ClusterPrototypes, Reset
from itrlab.methods.context import BuildContext
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.registry import register_method
from itrlab.models.ema import ema_update_, momentum_copy
from itrlab.models.pooling import MeanPooling, build_pooling
from itrlab.numbers import Flag, number


class CoderSettings(MethodSettings):
    """CODER's keys in the ``method`` section (defaults: the paper's, docs/papers/coder.md)."""

    name: Literal["coder"] = "coder"
    # λ of eq. 8, the weight of L^I_DCL; null: 3 (C §4.2) for a DCL instance loss, 1 for any other (BTR's VSE++)
    lambda_: number(gt=0, meaning="the weight λ of the instance loss") | None = Field(None, alias="lambda")
    momentum: number(ge=0, le=1, meaning="the momentum encoder's EMA momentum") = 0.995
    mdcl: bool = True
    queue_size: int = Field(4096, ge=1)
    mdcl_positive: D.MdclPositive = "momentum"
    # M-DCL's μ, γ, ε, diversity and memory diversity (eq. 6), typed as the loss's own parameters;
    # null: the instance DCL's (one L_DCL, C §3.2)
    mdcl_mu: D.Mu | None = None
    mdcl_gamma: D.Gamma | None = None
    mdcl_eps: D.Eps | None = None
    mdcl_div: D.Diversity | None = None
    mdcl_memory_div: Flag | None = None
    concepts: bool = True
    concept_size: int = Field(400, ge=3)  # g, split 7:2:1
    graph_eps: number(ge=0, le=1, meaning="the co-occurrence threshold ε_g of S eq. 5") = 0.3  # not DCL's eps
    graph_rescale: bool = False
    gcn_layers: int = Field(1, ge=1)
    concept_smooth: number(gt=0, meaning="the attention's inverse temperature λ_c of eq. 2") = 10.0
    # true: unit concepts ŷ (in the score and the sum) and a unit query in the score, q̂ W ŷᵀ (CVSE's);
    # false: eq. 2's plain product q W yᵀ over the GCN output, which saturates (docs/papers/coder.md#collapse)
    concept_attention_normalise: bool = True
    # batch: the concept queries batch-normalised before the score (CVSE's FC -> BatchNorm); none: as eq. 2
    concept_query_norm: Literal["batch", "none"] = "batch"
    # false: the caption concept query reads the text encoder's word features under stop-gradient, so the
    # concept-level losses train the concept branch only (C Fig. 2); true: they also train the text encoder
    concept_text_gradient: bool = False
    concept_div: D.Diversity = "std"
    # the concept-level DCL's μ, γ, ε (C §3.3), typed as the loss's own parameters; null: the instance DCL's
    concept_mu: D.Mu | None = None
    concept_gamma: D.Gamma | None = None
    concept_eps: D.Eps | None = None
    concept_both_ways: bool = False  # also L_DCL(W^C, V^C) (C double-counts it; docs/papers/coder.md §A5)
    word_vectors: Literal["glove", "random"] = "glove"
    beta: number(ge=0, le=1, meaning="the weight β of the instance similarity at inference") = 0.9
    pgc: bool = True
    K: int = Field(10000, ge=1)
    # τ of PGC's cosine classifier, cos(v^C, p_k)/τ (eq. 7 gives no scale; cosines alone keep the loss near
    # ln K); null: eq. 7's plain P^C v^C
    pgc_temperature: number(gt=0, meaning="the temperature τ of PGC's cosine classifier") | None = 0.1
    pgc_reset: Reset = "cluster_mean"  # where the prototypes restart after a reclustering
    kmeans_iterations: int = Field(20, ge=1)


def distinct_words(captions_file) -> int:
    """How many distinct words (itrlab's tokenizer) the captions of a ``*_caps.txt`` file hold."""
    from itrlab.data.vocab import tokenize

    with open(captions_file, encoding="utf-8", errors="replace") as f:
        return len({word for line in f for word in tokenize(line)})


PAPER_LAMBDA = 3.0  # λ of eq. 8 (C §4.2)
MDCL_KEYS = ("mu", "gamma", "eps", "div", "memory_div")
CONCEPT_DCL_KEYS = ("mu", "gamma", "eps")
# how the DCL equation is read (loss.reading, loss.alpha): one L_DCL (C §3.2), so the M-DCL and concept-level
# terms read it as the instance DCL does, and as printed when the instance loss is no DCL
READING_KEYS = ("reading", "alpha")


def instance_dcl(loss: nn.Module) -> D.DCLLoss | None:
    """The instance loss when it is a DCL (``dcl``, ``dcl_i``; behind a warm-up, the main loss), else None."""
    loss = getattr(loss, "main", loss)
    return loss if isinstance(loss, D.DCLLoss) else None


def instance_lambda(settings: CoderSettings, loss: nn.Module) -> float:
    """λ of eq. 8: ``method.lambda``, or when null 3 for a DCL instance loss and 1 (unweighted) for any
    other, so that the BTR row is plain VSE++."""
    if settings.lambda_ is not None:
        return settings.lambda_
    return PAPER_LAMBDA if instance_dcl(loss) is not None else 1.0


def check_dcl_nulls(settings: CoderSettings, loss_name: str, is_dcl: bool, term: str, keys: tuple[str, ...]) -> None:
    """ConfigError for a null ``method.<term>_<key>`` when the instance loss ``loss_name`` is not a DCL: null
    takes the instance DCL's value."""
    for key in keys:
        if getattr(settings, f"{term}_{key}") is None and not is_dcl:
            raise ConfigError(
                f"method.{term}_{key}",
                None,
                f"null takes the instance DCL's {key}, and the instance loss ({loss_name}) is not a DCL: give a value",
            )


def dcl_settings(settings: CoderSettings, loss: nn.Module, term: str, keys: tuple[str, ...]) -> dict:
    """The settings ``keys`` of the ``term`` DCL (``mdcl``, ``concept``): ``method.<term>_<key>``, a null
    taking the value of the instance DCL ``loss`` (as built); ConfigError when null has no instance DCL to take it
    from. The instance DCL's reading and α come with them (:data:`READING_KEYS`); without an instance DCL the
    loss's defaults, the equation as printed."""
    instance = instance_dcl(loss)
    check_dcl_nulls(settings, getattr(loss, "name", type(loss).__name__), instance is not None, term, keys)
    given = {key: getattr(settings, f"{term}_{key}") for key in keys}
    reading = {key: getattr(instance, key) for key in READING_KEYS} if instance is not None else {}
    return reading | {key: getattr(instance, key) if value is None else value for key, value in given.items()}


@register_method("coder")
class CoderMethod(DualEncoderMethod):
    name = "coder"
    settings = CoderSettings
    group_refusal = (
        "it keeps state outside its parameters (the momentum encoder's queues and the concept memory, "
        "updated after each step, and k-means prototypes re-clustered each epoch)"
    )
    # its evaluation embedding joins the instance embedding with the concept branch's (_joint): no reading of the
    # instance embedding before a projection head alone
    reads_prehead = False
    # the dual encoder's similarities, and the memory banks' (M-DCL, MB's memory diversity)
    provides = DualEncoderMethod.provides | frozenset(D.MEMORY_SCORES) | frozenset(D.MOMENTUM_POSITIVES)
    # PGC's cross-entropies (eq. 7) and the concept branch's collapse figures (concepts.collapse_figures);
    # DCL's terms (instance, mdcl, concept) can go below zero: no floor
    part_bounds = {
        **dict.fromkeys(
            ("pgc", "pgc_image", "pgc_caption"),
            PartBound(0.0, "ln K: uniform over the K clusters; 0 before the first clustering (epoch 1)"),
        ),
        "pgc_labelled": PartBound(
            0.0, "the share of pairs with a cluster label (0 before the first clustering)", statistic=True
        ),
        "pgc_prototype_cosine": PartBound(plateau="the prototypes' mean cosine; 1: all alike", statistic=True),
        **{
            f"attention_top_{side}": PartBound(plateau="1: one concept per sample (collapse)", statistic=True)
            for side in ("image", "caption")
        },
        **{
            f"attention_entropy_{side}": PartBound(
                0.0, "0: one concept per sample (collapse); ln g: uniform", statistic=True
            )
            for side in ("image", "caption")
        },
        **{
            f"concept_cosine_{side}": PartBound(plateau="1: all concept embeddings alike (collapse)", statistic=True)
            for side in ("image", "caption")
        },
    }

    @classmethod
    def validate_config(cls, config: ExperimentConfig) -> None:
        super().validate_config(config)
        settings = cls.method_settings(config)
        if cls.uses_memory(config, settings) and settings.queue_size % config.train.batch_size:
            raise ConfigError(
                "method.queue_size",
                settings.queue_size,
                f"must be a multiple of train.batch_size ({config.train.batch_size}): whole batches are enqueued",
            )
        if settings.pgc and not settings.concepts:
            raise ConfigError("method.pgc", True, "PGC classifies concept embeddings: it needs method.concepts=true")
        is_dcl = issubclass(LOSSES[config.loss.name], D.DCLLoss)  # the class: no loss is built to check a config
        if settings.mdcl:
            check_dcl_nulls(settings, config.loss.name, is_dcl, "mdcl", MDCL_KEYS)
        if settings.concepts:
            check_dcl_nulls(settings, config.loss.name, is_dcl, "concept", CONCEPT_DCL_KEYS)

    @staticmethod
    def uses_memory(config: ExperimentConfig, settings: CoderSettings) -> bool:
        """The momentum encoder and queues exist for the M-DCL term, or for the instance loss's
        memory diversity (MB: Table 3 row 3 has MB without M-DCL)."""
        return settings.mdcl or bool(set(task_loss_requires(config.loss)) & set(D.MEMORY_SCORES))

    @classmethod
    def check_data(cls, config: ExperimentConfig, summary: DataSummary) -> None:
        settings = cls.method_settings(config)
        pairs = summary.n_train_captions
        problem = cluster_count_problem(settings.K, pairs) if settings.pgc else None
        if problem:
            raise ConfigError("method.K", settings.K, problem)
        if cls.uses_memory(config, settings) and settings.queue_size > pairs:
            raise ConfigError(
                "method.queue_size", settings.queue_size, f"must be at most the number of training pairs ({pairs})"
            )
        captions = config.dataset.root / f"{config.dataset.splits.train}_caps.txt"
        if settings.concepts and captions.is_file():  # synthetic data not generated yet: checked in prepare
            words = distinct_words(captions)
            if settings.concept_size > words:
                raise ConfigError(
                    "method.concept_size",
                    settings.concept_size,
                    f"must be at most the number of distinct words of the training captions ({words})",
                )

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> CoderMethod:
        method = super().from_config(config, context)
        method.setup(cls.method_settings(config), context, config)
        return method

    def setup(self, settings: CoderSettings, context: BuildContext, config: ExperimentConfig) -> None:
        self.settings_ = settings
        dim = config.model.embed_dim
        self.instance_weight = instance_lambda(settings, self.loss)
        self.uses_memory_ = self.uses_memory(config, settings)
        if self.uses_memory_:
            self.momentum_model = momentum_copy(self.model)
            self.queue = MomentumQueue(settings.queue_size, dim)
        if settings.mdcl:
            self.mdcl_loss = build_loss(
                "mdcl", positive=settings.mdcl_positive, **dcl_settings(settings, self.loss, "mdcl", MDCL_KEYS)
            )
        if settings.concepts:
            self.concept_fc = nn.Linear(context.feature_dim, dim)
            self.text_concept_pool = build_pooling(config.model.text.pooling)
            self.text_concept_fc = nn.Linear(dim, dim)
            g = settings.concept_size
            gcn = ConceptGCN(torch.eye(g), torch.zeros(g, 50), dim, layers=settings.gcn_layers)
            self.concept_embedder = ConceptEmbedder(
                gcn,
                smooth=settings.concept_smooth,
                normalize_scores=settings.concept_attention_normalise,
                query_norm=settings.concept_query_norm,
            )
            self.concept_loss = build_loss(
                "dcl", div=settings.concept_div, **dcl_settings(settings, self.loss, "concept", CONCEPT_DCL_KEYS)
            )
        # the caption embedding and the concept query pool one projection of the mean stored state
        # (caption_features); a mean has no weights, so the two poolings are the same function
        self.pooled_once = bool(getattr(self.model.text_encoder, "mean_first", False)) and (
            not settings.concepts or isinstance(self.text_concept_pool, MeanPooling)
        )
        if settings.pgc:
            n_pairs = context.n_train_captions or settings.K
            self.prototypes = ClusterPrototypes(
                n_pairs,
                dim,
                settings.K,
                settings.kmeans_iterations,
                seed=config.seed,
                temperature=settings.pgc_temperature,
                reset=settings.pgc_reset,
            )
            self.pgc_loss = build_loss("pgc")
        self.eval_batch_size = config.eval.batch_size
        self._pending: tuple[Tensor, Tensor, Tensor] | None = None
        self._train_split: PrecompSplit | None = None
        self._vocab: Vocabulary | None = None

    # ------------------------------------------------------------------ data

    def prepare(self, context: BuildContext) -> None:
        """GloVe rows (instance text encoder), then the concept vocabulary, graph and word vectors."""
        super().prepare(context)
        self._train_split, self._vocab = context.train, context.vocab
        if not self.settings_.concepts or context.train is None:
            return
        from itrlab.methods.coder.concept_vocab import ConceptVocabulary, build_concept_vocabulary, cooccurrence_graph
        from itrlab.methods.coder.concepts import concept_word_vectors

        settings, captions = self.settings_, context.train.captions
        saved = context.run_dir / "concepts.json" if context.run_dir is not None else None
        if saved is not None and saved.is_file():  # a resumed run keeps the vocabulary it had
            vocabulary = ConceptVocabulary.load(saved)
        else:
            try:
                vocabulary = build_concept_vocabulary(captions, size=settings.concept_size)
            except ValueError as err:
                raise ConfigError("method.concept_size", settings.concept_size, str(err)) from None
            if saved is not None:
                vocabulary.save(saved)
        gcn = self.concept_embedder.gcn
        gcn.adjacency.copy_(
            cooccurrence_graph(captions, vocabulary, graph_eps=settings.graph_eps, rescale=settings.graph_rescale)
        )
        features, coverage = concept_word_vectors(vocabulary, source=settings.word_vectors)
        gcn.features.copy_(features)
        context.notes["concepts"] = {
            "concept_words": float(len(vocabulary)),
            "concept_glove_coverage": coverage,
            "concept_graph_edges": float((gcn.adjacency > 0).sum() - len(vocabulary)),
        }

    # ------------------------------------------------------------------ embeddings

    def image_concepts(
        self, images: Tensor, y: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Unit v^C (B, F) of eq. 2 (and the attention, (B, g)); the query (docs/papers/coder.md §A7.4) pools
        a separate region FC with the instance encoder's pooling module."""
        n_regions = images.new_full((images.size(0),), images.size(1), dtype=torch.long)
        query = self.model.image_encoder.pool(self.concept_fc(images), n_regions)
        return self._unit(self.concept_embedder(query, "image", y, return_weights=True), return_weights)

    def caption_concepts(
        self,
        tokens: Tensor,
        lengths: Tensor,
        y: Tensor | None = None,
        pooled_words: Tensor | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Unit w^C (B, F) of eq. 2 (and the attention); the query is a separate FC over the instance text
        encoder's word features pooled by a separate pooling (given, or computed from the tokens by
        :meth:`caption_features`)."""
        if pooled_words is None:
            pooled_words = self.caption_features(tokens, lengths)[1]
        query = self.text_concept_fc(pooled_words)
        return self._unit(self.concept_embedder(query, "text", y, return_weights=True), return_weights)

    def caption_features(self, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor | None]:
        """``(w^I (B, F), the caption concept query's pooled word features (B, F) or None without concepts)``
        from one pass of the text encoder; the concept query's under stop-gradient unless
        ``concept_text_gradient`` (docs/papers/coder.md#concept-queries).

        Over stored states with mean pooling (``pooled_once``) both are the mean state projected once
        (``StoredTextEncoder.pooled_word_features``: equal to pooling the projected tokens, about 15x fewer
        FLOPs); otherwise the word features are computed once and each side pools them."""
        encoder, settings = self.model.text_encoder, self.settings_
        if self.pooled_once:
            pooled = encoder.pooled_word_features(tokens, lengths)
            query = None if not settings.concepts else pooled if settings.concept_text_gradient else pooled.detach()
            return encoder.embed_pooled(pooled), query
        words = encoder.word_features(tokens, lengths)
        query = None
        if settings.concepts:
            query = self.text_concept_pool(
                words if settings.concept_text_gradient else words.detach(), lengths.to(words.device)
            )
        return encoder.pool_features(words, lengths), query

    @staticmethod
    def _unit(embedded: tuple[Tensor, Tensor], return_weights: bool) -> Tensor | tuple[Tensor, Tensor]:
        embedding, weights = F.normalize(embedded[0], dim=-1), embedded[1]
        return (embedding, weights) if return_weights else embedding

    # ------------------------------------------------------------------ training

    def step(self, batch: Batch, needs: Iterable[str] = ()) -> tuple[LossOutput, Similarities]:
        """Eq. 8: ``λ·L^I + L^I_M-DCL + L^C_DCL + L_PGC`` (each switchable); parts name each term."""
        settings = self.settings_
        caption_emb, pooled_words = self.caption_features(batch.tokens, batch.lengths)  # one text encoder pass
        image_emb = self.model.encode_images(batch.images)
        wanted = set(union(needs, getattr(self.loss, "requires", ())))
        sims = self.similarities(image_emb, caption_emb, batch.image_ids, bool(wanted & {"i2i", "t2t"}))
        if self.uses_memory_:
            sims = sims.with_extras(**self.memory_extras(batch, image_emb, caption_emb))
        instance = self.loss(sims)
        total = self.instance_weight * instance.loss
        parts = {"instance": instance.loss.detach()}
        if settings.mdcl:
            mdcl = self.mdcl_loss(sims).loss
            total, parts["mdcl"] = total + mdcl, mdcl.detach()
        if settings.concepts:
            y = self.concept_embedder.concepts()  # one GCN pass for both sides
            image_c, image_a = self.image_concepts(batch.images, y, return_weights=True)
            caption_c, caption_a = self.caption_concepts(
                batch.tokens, batch.lengths, y, pooled_words, return_weights=True
            )
            parts.update(
                collapse_figures(image_c, image_a, "image") | collapse_figures(caption_c, caption_a, "caption")
            )
            concept_sims = Similarities(image_c @ caption_c.T, batch.image_ids)
            concept = self.concept_loss(concept_sims).loss
            if settings.concept_both_ways:
                concept = concept + self.concept_loss(Similarities(concept_sims.i2t.T, batch.image_ids)).loss
            total, parts["concept"] = total + concept, concept.detach()
            if settings.pgc:
                pgc = self.pgc_loss(
                    concept_sims.with_extras(
                        **{
                            D.IMAGE_CLUSTER_LOGITS: self.prototypes.logits(image_c),
                            D.CAPTION_CLUSTER_LOGITS: self.prototypes.logits(caption_c),
                            D.CLUSTER_LABELS: self.prototypes.labels_of(batch.caption_ids),
                        }
                    )
                )
                total, parts["pgc"] = total + pgc.loss, pgc.loss.detach()
                parts.update(
                    pgc_image=pgc.parts["image"],
                    pgc_caption=pgc.parts["caption"],
                    pgc_labelled=pgc.parts["labelled"],
                    pgc_prototype_cosine=self.prototypes.mean_cosine(),
                )
        return LossOutput(total, parts), sims

    @torch.no_grad()
    def memory_extras(self, batch: Batch, image_emb: Tensor, caption_emb: Tensor) -> dict[str, Tensor]:
        """The batch's momentum keys (kept to enqueue after the step), then the queue (docs/papers/coder.md §A3)."""
        was_training = self.momentum_model.training
        self.momentum_model.train(self.training)
        key_images, key_captions = self.momentum_model(batch.images, batch.tokens, batch.lengths)
        self.momentum_model.train(was_training)
        self._pending = (key_images, key_captions, batch.image_ids)
        memory_images = torch.cat([key_images, self.queue.images])
        memory_captions = torch.cat([key_captions, self.queue.captions])
        return {
            D.I2T_MEMORY: image_emb @ memory_captions.T,
            D.T2I_MEMORY: caption_emb @ memory_images.T,
            D.MEMORY_IMAGE_IDS: torch.cat([batch.image_ids, self.queue.image_ids]),
            D.I2T_MOMENTUM_POS: (image_emb * key_captions).sum(-1),
            D.T2I_MOMENTUM_POS: (caption_emb * key_images).sum(-1),
        }

    @torch.no_grad()
    def after_step(self, step: int, total_steps: int) -> None:
        """Momentum update of the key encoder, then the batch's keys into the queue (MoCo's order)."""
        if not self.uses_memory_:
            return
        ema_update_(self.momentum_model, self.model, self.settings_.momentum)
        if self._pending is not None:
            self.queue.enqueue(*self._pending)
            self._pending = None

    def set_epoch(self, epoch: int) -> None:
        """PGC: recluster the training pairs before every epoch from the second (once per epoch)."""
        super().set_epoch(epoch)
        settings = self.settings_
        if (
            settings.pgc
            and epoch >= 2
            and int(self.prototypes.clustered_epoch) != epoch
            and self._train_split is not None
        ):
            encoder = self.momentum_model if self.uses_memory_ else self.model
            images, captions = self.encode_split(
                self._train_split, self._vocab, self.eval_batch_size, encoder.encode_images, encoder.encode_captions
            )
            per_caption = images.repeat_interleave(self._train_split.captions_per_image, dim=0)
            y = self.concept_embedder.concepts()  # the prototypes score concept embeddings: start them there
            image_c, caption_c = self.encode_split(
                self._train_split,
                self._vocab,
                self.eval_batch_size,
                lambda b: self.image_concepts(b, y),
                lambda t, n: self.caption_concepts(t, n, y),
            )
            self.prototypes.recluster(
                per_caption,
                captions,
                epoch,
                image_c.repeat_interleave(self._train_split.captions_per_image, dim=0),
                caption_c,
            )
            mark_reinitialised(self.prototypes.prototypes.weight)  # Adam's moments of the old ids mean nothing now

    # ------------------------------------------------------------------ evaluation

    def _joint(self, instance: Tensor, concept: Callable[[Tensor], Tensor]) -> Tensor:
        """``[√β·v̂ ; √(1−β)·v̂^C]`` (β = 1 without concepts: ``instance`` alone)."""
        beta = self.settings_.beta if self.settings_.concepts else 1.0
        if beta == 1.0:
            return instance
        concepts = concept(self.concept_embedder.concepts())
        return torch.cat([math.sqrt(beta) * instance, math.sqrt(1 - beta) * concepts], 1)

    def embed_images(self, images: Tensor) -> Tensor:
        """``[√β·v̂^I ; √(1−β)·v̂^C]`` of a batch of images."""
        return self._joint(self.model.encode_images(images), lambda y: self.image_concepts(images, y))

    def embed_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """The caption counterpart of :meth:`embed_images`."""
        return self._joint(
            self.model.encode_captions(tokens, lengths), lambda y: self.caption_concepts(tokens, lengths, y)
        )

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        return dense_score_fn(*self.embed_split(split, vocab, batch_size))
