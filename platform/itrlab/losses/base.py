"""Shared pieces of the retrieval losses: the similarity contract, masks and small helpers.

Conventions (docs/architecture.md, "Contracts"):

* ``i2t[i, j]`` is the similarity of the image of pair ``i`` and the caption of pair ``j``.
  Row ``i`` holds the candidates of image anchor ``i`` (caption retrieval, "i2t" direction);
  column ``j`` holds the candidates of caption anchor ``j`` (image retrieval, "t2i" direction).
* Positives come from image ids, not from the diagonal alone. **A pair with the same image
  id is never a negative.** The helpers below therefore take a boolean mask of the entries
  that may be used as negatives (usually :func:`negative_mask`), and every loss is written
  as a per-anchor term for each direction, reduced by :meth:`RetrievalLoss.output`.

The helpers are pure functions of tensors (pytorch-metric-learning style), so that losses
compose them instead of copying code.

The loss layer's base, as :mod:`itrlab.methods.base` is the method layer's: the contract its parts implement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from itrlab.losses.settings import Margin, Temperature  # noqa: F401  (the settings' types, declared without torch)

Reduction = Literal["sum", "mean"]


@dataclass(frozen=True)
class Similarities:
    """Similarity matrices of one batch of ``B`` (image, caption) pairs.

    Attributes:
        i2t: (B, B) ``i2t[i, j]`` = similarity of the image of pair ``i`` and the caption of
            pair ``j``.
        image_ids: (B,) image id of pair ``i``; rows and columns share ids (pair ``i`` is
            (image ``i``, caption ``i``)). Entries with equal ids are never negatives.
        i2i: optional (B, B) image-image similarities (same-modality negatives, MVN).
        t2t: optional (B, B) caption-caption similarities (same-modality negatives, MVN).
        extras: further named tensors a method hands its losses without changing this class:
            memory-bank similarities and the ids of the bank's entries (CODER's queues),
            generated-sample similarities (AsCL), cluster logits and pseudo-labels (CODER's
            PGC), concept-level matrices. Each loss documents the names it reads and declares
            them in ``requires``.
    """

    i2t: Tensor
    image_ids: Tensor
    i2i: Tensor | None = None
    t2t: Tensor | None = None
    extras: Mapping[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.i2t.dim() != 2 or self.i2t.shape[0] != self.i2t.shape[1]:
            raise ValueError(f"i2t must be a square (B, B) matrix, got shape {tuple(self.i2t.shape)}")
        size = self.i2t.shape[0]
        if tuple(self.image_ids.shape) != (size,):
            raise ValueError(f"image_ids must have shape ({size},) to match i2t, got {tuple(self.image_ids.shape)}")
        for name in ("i2i", "t2t"):
            matrix = getattr(self, name)
            if matrix is not None and tuple(matrix.shape) != (size, size):
                raise ValueError(f"{name} must have shape ({size}, {size}) to match i2t, got {tuple(matrix.shape)}")
        object.__setattr__(self, "extras", MappingProxyType(dict(self.extras)))

    @property
    def batch_size(self) -> int:
        return self.i2t.shape[0]

    def has(self, name: str) -> bool:
        """Whether ``name`` (``i2i``, ``t2t`` or an extra) is present."""
        if name in ("i2t", "image_ids"):
            return True
        if name in ("i2i", "t2t"):
            return getattr(self, name) is not None
        return name in self.extras

    def get(self, name: str) -> Tensor:
        """The tensor named ``name`` (a field or an extra); ValueError naming what is missing."""
        if not self.has(name):
            raise ValueError(f"these similarities have no {name!r}; present: {', '.join(self.present())}")
        return getattr(self, name) if name in ("i2t", "image_ids", "i2i", "t2t") else self.extras[name]

    def present(self) -> tuple[str, ...]:
        return tuple(n for n in ("i2t", "image_ids", "i2i", "t2t") if self.has(n)) + tuple(self.extras)

    def missing(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if not self.has(name)]

    def with_extras(self, **extras: Tensor) -> Similarities:
        """A copy with ``extras`` added (replacing ones of the same name)."""
        return replace(self, extras={**self.extras, **extras})

    def detached(self) -> Similarities:
        """The same similarities cut from the autograd graph (every tensor, extras included)."""
        return replace(
            self,
            i2t=self.i2t.detach(),
            i2i=None if self.i2i is None else self.i2i.detach(),
            t2t=None if self.t2t is None else self.t2t.detach(),
            extras={name: value.detach() for name, value in self.extras.items()},
        )


def check_inputs(loss: object, sims: Similarities) -> None:
    """ValueError unless ``sims`` holds every input ``loss.requires`` names."""
    missing = sims.missing(getattr(loss, "requires", ()))
    if missing:
        raise ValueError(
            f"loss {getattr(loss, 'name', type(loss).__name__)!r} needs {', '.join(missing)} "
            f"in its similarities; the method gave {', '.join(sims.present())}"
        )


@dataclass(frozen=True)
class LossOutput:
    """A differentiable scalar ``loss`` and named detached scalars ``parts`` for logging."""

    loss: Tensor
    parts: dict[str, Tensor]


# --------------------------------------------------------------------------- masks


def positive_mask(image_ids: Tensor) -> Tensor:
    """(B, B) bool: ``True`` where pairs ``i`` and ``j`` share an image id (diagonal included)."""
    return image_ids.unsqueeze(1) == image_ids.unsqueeze(0)


def negative_mask(image_ids: Tensor) -> Tensor:
    """(B, B) bool: ``True`` where pairs ``i`` and ``j`` have different image ids."""
    return ~positive_mask(image_ids)


# --------------------------------------------------------------------------- helpers


def positive_scores(i2t: Tensor) -> Tensor:
    """(B,) similarity of each pair with itself: ``i2t[i, i]``."""
    return i2t.diagonal()


def hinge(x: Tensor) -> Tensor:
    """``[x]_+ = max(x, 0)`` elementwise."""
    return x.clamp(min=0)


def hardest_negative(scores: Tensor, mask: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Largest ``scores`` entry among those where ``mask`` is ``True``, along ``dim``.

    Returns ``(values, has_negative)``; where a row (``dim=1``) or column (``dim=0``) has no
    allowed entry, ``values`` is ``-inf`` and ``has_negative`` is ``False``. Gradients flow
    only to the selected entry.
    """
    masked = scores.masked_fill(~mask, -math.inf)
    return masked.max(dim=dim).values, mask.any(dim=dim)


def hardest_negative_hinge(positive: Tensor, scores: Tensor, mask: Tensor, dim: int, margin: float) -> Tensor:
    """Per-anchor ``[margin + s(hardest negative) - positive]_+`` (VSE++ eq. 5, one direction).

    ``dim=1``: anchors are rows (image anchors, hardest caption, eq. 4); ``dim=0``: anchors
    are columns (caption anchors, hardest image, eq. 3). An anchor without any negative in
    ``mask`` contributes 0.
    """
    hardest, has_negative = hardest_negative(scores, mask, dim)
    cost = hinge(margin + hardest - positive)
    return torch.where(has_negative, cost, torch.zeros_like(cost))


def masked_sum(values: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Sum of ``values`` where ``mask`` is ``True`` along ``dim`` (0 where none is)."""
    return torch.where(mask, values, torch.zeros_like(values)).sum(dim=dim)


def masked_logsumexp(scores: Tensor, mask: Tensor, dim: int) -> Tensor:
    """``log(sum(exp(scores)))`` over the entries where ``mask`` is ``True`` along ``dim``.

    Each reduced slice must have at least one allowed entry (the NCE losses always include
    the positive), otherwise the result is ``-inf``.
    """
    return torch.logsumexp(scores.masked_fill(~mask, -math.inf), dim=dim)


def nce_term(positive: Tensor, candidates: list[tuple[Tensor, Tensor]], tau: float) -> Tensor:
    """Per-anchor NCE loss ``-log(exp(p/tau) / (exp(p/tau) + sum_neg exp(s/tau)))``.

    Args:
        positive: (B,) similarity of each anchor with its positive.
        candidates: ``(scores, mask)`` pairs, each (B, M) with one row per anchor; the
            entries where ``mask`` is ``True`` are the anchor's negatives.
        tau: temperature.

    Returns:
        (B,) loss per anchor, computed stably with ``logsumexp``.
    """
    logits = [positive.unsqueeze(1) / tau] + [scores / tau for scores, _ in candidates]
    masks = [torch.ones_like(positive, dtype=torch.bool).unsqueeze(1)] + [m for _, m in candidates]
    denominator = masked_logsumexp(torch.cat(logits, dim=1), torch.cat(masks, dim=1), dim=1)
    return denominator - positive / tau


# --------------------------------------------------------------------------- base class


class RetrievalLoss(nn.Module):
    """Base class: a loss over :class:`Similarities` returning a :class:`LossOutput`.

    Subclasses set ``name`` (registry key), ``requires`` (the inputs they read beyond ``i2t`` and
    ``image_ids``: ``i2i``, ``t2t`` or extras) and ``reduction``, and
    implement :meth:`terms`, which returns the per-anchor terms of both directions:
    ``(i2t, t2i)``, each of shape (B,): ``i2t[i]`` for image anchor ``i`` (caption
    retrieval), ``t2i[j]`` for caption anchor ``j`` (image retrieval).
    The loss is ``reduce(i2t) + reduce(t2i)`` with ``reduce`` the sum or mean over the batch.
    """

    name: ClassVar[str]
    requires: tuple[str, ...] = ()
    reduction: ClassVar[Reduction]

    @classmethod
    def reads(cls, settings) -> tuple[str, ...]:
        """The inputs a loss of these typed settings reads (its ``requires``), known before it is built: a
        loss whose inputs depend on its settings says so here."""
        return tuple(cls.requires)

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def forward(self, sims: Similarities) -> LossOutput:
        check_inputs(self, sims)
        i2t, t2i = self.terms(sims)
        return self.output(i2t, t2i)

    def output(self, i2t: Tensor, t2i: Tensor) -> LossOutput:
        """Reduce per-anchor terms over the batch and package them with logging parts."""
        reduce = torch.sum if self.reduction == "sum" else torch.mean
        i2t_loss, t2i_loss = reduce(i2t), reduce(t2i)
        return LossOutput(loss=i2t_loss + t2i_loss, parts={"i2t": i2t_loss.detach(), "t2i": t2i_loss.detach()})

    def extra_repr(self) -> str:
        params = {k: getattr(self, k) for k in ("margin", "tau") if hasattr(self, k)}
        return ", ".join(f"{k}={v}" for k, v in params.items())
