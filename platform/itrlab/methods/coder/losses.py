"""CODER's losses: diversity-sensitive contrastive learning (DCL, M-DCL) and PGC (C eq. 3-7).

Equations refer to Wang et al., "CODER" (C = main paper, S = supplement; ``docs/papers/coder.md``
§A2-A4). Every loss reads only similarity matrices and logits (docs/architecture.md, "Contracts"): the method
owns the momentum encoders, queues and prototypes and hands their scores in ``Similarities``.

Inputs. ``B`` batch pairs; ``M`` memory entries; ``K`` clusters. Memory entries are pair-aligned:
entry ``m`` of the caption memory and entry ``m`` of the image memory come from the same pair, so
one id vector serves both. Spec A3's memory is the ``B`` momentum keys of the batch, then the two
queues; with the keys first, ``i2t_momentum_pos[n] == i2t_memory[n, n]`` (the anchor's own key is
masked in the memory as a same-image entry and enters only as the positive). The losses detach
nothing but the diversity: the method scores the memory with detached momentum embeddings.

=========================  ======  ===================================================================
name                       shape   meaning
=========================  ======  ===================================================================
``i2t``                    (B, B)  ``S(v_n, w_q)``: online images vs online captions (a field)
``image_ids``              (B,)    image id of pair ``n``, ``>= 0`` (a field)
``i2t_memory``             (B, M)  ``S(v_n, w̃_m)``: image anchor ``n`` vs memory caption ``m``
``t2i_memory``             (B, M)  ``S(w_n, ṽ_m)``: caption anchor ``n`` vs memory image ``m``
``memory_image_ids``       (M,)    image id of memory entry ``m``; ``-1`` = empty or invalid slot
``i2t_momentum_pos``       (B,)    ``S(v_n, w̃_n)``: image anchor vs its own caption's momentum key
``t2i_momentum_pos``       (B,)    ``S(w_n, ṽ_n)``: caption anchor vs its own image's momentum key
``image_cluster_logits``   (B, K)  ``P^C v^C_n`` (PGC, before the softmax; with a temperature ``cos(v^C_n, p_k)/τ``)
``caption_cluster_logits`` (B, K)  ``P^C w^C_n`` (or ``cos(w^C_n, p_k)/τ``)
``cluster_labels``         (B,)    pseudo-label ``z_n`` (integer); ``-1`` = no label yet
=========================  ======  ===================================================================

Negatives (docs/papers/coder.md §A2, A3 "Masks"). The negatives ``N_n`` of an anchor are the entries with another
image id: in the batch ``image_ids[q] != image_ids[n]`` (never the diagonal), in the memory
``memory_image_ids[m] not in {-1, image_ids[n]}``. Same-image entries (sibling captions, the image
queue's repeats, the anchor's own momentum key) and invalid slots are neither positives nor
negatives: they are left out of the sums **and** of the diversity estimates.

Diversity (C eq. 3; S eq. 7-8; :func:`diversity`), per anchor, under stop-gradient:
``SD_n`` = the standard deviation of the anchor's negative scores (S eq. 7's missing square
restored), clamped at ``1e-6``; ``d_n = 1 / sigmoid(eps / SD_n)``; ``div_n = d_n / max_m d_m`` over
the anchors of the call. ``ent`` puts ``H_n = -Σ_{q∈N_n} P_nq log2 P_nq`` in place of ``SD_n``, with
``P`` the softmax over the anchor's positive and its negatives (eq. 8's sum over all ``Q`` compared
samples, masked entries removed); the positive is ``S_nn`` for the batch and the momentum key for
the memory. An anchor with no negative gets ``div = 1``; ``none`` gives 1 everywhere. With memory
("MB", docs/papers/coder.md §A3): ``div_n = ½(div^batch_n + div^mem_n)``, each max-normalised first.

Per direction (image anchors, rows; caption anchors, columns of ``i2t`` / rows of ``t2i_memory``),
with the positive score ``P_n`` and ``T_n = μ·div_n``, the mean over the anchors of one of three readings
of the per-anchor term (``reading``; docs/papers/coder.md#three-readings-of-the-dcl-equation)::

    printed           μ·log(1 + Σ_{q∈N_n} exp((S_nq − γ)/T_n)) − μ·log(max(1 + P_n, 1e-6))
    infonce           μ·log(1 + Σ_{q∈N_n} exp((S_nq − P_n + γ)/T_n))
    multi_similarity  μ·log(1 + Σ_{q∈N_n} exp((S_nq − γ)/T_n)) + (1/α)·log(1 + exp(−α(P_n − γ)))

``printed`` is C eq. 4-5 and S eq. 9 as printed, ``(μ/N) Σ_n [log(Σ_{q≠n} exp(·) + 1) − log(S_nn + 1)]``:
the positive's gradient, ``μ/(1 + P_n)`` (0.077 at μ = 0.1, P_n = 0.3), against up to ``1/div_n`` on the
negatives together. ``infonce`` reads the "+1" as the positive's own term with the log divided through by
it, γ a margin the positive must clear (with ``div = 1``: at ``γ = 0`` μ times ConVSE's l_CSN at τ = μ, and
as ``μ → 0`` VSE++'s max of hinges at margin γ; a negative γ gives the other sign). ``multi_similarity``
reads the negative term as the multi-similarity loss's (Wang et al., CVPR 2019:
``(1/β)·log(1 + Σ exp(β(S − λ)))`` with ``β = 1/T_n``, ``λ = γ``) and adds that loss's positive term over
the one positive ``P_n`` (its pair mining left out). In every reading ``div_n`` divides the logits inside the
first log, where eq. 5 puts it (never the multi-similarity positive term), and same-image entries are in
neither term.

``dcl_i`` (eq. 4, "IE"): ``div = 1``, in-batch, ``P_n = S_nn``. ``dcl`` (eq. 5 = S eq. 9, "EE"):
the same with ``div``; ``memory_div=True`` ("MB") averages in the memory diversity. ``mdcl`` (eq. 6,
docs/papers/coder.md §A3 reading): the memory scores as candidates, ``P_n`` the momentum key (``positive="momentum"``)
or ``S_nn`` (``"online"``, docs/papers/coder.md §A7.7). Each loss is ``l(V→W) + l(W→V)``, each the mean of its
anchors' terms; parts ``i2t`` / ``t2i``. ``pgc`` (eq. 7): cross-entropy of both
modalities' cluster logits against ``cluster_labels``, each a mean over the batch (unlabelled
pairs add 0 and still count in ``B``); parts ``image`` / ``caption`` / ``labelled``.
"""

from __future__ import annotations

import math
from typing import ClassVar, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from itrlab.losses.base import (
    LossOutput,
    RetrievalLoss,
    Similarities,
    check_inputs,
    masked_logsumexp,
    masked_sum,
    negative_mask,
    positive_scores,
)
from itrlab.losses.registry import register_loss
from itrlab.methods.coder.loss_settings import MS_ALPHA, Diversity, Eps, Gamma, MdclPositive, Mu, Reading  # noqa: F401  (the settings' types)

I2T_MEMORY = "i2t_memory"
T2I_MEMORY = "t2i_memory"
MEMORY_IMAGE_IDS = "memory_image_ids"
I2T_MOMENTUM_POS = "i2t_momentum_pos"
T2I_MOMENTUM_POS = "t2i_momentum_pos"
MEMORY_SCORES = (I2T_MEMORY, T2I_MEMORY, MEMORY_IMAGE_IDS)
MOMENTUM_POSITIVES = (I2T_MOMENTUM_POS, T2I_MOMENTUM_POS)
IMAGE_CLUSTER_LOGITS = "image_cluster_logits"
CAPTION_CLUSTER_LOGITS = "caption_cluster_logits"
CLUSTER_LABELS = "cluster_labels"

DIVERSITY_KINDS = get_args(Diversity)
READINGS = get_args(Reading)
MIN_SPREAD = 1e-6  # clamp of SD_n / H_n (docs/papers/coder.md §A2)
MIN_POSITIVE = 1e-6  # clamp of 1 + S_nn (docs/papers/coder.md §A2)


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


# --------------------------------------------------------------------------- diversity


def diversity(scores: Tensor, valid_mask: Tensor, kind: str, eps: float, positive: Tensor | None = None) -> Tensor:
    """(A,) diversity ``div_n`` of each anchor (row) from its negative scores (C eq. 3; S eq. 7-8).

    Args:
        scores: (A, Q) anchor ``n`` vs candidate ``q``.
        valid_mask: (A, Q) bool, ``True`` at the anchor's negatives (the only entries read, apart
            from ``positive``).
        kind: ``"std"`` (SD of the negatives), ``"ent"`` (entropy in place of SD) or ``"none"``.
        eps: ε > 0 of ``d_n = 1 / sigmoid(ε / SD_n)``.
        positive: (A,) the anchor's positive score; ``ent`` adds it to the softmax's normaliser.

    Returns:
        ``d_n / max_m d_m`` over the anchors with negatives, 1 for an anchor without (and for
        every anchor with ``kind="none"``); in (0.5, 1], detached (stop-gradient).
    """
    _check_choice("div", kind, DIVERSITY_KINDS)
    scores = scores.detach()
    if kind == "none":
        return scores.new_ones(scores.shape[0])
    count = valid_mask.sum(dim=1)
    has_negative = count > 0
    if kind == "std":  # sqrt(E[S²] − E[S]²), computed as the centred (equal, stabler) form
        mean = masked_sum(scores, valid_mask, dim=1) / count.clamp(min=1)
        spread = (masked_sum((scores - mean.unsqueeze(1)) ** 2, valid_mask, dim=1) / count.clamp(min=1)).sqrt()
    else:
        allowed = valid_mask if positive is None else torch.cat([valid_mask, torch.ones_like(valid_mask[:, :1])], dim=1)
        logits = scores if positive is None else torch.cat([scores, positive.detach().unsqueeze(1)], dim=1)
        log_p = scores - masked_logsumexp(logits, allowed, dim=1).unsqueeze(1)
        spread = -masked_sum(log_p.exp() * log_p, valid_mask, dim=1) / math.log(2)
    d = 1.0 / torch.sigmoid(eps / spread.clamp(min=MIN_SPREAD))  # d in [1, 2)
    d = torch.where(has_negative, d, torch.ones_like(d))
    return torch.where(has_negative, d / d.max(), torch.ones_like(d))


def averaged_diversity(batch_div: Tensor, memory_div: Tensor) -> Tensor:
    """``½(div^batch + div^mem)``, each already max-normalised (docs/papers/coder.md §A3, C text after eq. 6)."""
    return 0.5 * (batch_div + memory_div)


# --------------------------------------------------------------------------- memory inputs


def memory_negative_mask(image_ids: Tensor, memory_image_ids: Tensor) -> Tensor:
    """(B, M) bool: ``True`` where memory entry ``m`` is a valid slot of another image than pair ``n``."""
    return (memory_image_ids.unsqueeze(0) >= 0) & (memory_image_ids.unsqueeze(0) != image_ids.unsqueeze(1))


def memory_scores(sims: Similarities, name: str) -> Tensor:
    """The (B, M) memory similarities ``name``, checked against the batch and ``memory_image_ids``."""
    scores, ids = sims.get(name), sims.get(MEMORY_IMAGE_IDS)
    if ids.dim() != 1 or scores.dim() != 2 or tuple(scores.shape) != (sims.batch_size, ids.shape[0]):
        raise ValueError(
            f"{name} must have shape (B, M) = ({sims.batch_size}, {ids.shape[0]}) to match i2t and "
            f"{MEMORY_IMAGE_IDS} {tuple(ids.shape)}, got {tuple(scores.shape)}"
        )
    return scores


def momentum_positive(sims: Similarities, name: str) -> Tensor:
    """The (B,) scores of each anchor with its own momentum key, shape-checked."""
    scores = sims.get(name)
    if tuple(scores.shape) != (sims.batch_size,):
        raise ValueError(f"{name} must have shape ({sims.batch_size},), got {tuple(scores.shape)}")
    return scores


def anchor_diversities(sims: Similarities, kind: str, eps: float, use_memory: bool) -> tuple[Tensor, Tensor]:
    """(B,) diversities of the image anchors and of the caption anchors (docs/papers/coder.md §A2; A3 with
    ``use_memory``)."""
    scores, negatives = sims.i2t, negative_mask(sims.image_ids)
    positive = positive_scores(scores)
    image = diversity(scores, negatives, kind, eps, positive)
    caption = diversity(scores.T, negatives.T, kind, eps, positive)
    if not use_memory or kind == "none":
        return image, caption
    memory_negatives = memory_negative_mask(sims.image_ids, sims.get(MEMORY_IMAGE_IDS))
    keys = [momentum_positive(sims, n) if sims.has(n) else None for n in MOMENTUM_POSITIVES]
    image_mem = diversity(memory_scores(sims, I2T_MEMORY), memory_negatives, kind, eps, keys[0])
    caption_mem = diversity(memory_scores(sims, T2I_MEMORY), memory_negatives, kind, eps, keys[1])
    return averaged_diversity(image, image_mem), averaged_diversity(caption, caption_mem)


def log_one_plus_sum_exp(logits: Tensor, negatives: Tensor) -> Tensor:
    """(A,) ``log(1 + Σ_{q: negatives} exp(logits_q))`` per row: the ``1`` a zero logit that is always
    allowed, so that a row without negatives gives 0."""
    one = torch.ones_like(negatives[:, :1])
    return masked_logsumexp(
        torch.cat([torch.zeros_like(logits[:, :1]), logits], dim=1), torch.cat([one, negatives], dim=1), dim=1
    )


def dcl_term(
    positive: Tensor,
    scores: Tensor,
    negatives: Tensor,
    mu: float,
    gamma: float,
    div: Tensor,
    reading: str = "printed",
    alpha: float = MS_ALPHA,
) -> Tensor:
    """(A,) per-anchor DCL term in one of its three readings (module docstring; C eq. 4-5, S eq. 9).

    ``printed``: ``μ·[log(1 + Σ_neg exp((S − γ)/(μ·div_n))) − log(1 + P_n)]``, ``1 + P_n`` clamped at
    ``1e-6``; ``infonce``: ``μ·log(1 + Σ_neg exp((S − P_n + γ)/(μ·div_n)))``; ``multi_similarity``: the
    printed negative term plus ``(1/α)·log(1 + exp(−α(P_n − γ)))``. ``positive`` (A,), ``scores`` /
    ``negatives`` (A, Q), ``div`` (A,). An anchor without negatives is finite in every reading.
    """
    _check_choice("reading", reading, READINGS)
    temperature = mu * div.unsqueeze(1)
    if reading == "infonce":
        return mu * log_one_plus_sum_exp((scores - positive.unsqueeze(1) + gamma) / temperature, negatives)
    push = mu * log_one_plus_sum_exp((scores - gamma) / temperature, negatives)
    if reading == "multi_similarity":
        return push + F.softplus(-alpha * (positive - gamma)) / alpha
    return push - mu * torch.log((1 + positive).clamp(min=MIN_POSITIVE))


def diversity_inputs(div: str, memory_div: bool) -> tuple[str, ...]:
    """What the diversity reads beyond the batch: the memory banks for MB (and the momentum positives for
    the entropy); nothing without ``memory_div`` or with ``div="none"``."""
    if not memory_div or div == "none":
        return ()
    return MEMORY_SCORES + (MOMENTUM_POSITIVES if div == "ent" else ())


# --------------------------------------------------------------------------- losses


@register_loss
class DCLLoss(RetrievalLoss):
    """DCL (C eq. 5 = S eq. 9, Table 3 "EE"): DCL-I with each anchor's temperature ``μ·div_n``.

    In-batch, positive ``S_nn``, negatives of other image ids; ``div`` under stop-gradient (module
    docstring). Reduction: mean over anchors × μ, both directions summed.

    Args:
        mu: μ > 0 (paper 0.1).
        gamma: γ, the score offset (paper 0.3).
        reading: ``"printed"`` (C eq. 4-5, default), ``"infonce"`` or ``"multi_similarity"`` (module docstring).
        alpha: α > 0 of the multi-similarity positive term (2); read by ``reading="multi_similarity"`` only.
        eps: ε > 0 of the diversity (paper 0.1).
        div: ``"std"`` (C eq. 3, default), ``"ent"`` (S eq. 8) or ``"none"`` (= ``dcl_i``).
        memory_div: Table 3 "MB": average the batch diversity with the memory diversity (docs/papers/coder.md §A3);
            reads ``i2t_memory``, ``t2i_memory``, ``memory_image_ids`` (and, for ``div="ent"``, the
            momentum positives). Ignored with ``div="none"``.
    """

    name = "dcl"
    reduction = "mean"
    requires: ClassVar[tuple[str, ...]] = ("i2t", "image_ids")

    def __init__(self, mu: float, gamma: float, reading: str, alpha: float, eps: float, div: str, memory_div: bool):
        super().__init__()
        self.mu, self.gamma, self.reading, self.alpha = mu, gamma, reading, alpha
        self.eps, self.div, self.memory_div = eps, div, memory_div
        self.requires = ("i2t", "image_ids") + diversity_inputs(div, memory_div)  # what this configuration reads

    @classmethod
    def reads(cls, settings) -> tuple[str, ...]:
        return ("i2t", "image_ids") + diversity_inputs(settings.div, settings.memory_div)

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores, negatives = sims.i2t, negative_mask(sims.image_ids)
        positive = positive_scores(scores)
        image_div, caption_div = anchor_diversities(sims, self.div, self.eps, self.memory_div)
        return (
            self.term(positive, scores, negatives, image_div),
            self.term(positive, scores.T, negatives.T, caption_div),
        )

    def term(self, positive: Tensor, scores: Tensor, negatives: Tensor, div: Tensor) -> Tensor:
        """(A,) :func:`dcl_term` of this loss's μ, γ, reading and α."""
        return dcl_term(positive, scores, negatives, self.mu, self.gamma, div, self.reading, self.alpha)

    def reading_repr(self) -> str:
        """The reading (and α with the multi-similarity one), for ``extra_repr``."""
        alpha = f", alpha={self.alpha}" if self.reading == "multi_similarity" else ""
        return f"reading={self.reading!r}{alpha}"

    def extra_repr(self) -> str:
        return (
            f"mu={self.mu}, gamma={self.gamma}, {self.reading_repr()}, eps={self.eps}, div={self.div!r}, "
            f"memory_div={self.memory_div}"
        )


@register_loss
class DCLInstanceLoss(DCLLoss):
    """DCL-I (C eq. 4, Table 3 "IE"): the diversity-insensitive DCL, i.e. ``dcl`` with ``div = 1``.

    Args:
        mu: μ > 0 (paper 0.1).
        gamma: γ (paper 0.3).
        reading, alpha: as ``dcl``.
    """

    name = "dcl_i"

    def __init__(self, mu: float, gamma: float, reading: str, alpha: float):
        super().__init__(mu=mu, gamma=gamma, reading=reading, alpha=alpha, div="none")

    @classmethod
    def reads(cls, settings) -> tuple[str, ...]:
        return ("i2t", "image_ids")

    def extra_repr(self) -> str:
        return f"mu={self.mu}, gamma={self.gamma}, {self.reading_repr()}"


@register_loss
class MemoryDCLLoss(DCLLoss):
    """M-DCL (C eq. 6; docs/papers/coder.md §A3): one DCL term per direction over the coupled memory banks.

    Image anchor ``v_n``: candidates ``i2t_memory[n]`` (the momentum batch keys and the caption
    queue), negatives those of another image id in a valid slot, positive ``S(v_n, w̃_n)`` =
    ``i2t_momentum_pos[n]`` (MoCo/ALBEF reading; ``positive="online"`` uses ``S_nn`` instead, spec
    A7.7). Caption anchors likewise with ``t2i_memory`` and ``t2i_momentum_pos``. ``div_n`` is the
    batch diversity, averaged with the memory diversity when ``memory_div`` (default, the text after
    eq. 6). Reduction: mean over anchors × μ, both directions summed.

    Args:
        mu, gamma, reading, alpha, eps, div: as ``dcl``.
        memory_div: ``div_n = ½(div^batch_n + div^mem_n)`` (default True) or the batch diversity.
        positive: ``"momentum"`` (default) or ``"online"``.
    """

    name = "mdcl"

    def __init__(
        self, mu: float, gamma: float, reading: str, alpha: float, eps: float, div: str, memory_div: bool, positive: str
    ):
        super().__init__(mu=mu, gamma=gamma, reading=reading, alpha=alpha, eps=eps, div=div, memory_div=memory_div)
        self.positive = positive
        self.requires = self.memory_inputs(div, memory_div, positive)

    @classmethod
    def reads(cls, settings) -> tuple[str, ...]:
        return cls.memory_inputs(settings.div, settings.memory_div, settings.positive)

    @staticmethod
    def memory_inputs(div: str, memory_div: bool, positive: str) -> tuple[str, ...]:
        names = ("i2t", "image_ids") + MEMORY_SCORES + diversity_inputs(div, memory_div)
        if positive == "momentum":
            names += MOMENTUM_POSITIVES
        return tuple(dict.fromkeys(names))

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        negatives = memory_negative_mask(sims.image_ids, sims.get(MEMORY_IMAGE_IDS))
        if self.positive == "momentum":
            image_pos, caption_pos = (momentum_positive(sims, n) for n in MOMENTUM_POSITIVES)
        else:
            image_pos = caption_pos = positive_scores(sims.i2t)
        image_div, caption_div = anchor_diversities(sims, self.div, self.eps, self.memory_div)
        return (
            self.term(image_pos, memory_scores(sims, I2T_MEMORY), negatives, image_div),
            self.term(caption_pos, memory_scores(sims, T2I_MEMORY), negatives, caption_div),
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, positive={self.positive!r}"


@register_loss
class PrototypeClusterLoss(RetrievalLoss):
    """PGC (C eq. 7; docs/papers/coder.md §A4): ``L = CE(P_v, z) + CE(P_w, z)`` with a shared prototype head.

    Reads ``image_cluster_logits`` / ``caption_cluster_logits`` (B, K) (``P^C v^C`` / ``P^C w^C``, or the cosines over
    a temperature the method's prototypes give; the softmax is inside the cross-entropy) and ``cluster_labels`` (B,),
    integer, ``-1`` (any negative) = no label yet. Each modality's term is a mean over the ``B`` pairs, an unlabelled
    pair adding 0 (a batch with no label gives 0 and a zero gradient, never NaN). No parameters. Parts: ``image``
    (``L^v``), ``caption`` (``L^w``) and ``labelled`` (fraction of pairs with a label).
    """

    name = "pgc"
    reduction = "mean"
    requires: ClassVar[tuple[str, ...]] = (IMAGE_CLUSTER_LOGITS, CAPTION_CLUSTER_LOGITS, CLUSTER_LABELS)

    def __init__(self) -> None:
        super().__init__()

    def forward(self, sims: Similarities) -> LossOutput:
        check_inputs(self, sims)
        labels = sims.get(CLUSTER_LABELS)
        if labels.is_floating_point() or labels.is_complex() or tuple(labels.shape) != (sims.batch_size,):
            raise ValueError(
                f"{CLUSTER_LABELS} must be integer of shape ({sims.batch_size},), "
                f"got {labels.dtype} {tuple(labels.shape)}"
            )
        labelled = labels >= 0
        target = torch.where(labelled, labels, torch.zeros_like(labels)).long()
        terms = []
        for name in (IMAGE_CLUSTER_LOGITS, CAPTION_CLUSTER_LOGITS):
            logits = sims.get(name)
            if logits.dim() != 2 or logits.shape[0] != sims.batch_size:
                raise ValueError(f"{name} must have shape ({sims.batch_size}, K), got {tuple(logits.shape)}")
            ce = F.cross_entropy(logits, target, reduction="none")
            terms.append(torch.where(labelled, ce, torch.zeros_like(ce)).mean())
        image, caption = terms
        return LossOutput(
            loss=image + caption,
            parts={
                "image": image.detach(),
                "caption": caption.detach(),
                "labelled": labelled.to(image.dtype).mean().detach(),
            },
        )


__all__ = [
    "CAPTION_CLUSTER_LOGITS",
    "CLUSTER_LABELS",
    "DIVERSITY_KINDS",
    "I2T_MEMORY",
    "I2T_MOMENTUM_POS",
    "IMAGE_CLUSTER_LOGITS",
    "MEMORY_IMAGE_IDS",
    "READINGS",
    "T2I_MEMORY",
    "T2I_MOMENTUM_POS",
    "DCLInstanceLoss",
    "DCLLoss",
    "MemoryDCLLoss",
    "PrototypeClusterLoss",
    "anchor_diversities",
    "averaged_diversity",
    "dcl_term",
    "log_one_plus_sum_exp",
    "diversity",
    "memory_negative_mask",
]
