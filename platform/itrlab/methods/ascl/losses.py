"""AsCL: the asymmetry-sensitive contrastive loss (AsCL eq. 5-7) and its "w triplet" variant.

Equations refer to Gong et al., "AsCL" (``docs/papers/ascl.md`` §B2, §B5). A batch holds ``B``
pairs ``(I_i, T_i)``; the method also generates, per caption, a type-I negative ``T⁻`` (noise on
the text encoder's input embeddings), a type-II/III positive ``T⁺`` (concatenation / truncation)
and its noisy copy ``T̃⁻`` (see :mod:`itrlab.methods.ascl.text_augment`), and scores them against the
batch's images. The loss reads only similarity matrices (docs/architecture.md, "Contracts"):

=============================  ========  ==========================================================
name                           shape     entry ``[i, n]``
=============================  ========  ==========================================================
``i2t``                        (B, B)    ``S(I_i, T_n)``
``i2t_generated_neg``          (B, N)    ``S(I_i, T⁻_n)``: image anchor vs generated negative ``n``
``i2t_pos``                    (B, B)    ``S(I_i, T⁺_n)``: image vs the generated positive of pair n
``i2t_pos_generated_neg``      (B, N)    ``S(I_i, T̃⁻_n)``: image vs the noisy generated positive n
=============================  ========  ==========================================================

A method gets all four from one leak-free scorer call, the batch's images against the captions
``[T; T⁻; T⁺; T̃⁻]`` (docs/papers/ascl.md §B3's N x 4N), split by columns. ``N`` (usually ``B``: one generated
sample per caption) may differ from ``B``. Generated negatives carry no image id: **all N** are
candidates of every image anchor, the anchor's own included (docs/papers/ascl.md §B2), and they appear only in
the image-anchor (i2t) direction, as in eq. 5-6.

Per pair ``i``, with ``P = S(I_i, T_i)`` and ``τ`` the temperature, the printed probabilities
are turned into losses with ``-log`` (InfoNCE; docs/papers/ascl.md §B2)::

    L_I(i) = -log( e^{P/τ} / (e^{P/τ} + Σ_{n ∉ img(i)} e^{S(I_n, T_i)/τ}) )                     (eq. 5)
             -log( e^{P/τ} / (e^{P/τ} + Σ_{n ∉ img(i)} e^{S(I_i, T_n)/τ}
                                       + Σ_{n ≤ N} α_in e^{S(I_i, T⁻_n)/τ}) )
    α_in = 0 if S(I_i, T⁻_n) > P else 1      (stop-gradient: the entry is dropped, not zeroed)

``L_II&III(i)`` (eq. 6) is the same with ``T⁺`` in place of ``T`` (positive ``S(I_i, T⁺_i)``,
in-batch negatives ``T⁺_n``, images ``I_n`` against ``T⁺_i``) and ``T̃⁻`` in place of ``T⁻``.
``n ∉ img(i)``: in-batch entries sharing pair ``i``'s image id are masked (neither positive nor
negative; itrlab's duplicate-id rule). The loss (eq. 7), **mean** over the batch::

    L = ½ mean_i L_I(i) + ½ mean_i L_II&III(i)

Ablations (docs/papers/ascl.md §B5): ``use_positives=False`` ("w/o Pos") is ``L_I`` alone at weight 1 (it needs
neither ``i2t_pos`` nor ``i2t_pos_generated_neg``); ``use_negatives=False`` ("w/o Neg") drops the
α terms (needs no generated-negative matrix); both off ("w/o P&N") is plain bidirectional InfoNCE,
equal to itrlab's ``convse``. ``ascl_triplet`` ("w triplet") replaces each ``-log`` term by
VSE++'s max hinge ``[m + max(candidates) - positive]_+`` (margin 0.2) over the same candidate
sets (α included), **summed** over the batch as itrlab's ``vsepp``.

Parts for logging: ``i2t`` / ``t2i`` (image- / caption-anchor halves), ``L_I``, ``L_II_III``
(absent when ``use_positives`` is False), ``dropped_generated`` (the fraction of generated
negatives α dropped: of all B x N, each against each anchor's positive) and ``own_outscores`` (the share of
generated negatives that outscore the caption they were made from, ``S(I_i, T⁻_i) > S(I_i, T_i)``; with N = B
only: a noise too strong to confuse the scorer leaves it near 0, one too weak near ½).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from itrlab.losses.base import (
    LossOutput,
    RetrievalLoss,
    Similarities,
    check_inputs,
    hardest_negative_hinge,
    nce_term,
    negative_mask,
)
from itrlab.losses.registry import register_loss

I2T_GENERATED_NEG = "i2t_generated_neg"
I2T_POS = "i2t_pos"
I2T_POS_GENERATED_NEG = "i2t_pos_generated_neg"

Candidates = list[tuple[Tensor, Tensor]]


def kept_generated(positive: Tensor, generated: Tensor) -> Tensor:
    """α of eq. 5-6 as a mask: (B, N) ``True`` where ``S(I_i, T⁻_n) <= S(I_i, T_i)`` (stop-gradient)."""
    return generated.detach() <= positive.detach().unsqueeze(1)


class _AsymmetryLoss(RetrievalLoss):
    """Shared candidate sets of eq. 5-6; subclasses turn (positive, candidates) into per-anchor terms."""

    requires: ClassVar[tuple[str, ...]] = ("i2t", "image_ids", I2T_GENERATED_NEG, I2T_POS, I2T_POS_GENERATED_NEG)

    def __init__(self, use_positives: bool, use_negatives: bool):
        super().__init__()
        self.use_positives, self.use_negatives = use_positives, use_negatives
        self.requires = self.inputs(use_positives, use_negatives)  # instance attribute: what this configuration reads

    @classmethod
    def reads(cls, settings) -> tuple[str, ...]:
        return cls.inputs(settings.use_positives, settings.use_negatives)

    @staticmethod
    def inputs(use_positives: bool, use_negatives: bool) -> tuple[str, ...]:
        """The similarities the loss reads with these settings: the generated negatives and positives it uses."""
        names = ["i2t", "image_ids"]
        if use_negatives:
            names.append(I2T_GENERATED_NEG)
        if use_positives:
            names.append(I2T_POS)
            if use_negatives:
                names.append(I2T_POS_GENERATED_NEG)
        return tuple(names)

    def anchor_term(self, positive: Tensor, candidates: Candidates) -> Tensor:
        """(B,) loss of each anchor with ``positive`` (B,) against ``(scores, mask)`` candidate sets."""
        raise NotImplementedError

    def half(
        self, scores: Tensor, generated: Tensor | None, negatives: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One of eq. 5 / eq. 6 for captions ``scores`` (B, B) and generated negatives (B, N).

        Returns the per-anchor image-anchor (i2t) and caption-anchor (t2i) terms, the number of
        generated negatives dropped by α, and the number of anchors whose own generated negative
        (column i, N = B) outscores their positive.
        """
        positive = scores.diagonal()
        caption_anchor = self.anchor_term(positive, [(scores.T, negatives.T)])
        candidates: Candidates = [(scores, negatives)]
        dropped = own = scores.new_zeros(())
        if generated is not None:
            kept = kept_generated(positive, generated)
            candidates.append((generated, kept))
            dropped = (~kept).sum().to(scores.dtype)
            if generated.shape[1] == generated.shape[0]:
                own = (~kept.diagonal()).sum().to(scores.dtype)
        return self.anchor_term(positive, candidates), caption_anchor, dropped, own

    def forward(self, sims: Similarities) -> LossOutput:
        check_inputs(self, sims)
        negatives = negative_mask(sims.image_ids)
        generated = sims.get(I2T_GENERATED_NEG) if self.use_negatives else None
        self._check_generated(sims, generated)
        i2t_1, t2i_1, dropped, own = self.half(sims.i2t, generated, negatives)
        total = 0 if generated is None else generated.numel()
        anchors = 0 if generated is None or generated.shape[1] != generated.shape[0] else generated.shape[0]
        parts = {"L_I": self.reduce(i2t_1 + t2i_1).detach()}
        if self.use_positives:
            positives = sims.get(I2T_POS)
            if tuple(positives.shape) != tuple(sims.i2t.shape):
                raise ValueError(
                    f"{I2T_POS} must have shape {tuple(sims.i2t.shape)} like i2t, got {tuple(positives.shape)}"
                )
            noisy = sims.get(I2T_POS_GENERATED_NEG) if self.use_negatives else None
            self._check_generated(sims, noisy)
            i2t_2, t2i_2, dropped_2, own_2 = self.half(positives, noisy, negatives)
            parts["L_II_III"] = self.reduce(i2t_2 + t2i_2).detach()
            i2t, t2i = 0.5 * (i2t_1 + i2t_2), 0.5 * (t2i_1 + t2i_2)
            dropped, own = dropped + dropped_2, own + own_2
            total += 0 if noisy is None else noisy.numel()
            anchors += 0 if noisy is None or noisy.shape[1] != noisy.shape[0] else noisy.shape[0]
        else:
            i2t, t2i = i2t_1, t2i_1
        out = self.output(i2t, t2i)
        parts["dropped_generated"] = (dropped / max(total, 1)).detach()
        if anchors:
            parts["own_outscores"] = (own / anchors).detach()
        return LossOutput(loss=out.loss, parts={**out.parts, **parts})

    def reduce(self, values: Tensor) -> Tensor:
        return values.sum() if self.reduction == "sum" else values.mean()

    @staticmethod
    def _check_generated(sims: Similarities, generated: Tensor | None) -> None:
        if generated is not None and (generated.dim() != 2 or generated.shape[0] != sims.batch_size):
            raise ValueError(
                f"generated-sample similarities must have shape ({sims.batch_size}, N), got {tuple(generated.shape)}"
            )

    def extra_repr(self) -> str:
        params = {k: getattr(self, k) for k in ("tau", "margin", "use_positives", "use_negatives") if hasattr(self, k)}
        return ", ".join(f"{k}={v}" for k, v in params.items())


@register_loss
class AsymmetrySensitiveLoss(_AsymmetryLoss):
    """AsCL eq. 5-7: InfoNCE over in-batch and α-filtered generated negatives (module docstring).

    Args:
        tau: temperature τ > 0 (paper: 0.05 COCO, 0.01 F30K).
        use_positives: False = "w/o Pos" (``L_I`` only).
        use_negatives: False = "w/o Neg" (no generated negatives).
    """

    name = "ascl"
    reduction = "mean"

    def __init__(self, tau: float, use_positives: bool, use_negatives: bool):
        super().__init__(use_positives, use_negatives)
        self.tau = tau

    def anchor_term(self, positive: Tensor, candidates: Candidates) -> Tensor:
        return nce_term(positive, candidates, self.tau)


@register_loss
class AsymmetryTripletLoss(_AsymmetryLoss):
    """AsCL "w triplet" (docs/papers/ascl.md §B5): VSE++ max hinge over eq. 5-6's candidate sets, summed over the batch.

    Each ``-log`` term of eq. 5-6 becomes ``[margin + max_candidates S - positive]_+`` with the
    same candidates (in-batch negatives of other image ids, α-kept generated negatives); an anchor
    without candidates contributes 0.
    """

    name = "ascl_triplet"
    reduction = "sum"

    def __init__(self, margin: float, use_positives: bool, use_negatives: bool):
        super().__init__(use_positives, use_negatives)
        self.margin = margin

    def anchor_term(self, positive: Tensor, candidates: Candidates) -> Tensor:
        scores = torch.cat([s for s, _ in candidates], dim=1)
        mask = torch.cat([m for _, m in candidates], dim=1)
        return hardest_negative_hinge(positive, scores, mask, dim=1, margin=self.margin)


__all__ = [
    "AsymmetrySensitiveLoss",
    "AsymmetryTripletLoss",
    "I2T_GENERATED_NEG",
    "I2T_POS",
    "I2T_POS_GENERATED_NEG",
    "kept_generated",
]
