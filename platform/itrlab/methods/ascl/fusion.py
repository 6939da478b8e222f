"""AsCL's hierarchical cross-modal fusion scorer (AsCL §II-C-D, eq. 1-4; ``docs/papers/ascl.md`` §B3).

Inputs per pair: ``V`` (K, D) projected regions, ``W`` (L, D) projected word features (padding
masked by ``lengths``) and ``G`` the image's global feature; itrlab has no ResNet-152 feature, so
``G`` is the mean of the raw region features (:func:`global_image_feature`, spec flag), mapped by
``X_g``. Nothing here normalises ``V`` or ``W``: the encoders decide.

**Multi-head cross-attention** (eq. 1), separate parameters per direction, H = 8 (reference code)::

    Y* = Concat_h softmax((X Z^X_h)(Y Z^Y_h)ᵀ / √(D/H)) (Y Z^Y_h) · Z^O

As printed, one ``Z^Y_h`` serves keys and values; ``Z^X_h, Z^Y_h ∈ R^{D×D/H}``, ``Z^O ∈ R^{D×D}``;
no biases, no residual, no LayerNorm. Padded words are masked out of the keys. I2T: ``X = V``,
``Y = W`` gives ``W*`` (K×D); T2I: ``X = W``, ``Y = V`` gives ``V*`` (L×D). ``Z^O`` is folded into
the values per head (``(Y Z^Y_h) Z^O_h``, ``Z^O_h`` = rows h of ``Z^O``): the same ``Y*``, computed
once per item instead of once per pair. :meth:`CrossModalAttention.attend` computes a whole block of
pairs with three matrix products, per-head logits with the softmax over the keys ahead of the queries
(layout notes there; the figures: docs/papers/ascl.md#fusion-scorer).

**Scores** (eq. 2-4), ``R`` the cosine::

    S_local  = (1/2K) Σ_i R(v_i, w*_i) + (1/2L) Σ_j R(w_j, v*_j)          (real words only)
    W_g = X_wᵀ mean_i w*_i;  V_g1 = X_vᵀ mean_j v*_j;  V_g2 = X_gᵀ G
    V_g = t ⊙ V_g1 + (1 - t) ⊙ V_g2,  t = σ(W_f [V_g1; V_g2])                (the paper's undefined
                                                                             "Fusion": a gate, docs/papers/ascl.md §B3)
    S_global = R(V_g, W_g);   S = u1·S_local + (1 - u1)·S_global            (u1 ∈ [0, 1])

**Leak-free scoring** (docs/papers/ascl.md §B3): ``W*`` and ``V*`` depend on the pair, so ``S_global`` is a pair
function too. :meth:`HierarchicalFusion.pair_scores` computes both parts for *every* candidate
pair from that pair alone, in bounded-memory shards (:mod:`itrlab.models.sharding`, the ``xattn``
plan); no partner is ever looked up by ground truth (the reference code builds each global
embedding from the ground-truth partner and takes one matmul, which leaks the answer).

**w/o MF** (``cross_attention=False``, docs/papers/ascl.md §B5): no cross-attention; ``S = R(V_g, W_g)`` with
self-pooled globals ``V_g = Fusion(X_vᵀ mean_i v_i, X_gᵀ G)`` and ``W_g = X_wᵀ mean_j w_j`` (the
attention modules are not built). Such a model is a dual encoder: :meth:`image_embeddings` and
:meth:`caption_embeddings` give unit vectors for dense evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from itrlab.models.interaction import DEFAULT_SHARD_ELEMENTS
from itrlab.models.pooling import length_mask
from itrlab.models.sharding import sharded_pair_scores
from itrlab.numbers import check_number

DEFAULT_HEADS = 8
_EPS = 1e-12  # norm floor: a zeroed row (token cutoff) gets cosine 0, not NaN


def global_image_feature(raw_regions: Tensor) -> Tensor:
    """``G`` (B, F): the mean of the raw (unprojected) region features (B, K, F)."""
    return raw_regions.mean(dim=1)


def _unit(x: Tensor) -> Tensor:
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=_EPS)


def _cosines(x: Tensor, y: Tensor) -> Tensor:
    """Cosine of ``x`` and ``y`` along the last axis (broadcast); no normalised copy of the larger ``y``."""
    return (_unit(x) * y).sum(dim=-1) / torch.linalg.vector_norm(y, dim=-1).clamp(min=_EPS)


def _masked_mean(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Mean of ``x`` over ``dim`` where ``mask`` (broadcastable, bool) is True."""
    weights = mask.to(x.dtype)
    return (x * weights).sum(dim) / weights.sum(dim).clamp(min=1)


class CrossModalAttention(nn.Module):
    """One direction of eq. 1: ``Z^X`` (queries), ``Z^Y`` (keys = values) and ``Z^O``, H heads."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.query = nn.Linear(dim, dim, bias=False)  # [Z^X_1 ... Z^X_H]
        self.key_value = nn.Linear(dim, dim, bias=False)  # [Z^Y_1 ... Z^Y_H]
        self.out = nn.Linear(dim, dim, bias=False)  # Z^O

    def attend(self, x: Tensor, y: Tensor, bias: Tensor | None = None) -> Tensor:
        """``Y*`` of eq. 1 for every pair of an ``x`` item (A, m, D) and a ``y`` item (N, n, D): (N, A, m, D).

        ``bias`` (N, n) is added to the logits (``-inf`` at padded keys). Three products, laid out for the CPU:
        the logits of each head against every query at once, ``(N, H, n, d) @ (H, d, A·m)``, as (N, H, n, A·m),
        so that the softmax runs over the keys with the queries contiguous behind them (over the last axis, a
        few keys long, torch's CPU softmax and its backward are several times slower); each head's keys
        times its rows of ``Z^O`` give the values, (N, H·n, D); one batched product over the ``y`` items reads
        the probabilities transposed against them. Per-head logits cost a head's share of the multiply-adds of
        one product of block-diagonal keys with all queries, the layout they replace (1.2 to 1.5 times
        slower in training, docs/papers/ascl.md#fusion-scorer).
        """
        (A, m, D), (N, n, _) = x.shape, y.shape
        H, d = self.heads, self.head_dim
        queries = (self.query(x) / math.sqrt(d)).reshape(A * m, H, d).permute(1, 2, 0)  # (H, d, A·m)
        keys = self.key_value(y).view(N, n, H, d).transpose(1, 2)  # (N, H, n, d)
        logits = torch.matmul(keys, queries)  # (N, H, n, A·m)
        if bias is not None:
            logits = logits + bias[:, None, :, None]
        probs = torch.softmax(logits, dim=2).reshape(N, H * n, A * m)
        out_rows = self.out.weight.t().reshape(H, d, D)  # Z^O_h: rows h·d .. (h+1)·d of Z^O
        values = torch.matmul(keys, out_rows).reshape(N, H * n, D)
        return torch.bmm(probs.transpose(1, 2), values).view(N, A, m, D)


@dataclass(frozen=True)
class FusionParts:
    """Per-pair parts of one block: ``local`` (I, J), ``v_global`` / ``w_global`` (I, J, D) = V_g / W_g."""

    local: Tensor
    v_global: Tensor
    w_global: Tensor


class HierarchicalFusion(nn.Module):
    """The fusion scorer of eq. 1-4 (module docstring).

    Args:
        embed_dim: D, the size of ``V`` and ``W`` features (divisible by ``heads``).
        global_dim: size of the global image feature ``G``.
        heads: H.
        u1: weight of the local score, in [0, 1] (paper: 0.8 COCO, 0.6 F30K).
        cross_attention: False = "w/o MF".
    """

    def __init__(
        self, embed_dim: int, global_dim: int, heads: int = DEFAULT_HEADS, u1: float = 0.6, cross_attention: bool = True
    ):
        super().__init__()
        for name, value in (("embed_dim", embed_dim), ("global_dim", global_dim), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if embed_dim % heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by heads ({heads})")
        if not isinstance(cross_attention, bool):
            raise ValueError(f"cross_attention must be true or false, got {cross_attention!r}")
        self.u1 = check_number("u1", u1, ge=0, le=1, meaning="the weight of the local score")
        self.embed_dim, self.heads, self.cross_attention = embed_dim, heads, cross_attention
        if cross_attention:
            self.i2t = CrossModalAttention(embed_dim, heads)  # regions query words -> W*
            self.t2i = CrossModalAttention(embed_dim, heads)  # words query regions -> V*
        self.x_w = nn.Linear(embed_dim, embed_dim, bias=False)
        self.x_v = nn.Linear(embed_dim, embed_dim, bias=False)
        self.x_g = nn.Linear(global_dim, embed_dim, bias=False)
        self.gate = nn.Linear(2 * embed_dim, embed_dim)  # W_f

    def extra_repr(self) -> str:
        return f"u1={self.u1}, heads={self.heads}, cross_attention={self.cross_attention}"

    # ------------------------------------------------------------------ globals

    def fuse_image(self, v_g1: Tensor, v_g2: Tensor) -> Tensor:
        """V_g = t ⊙ V_g1 + (1 - t) ⊙ V_g2 with t = σ(W_f [V_g1; V_g2]) (broadcast over pairs)."""
        v_g1, v_g2 = torch.broadcast_tensors(v_g1, v_g2)
        t = torch.sigmoid(self.gate(torch.cat([v_g1, v_g2], dim=-1)))
        return t * v_g1 + (1 - t) * v_g2

    def image_embeddings(self, regions: Tensor, global_feats: Tensor) -> Tensor:
        """w/o MF: (I, D) unit ``V_g`` from self-pooled regions and ``G``."""
        return _unit(self.fuse_image(self.x_v(regions.mean(dim=1)), self.x_g(global_feats)))

    def caption_embeddings(self, words: Tensor, lengths: Tensor) -> Tensor:
        """w/o MF: (J, D) unit ``W_g`` from the mean of the real words."""
        mask = length_mask(lengths.to(words.device), words.shape[1])
        return _unit(self.x_w(_masked_mean(words, mask[:, :, None], dim=1)))

    # ------------------------------------------------------------------ pairs

    def pair_parts(self, regions: Tensor, global_feats: Tensor, words: Tensor, lengths: Tensor) -> FusionParts:
        """Eq. 1-3 for every pair of one block: images (I, K, D) + (I, G), captions (J, L, D) + (J,).

        Each pair's parts depend on that pair only: attention is per pair, padding is masked out of
        keys and means, and padded positions are zeroed first (their values never matter).
        """
        if not self.cross_attention:
            raise ValueError("pair_parts needs cross-attention; this scorer is 'w/o MF' (cross_attention=False)")
        lengths = lengths.to(words.device)
        mask = length_mask(lengths, words.shape[1])  # (J, L)
        weights = mask.to(words.dtype) / lengths.clamp(min=1)[:, None].to(words.dtype)  # masked mean over words
        words = words * mask[:, :, None].to(words.dtype)
        padding = torch.zeros_like(weights).masked_fill_(~mask, -math.inf)
        w_star = self.i2t.attend(regions, words, padding)  # I2T: W* (J, I, K, D)
        v_star = self.t2i.attend(words, regions)  # T2I: V* (I, J, L, D)
        # Eq. 2: local score (padded words attend too, but get weight 0).
        region_cos = _cosines(regions[None], w_star).mean(dim=-1).t()
        local = 0.5 * region_cos + 0.5 * (_cosines(words[None], v_star) * weights).sum(dim=-1)
        # Eq. 3: global embeddings of the pair.
        w_global = self.x_w(w_star.mean(dim=2)).transpose(0, 1)
        v_g1 = self.x_v((v_star * weights[None, :, :, None]).sum(dim=2))
        v_global = self.fuse_image(v_g1, self.x_g(global_feats)[:, None, :])
        return FusionParts(local=local, v_global=v_global, w_global=w_global)

    def forward(self, regions: Tensor, global_feats: Tensor, words: Tensor, lengths: Tensor) -> Tensor:
        """(I, J) scores S (eq. 4) of every image of one block against every caption, unsharded."""
        if not self.cross_attention:
            return self.image_embeddings(regions, global_feats) @ self.caption_embeddings(words, lengths).T
        parts = self.pair_parts(regions, global_feats, words, lengths)
        global_score = (_unit(parts.v_global) * _unit(parts.w_global)).sum(dim=-1)
        return self.u1 * parts.local + (1 - self.u1) * global_score

    def pair_cost(self, n_regions: int, max_len: int) -> int:
        """Entries one pair adds to a shard's largest intermediate: max(H·K·L, K·D, L·D)."""
        return max(self.heads * n_regions * max_len, n_regions * self.embed_dim, max_len * self.embed_dim)

    def pair_scores(
        self,
        regions: Tensor,
        global_feats: Tensor,
        words: Tensor,
        lengths: Tensor,
        max_elements: int | None = DEFAULT_SHARD_ELEMENTS,
    ) -> Tensor:
        """(N_img, N_cap) scores, every pair from that pair alone, in shards of bounded memory.

        Shards follow :func:`itrlab.models.sharding.shard_plan` with a uniform per-pair cost
        (:meth:`pair_cost` at the longest caption); each shard trims padding to its own longest
        caption. ``None`` scores everything at once. "w/o MF" is a plain product of embeddings.
        """
        if regions.shape[0] != global_feats.shape[0] or words.shape[0] != lengths.shape[0]:
            raise ValueError(
                f"regions {tuple(regions.shape)} / global_feats {tuple(global_feats.shape)} and "
                f"words {tuple(words.shape)} / lengths {tuple(lengths.shape)} disagree"
            )
        if lengths.numel() and int(lengths.min()) < 1:
            raise ValueError("every caption needs at least one real token (lengths >= 1)")
        if not self.cross_attention:
            return self.forward(regions, global_feats, words, lengths)
        lengths_cpu = lengths.cpu()
        longest = int(lengths_cpu.max()) if lengths.numel() else 1
        costs = torch.full((words.shape[0],), self.pair_cost(regions.shape[1], longest), dtype=torch.long)

        def block(images: slice, captions: slice) -> Tensor:
            width = int(lengths_cpu[captions].max()) if captions.stop > captions.start else 1
            return self.forward(regions[images], global_feats[images], words[captions, :width], lengths[captions])

        if words.shape[0] == 0 or regions.shape[0] == 0:
            return regions.new_zeros((regions.shape[0], words.shape[0]))
        return sharded_pair_scores(block, regions.shape[0], costs, max_elements)


__all__ = ["CrossModalAttention", "DEFAULT_HEADS", "FusionParts", "HierarchicalFusion", "global_image_feature"]
