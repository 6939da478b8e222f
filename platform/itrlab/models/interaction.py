"""The cross-attention interaction model: DBL's single-branch baseline (DBL paper §III-A, eq. 1-2).

The score of an (image, caption) pair is no dot product of two embeddings: every word attends over the image's regions,
so each pair costs ``L x R x d`` attention plus an ``L x d x s`` projection. Notation: ``V`` (R, d) region features,
``T`` (L, d) word features, ``λ`` (``lambda_``) the softmax inverse temperature, ``s`` the size of the similarity
vectors (``sim_dim``). Features (§III-A): an FC layer maps each region to ``d`` (:meth:`RegionEncoder.region_features`,
no pooling) and a text encoder gives one ``d``-vector per word (:meth:`GRUTextEncoder.word_features`, or any of
:mod:`itrlab.models.text_factory`); both are L2-normalised per vector, so that ``T Vᵀ`` is the cosine matrix the paper
names (as in SCAN [44]).

Text-to-image cross-attention (eq. 1)::

    M  = norm_T([T Vᵀ]_+)                 M ∈ R^{L x R}: cosine, clipped at 0, then
                                           L2-normalised over the words (for each region)
    V' = softmax_V(λ M) V                 softmax over the regions, for each word; V' ∈ R^{L x d}

Vectorised similarity (eq. 2)::

    A = norm(W1 |T - V'|² + b1)           |·|² element-wise; W1 ∈ R^{s x d}; each row of
                                           A ∈ R^{L x s} L2-normalised
    Ā = mean over the caption's words of A   (padding excluded)
    S = tanh(W2 Ā + b2)                   W2 ∈ R^{1 x s}: one score in (-1, 1)

The extracted eq. 2 reads ``norm(W1(|T - V'|²) + b1)``; ``b1`` is the bias of the same FC layer (SGRAF's
``sim_tranloc_w``), inside the normalisation. ``norm_T`` is SCAN's text-to-image normalisation (SCAN §3.2,
``clipped_l2norm``): for each region, the clipped cosines L2-normalised over the caption's real words, so padding never
changes a score. The paper's ``[x]_+`` is a plain ReLU (SCAN's code uses a leaky ReLU; we follow the paper).

:func:`pair_scores` scores a block of images against a block of captions with batched ops over the captions' real
words, packed: its largest intermediates have ``n_images x n_words x max(d, s)`` entries.
:meth:`InteractionModel.pair_scores` splits a large block into shards under a budget of elements
(:mod:`itrlab.models.sharding`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from itrlab.gpu_memory import free_memory_bytes
from itrlab.models.encoders import RegionEncoder
from itrlab.models.pooling import length_mask
from itrlab.models.text_factory import TextEncoderSpec

DEFAULT_LAMBDA = 9.0
DEFAULT_SHARD_ELEMENTS = 1 << 20
"""Default budget of one shard's largest intermediate, in elements (1 M: 4 MB in float32): the fastest on a
CPU with ``benchmarks/eval.py --interaction`` (docs/speed.md#figures-behind-the-codes-choices); on a GPU, raise it.
"""
MIN_SHARD_ELEMENTS, MAX_SHARD_ELEMENTS = 1 << 18, 1 << 28
"""Bounds of a device-derived budget; the upper one the fastest tried on a GPU (the same page)."""
_LIVE_INTERMEDIATES = 4  # shard-sized tensors alive at once in pair_scores (with margin)
_EPS = 1e-12  # floor of the L2 norms (F.normalize's), so an all-zero vector stays zero


def pair_scores(
    regions: Tensor,
    words: Tensor,
    lengths: Tensor,
    *,
    lambda_: float,
    sim_weight: Tensor,
    sim_bias: Tensor | None,
    score_weight: Tensor,
    score_bias: Tensor | None,
) -> Tensor:
    """Scores ``S[i, j]`` of every image ``i`` against every caption ``j`` (eq. 1-2), batched.

    Args:
        regions: (I, R, d) region features, L2-normalised per region.
        words: (J, L, d) word features, L2-normalised per word; positions ``>= lengths[j]`` are
            padding (their values never matter).
        lengths: (J,) number of real words of each caption (>= 1).
        lambda_: λ, the inverse temperature of the softmax over regions.
        sim_weight, sim_bias: W1 (s, d) and b1 (s,).
        score_weight, score_bias: W2 (1, s) and b2 (1,).

    Returns:
        (I, J) scores in (-1, 1), differentiable with respect to every input. Without gradients (evaluation) the
        large intermediates are updated in place: the same values, about half the memory traffic.
    """
    n_images, n_regions, _ = regions.shape
    n_captions, max_len, _ = words.shape
    inplace = not (
        torch.is_grad_enabled()
        and any(
            t is not None and t.requires_grad for t in (regions, words, sim_weight, sim_bias, score_weight, score_bias)
        )
    )
    lengths = lengths.to(words.device)
    # The real words of all captions, packed: (W, d) with W = sum(lengths); caption_of[w] = j.
    # Padding is never computed, and never enters a norm or a mean.
    packed = words[length_mask(lengths, max_len)]
    caption_of = torch.repeat_interleave(torch.arange(n_captions, device=words.device), lengths)
    # Cosine of every (image, word, region): (I, W, R), one broadcast matmul.
    x = torch.matmul(packed, regions.transpose(1, 2))
    # Eq. 1: λ M = λ norm_T([T Vᵀ]_+): for each (image, caption, region), the L2 norm over the
    # caption's words (a segment sum over W), then the softmax over the regions.
    x = x.clamp_(min=0) if inplace else x.clamp(min=0)
    # Segment sums accumulate in float32 (float64 stays float64) whatever autocast made of x (bf16 or
    # fp16 matmuls; on CUDA, square and norm run in float32): index_add needs one dtype for both sides,
    # and a low-precision sum over a caption's words would be the inaccurate one. In float32 (and
    # float64) the casts are no-ops.
    acc = torch.promote_types(x.dtype, torch.float32)
    norms = x.new_zeros((n_images, n_captions, n_regions), dtype=acc).index_add(1, caption_of, x.square().to(acc))
    scale = (norms.sqrt().clamp(min=_EPS) / lambda_).index_select(1, caption_of).to(x.dtype)
    x = x.div_(scale) if inplace else x / scale
    attention = torch.softmax(x, dim=2)
    x = torch.bmm(attention, regions)  # V': (I, W, d)
    # Eq. 2: A = norm(W1 |T - V'|² + b1); Ā = mean over the caption's words; S = tanh(W2 Ā + b2).
    x = x.sub_(packed).square_() if inplace else (x - packed).square()
    x = F.linear(x, sim_weight, sim_bias)  # (I, W, s)
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=_EPS)
    x = x.div_(norm) if inplace else x / norm
    acc = torch.promote_types(x.dtype, torch.float32)
    sums = x.new_zeros((n_images, n_captions, x.shape[-1]), dtype=acc).index_add(1, caption_of, x.to(acc))
    mean_alignment = sums / lengths.to(sums.dtype).clamp(min=1)[None, :, None]  # Ā: (I, J, s)
    return torch.tanh(F.linear(mean_alignment, score_weight, score_bias)).squeeze(-1)


def padded_pair_scores(
    regions: Tensor,
    words: Tensor,
    lengths: Tensor,
    *,
    lambda_: float,
    sim_weight: Tensor,
    sim_bias: Tensor | None,
    score_weight: Tensor,
    score_bias: Tensor | None,
) -> Tensor:
    """:func:`pair_scores` over the padded words, masked instead of packed: the same eq. 1-2 with every shape fixed by
    the inputs', so that it runs under ``torch.func.vmap`` (:mod:`itrlab.models.batched`). Padding is zero in the
    cosines and left out of the mean over words; it costs ``max_len / mean length`` times the packed form's work and
    memory."""
    mask = length_mask(lengths.to(words.device), words.shape[1])  # (J, L)
    keep = mask[None, :, :, None].to(words.dtype)
    x = torch.matmul(words[None], regions.transpose(1, 2)[:, None])  # (I, J, L, R)
    x = x.clamp(min=0) * keep
    # over the caption's words; clamped before the root (the same value as the packed form's clamp after it)
    # so that a region no word matches sends no 0/0 gradient back
    norms = x.square().sum(2, keepdim=True).clamp(min=_EPS**2).sqrt()
    attention = torch.softmax(x / (norms / lambda_), dim=3)
    x = torch.matmul(attention, regions[:, None])  # V': (I, J, L, d)
    x = F.linear((x - words[None]).square(), sim_weight, sim_bias)  # (I, J, L, s)
    x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=_EPS)
    mean_alignment = (x * keep).sum(2) / lengths.to(x.dtype).clamp(min=1)[None, :, None]
    return torch.tanh(F.linear(mean_alignment, score_weight, score_bias)).squeeze(-1)


class CrossAttentionSimilarity(nn.Module):
    """The learned part of eq. 1-2 on encoded features: λ, W1/b1 (d -> s) and W2/b2 (s -> 1). W1 and W2 start
    Xavier-uniform with zero biases, as SGRAF (the paper's [51]) initialises them: with PyTorch's default, b1 dominates
    W1 |T - V'|² (entries O(1/d)), and every pair starts with nearly the same A."""

    def __init__(self, embed_dim: int, sim_dim: int, lambda_: float = DEFAULT_LAMBDA):
        super().__init__()
        if not lambda_ > 0:
            raise ValueError(f"lambda_ must be > 0, got {lambda_!r}")
        self.lambda_ = float(lambda_)
        self.sim = nn.Linear(embed_dim, sim_dim)
        self.score = nn.Linear(sim_dim, 1)
        for layer in (self.sim, self.score):  # SGRAF's initialisation (the paper gives none)
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)

    padded = False  # True: padded_pair_scores (grouped training under vmap), else the packed pair_scores

    def forward(self, regions: Tensor, words: Tensor, lengths: Tensor) -> Tensor:
        """(I, J) scores of all pairs of the two blocks (see :func:`pair_scores`)."""
        scores = padded_pair_scores if self.padded else pair_scores
        return scores(
            regions,
            words,
            lengths,
            lambda_=self.lambda_,
            sim_weight=self.sim.weight,
            sim_bias=self.sim.bias,
            score_weight=self.score.weight,
            score_bias=self.score.bias,
        )


class InteractionModel(nn.Module):
    """Region encoder + word-level text encoder (BiGRU by default) + cross-attention similarity (eq. 1-2)."""

    def __init__(self, image_encoder: RegionEncoder, text_encoder: nn.Module, similarity: CrossAttentionSimilarity):
        super().__init__()
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder  # anything with word_features(tokens, lengths) -> (B, L, d)
        self.similarity = similarity

    @classmethod
    def build(
        cls,
        *,
        feature_dim: int,
        vocab_size: int,
        embed_dim: int,
        sim_dim: int,
        lambda_: float = DEFAULT_LAMBDA,
        text: TextEncoderSpec = TextEncoderSpec(),
    ) -> InteractionModel:
        """Region encoder, the text encoder ``text`` describes (BiGRU, GloVe-BiGRU or BERT: only their
        per-region / per-word features are used, no pooling, no head), then the similarity head."""
        return cls(
            RegionEncoder(feature_dim, embed_dim),
            text.build(vocab_size=vocab_size, embed_dim=embed_dim),
            CrossAttentionSimilarity(embed_dim, sim_dim, lambda_),
        )

    def encode_images(self, regions: Tensor) -> Tensor:
        """(B, R, d) unit-norm region features."""
        return F.normalize(self.image_encoder.region_features(regions), dim=-1)

    def encode_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """(B, L, d) unit-norm word features (padding positions are zero)."""
        return F.normalize(self.text_encoder.word_features(tokens, lengths), dim=-1)

    def forward(self, regions: Tensor, tokens: Tensor, lengths: Tensor) -> Tensor:
        """(B, B) scores of every image of the batch against every caption of the batch."""
        return self.similarity(self.encode_images(regions), self.encode_captions(tokens, lengths), lengths)

    def pair_scores(
        self, regions: Tensor, words: Tensor, lengths: Tensor, max_elements: int | None = DEFAULT_SHARD_ELEMENTS
    ) -> Tensor:
        """(I, J) scores of encoded images against encoded captions, in shards of bounded memory: a shard's largest
        intermediate, ``images x (real words of its captions) x max(d, s, R)`` entries, stays within ``max_elements`` (a
        single caption over budget is scored alone against one image block); ``None`` scores everything at once."""
        n_images, n_captions = regions.shape[0], words.shape[0]
        if max_elements is None or n_images == 0 or n_captions == 0:
            return self.similarity(regions, words, lengths)
        width = max(words.shape[-1], self.similarity.sim.out_features, regions.shape[1])
        word_budget = max(1, max_elements // width)  # (images x words) per shard
        lengths_cpu = lengths.cpu()
        longest = int(lengths_cpu.max())
        image_step = n_images if word_budget // n_images >= longest else max(1, word_budget // longest)
        words_per_shard = max(longest, word_budget // image_step)
        ends = torch.cumsum(lengths_cpu, 0)
        if image_step == n_images and int(ends[-1]) <= words_per_shard:
            return self.similarity(regions, words, lengths)
        out = regions.new_empty((n_images, n_captions))
        c0 = 0
        while c0 < n_captions:  # the most consecutive captions whose words fit the shard
            start = int(ends[c0 - 1]) if c0 else 0
            c1 = max(c0 + 1, int(torch.searchsorted(ends, start + words_per_shard, right=True)))
            for i0 in range(0, n_images, image_step):
                out[i0 : i0 + image_step, c0:c1] = self.similarity(
                    regions[i0 : i0 + image_step], words[c0:c1], lengths[c0:c1]
                )
            c0 = c1
        return out


def _last_level_cache_bytes() -> int | None:
    """Size of the CPU's largest cache (Linux sysfs), or None when unreadable."""
    from pathlib import Path

    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
            sizes.append(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text))
        except (OSError, ValueError, KeyError):
            continue
    return max(sizes) if sizes else None


def _power_of_two_at_most(value: float) -> int:
    return 1 << max(0, int(value).bit_length() - 1)


def shard_budget(device: torch.device | str) -> int:
    """The shard budget (elements of a shard's largest intermediate) that suits ``device``, rounded down to a power of
    two within [MIN_SHARD_ELEMENTS, MAX_SHARD_ELEMENTS]. CUDA: half the free memory split over the float32 intermediates
    alive at once. CPU: the last-level cache in bytes / 32 (2^20 elements for a 32 MB L3, where
    :data:`DEFAULT_SHARD_ELEMENTS` was the fastest); that default when the size is unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        budget = free_memory_bytes(device) / 2 / (4 * _LIVE_INTERMEDIATES)
    else:
        cache = _last_level_cache_bytes()
        if cache is None:
            return DEFAULT_SHARD_ELEMENTS
        budget = cache / 32
    return min(MAX_SHARD_ELEMENTS, max(MIN_SHARD_ELEMENTS, _power_of_two_at_most(budget)))
