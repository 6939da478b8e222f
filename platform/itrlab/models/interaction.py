"""The cross-attention interaction model: DBL's single-branch baseline (DBL paper §III-A, eq. 1-2).

Unlike a dual encoder, the score of an (image, caption) pair is not a dot product of two
independent embeddings: every word attends over the image's regions, so each pair costs
``L x R x d`` attention plus an ``L x d x s`` projection. Notation: ``V`` (R, d) region features,
``T`` (L, d) word features, ``λ`` (``lambda_``) the softmax inverse temperature, ``s`` the size of
the similarity vectors (``sim_dim``).

Features (§III-A "Feature Extraction"): an FC layer maps each region feature to ``d``
(:meth:`RegionEncoder.region_features`, no pooling); a BiGRU over word embeddings gives one
``d``-vector per word, its forward and backward states averaged
(:meth:`GRUTextEncoder.word_features`). Both are L2-normalised per vector, so that ``T Vᵀ`` is
the cosine similarity matrix the paper names (as in SCAN [44], whose encoders normalise).

Text-to-image cross-attention (eq. 1)::

    M  = norm_T([T Vᵀ]_+)                 M ∈ R^{L x R}: cosine, clipped at 0, then
                                           L2-normalised over the words (for each region)
    V' = softmax_V(λ M) V                 softmax over the regions, for each word; V' ∈ R^{L x d}

Vectorised similarity (eq. 2)::

    A = norm(W1 |T - V'|² + b1)           |·|² element-wise; W1 ∈ R^{s x d}; each row of
                                           A ∈ R^{L x s} L2-normalised
    Ā = mean over the caption's words of A   (padding excluded)
    S = tanh(W2 Ā + b2)                   W2 ∈ R^{1 x s}: one score in (-1, 1)

The extracted eq. 2 reads ``norm(W1(|T - V'|²) + b1)``; ``b1`` is the bias of the same FC layer
(SGRAF's ``sim_tranloc_w``), inside the normalisation. ``norm_T`` follows SCAN's
``clipped_l2norm`` on the ``(regions, words)`` attention matrix, which normalises along the
word axis; here the axis covers only the caption's real words, so padding never changes a score.
The paper's ``[x]_+`` is a plain ReLU (SCAN's code uses a leaky ReLU; we follow the paper).

:func:`pair_scores` scores every image of one block against every caption of another with
batched tensor ops: its intermediates have ``n_images x n_captions x L x max(d, s)`` entries.
:meth:`InteractionModel.pair_scores` splits a large block into shards whose intermediates stay
under a budget of elements (and trims each caption shard to its longest caption).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from itrlab.models.encoders import GRUTextEncoder, RegionEncoder
from itrlab.models.pooling import length_mask

DEFAULT_LAMBDA = 9.0
DEFAULT_SHARD_ELEMENTS = 1 << 21
"""Default budget of one shard's largest intermediate, in elements (2 M: 8 MB in float32).

Small enough for the intermediates to stay in cache on CPU, where bigger shards measured slower
per pair (memory-bound element-wise steps); large enough for each shard to be one big matmul.
"""
_EPS = 1e-12  # floor of the L2 norms (F.normalize's), so an all-zero vector stays zero


def pair_scores(regions: Tensor, words: Tensor, lengths: Tensor, *, lambda_: float,
                sim_weight: Tensor, sim_bias: Tensor | None, score_weight: Tensor,
                score_bias: Tensor | None) -> Tensor:
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
        (I, J) scores in (-1, 1), differentiable with respect to every input. When no gradient is
        needed (evaluation), the large intermediates are updated in place: same values, about half
        the memory traffic.
    """
    n_images, n_regions, dim = regions.shape
    n_captions, max_len, _ = words.shape
    inplace = not (torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (regions, words, sim_weight, sim_bias, score_weight, score_bias)))
    mask = length_mask(lengths.to(words.device), max_len)                 # (J, L)
    flat_words = words.reshape(n_captions * max_len, dim)                 # (J·L, d)
    # Cosine of every (image, caption, word, region): (I, J·L, R) by one broadcast matmul.
    x = torch.matmul(flat_words, regions.transpose(1, 2)).view(n_images, n_captions, max_len, n_regions)
    # Eq. 1: M = norm_T([T Vᵀ]_+), padding words out; the norm runs over the caption's words.
    word_mask = mask[None, :, :, None].to(x.dtype)
    x = x.clamp_(min=0).mul_(word_mask) if inplace else x.clamp(min=0) * word_mask
    scale = torch.linalg.vector_norm(x, dim=2, keepdim=True).clamp(min=_EPS) / lambda_
    x = x.div_(scale) if inplace else x / scale                           # λ M
    attention = torch.softmax(x, dim=3)                                   # softmax over the regions
    x = torch.bmm(attention.view(n_images, n_captions * max_len, n_regions), regions)  # V': (I, J·L, d)
    # Eq. 2: A = norm(W1 |T - V'|² + b1); Ā = mean over the caption's words; S = tanh(W2 Ā + b2).
    x = x.sub_(flat_words).square_() if inplace else (x - flat_words).square()
    x = F.linear(x, sim_weight, sim_bias)                                 # (I, J·L, s)
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=_EPS)
    x = (x.div_(norm) if inplace else x / norm).view(n_images, n_captions, max_len, -1)
    weights = mask.to(x.dtype) / lengths.to(x.device, x.dtype).clamp(min=1)[:, None]
    mean_alignment = torch.einsum("ijls,jl->ijs", x, weights)            # Ā: (I, J, s)
    return torch.tanh(F.linear(mean_alignment, score_weight, score_bias)).squeeze(-1)


class CrossAttentionSimilarity(nn.Module):
    """The learned part of eq. 1-2 on encoded features: λ, W1/b1 (d -> s) and W2/b2 (s -> 1)."""

    def __init__(self, embed_dim: int, sim_dim: int, lambda_: float = DEFAULT_LAMBDA):
        super().__init__()
        if not lambda_ > 0:
            raise ValueError(f"lambda_ must be > 0, got {lambda_!r}")
        self.lambda_ = float(lambda_)
        self.sim = nn.Linear(embed_dim, sim_dim)
        self.score = nn.Linear(sim_dim, 1)

    def forward(self, regions: Tensor, words: Tensor, lengths: Tensor) -> Tensor:
        """(I, J) scores of all pairs of the two blocks (see :func:`pair_scores`)."""
        return pair_scores(regions, words, lengths, lambda_=self.lambda_,
                           sim_weight=self.sim.weight, sim_bias=self.sim.bias,
                           score_weight=self.score.weight, score_bias=self.score.bias)


def _shard_sizes(n_images: int, n_captions: int, per_pair: int, budget: int) -> tuple[int, int]:
    """(images, captions) per shard so that ``images * captions * per_pair <= budget`` (at least 1 x 1).

    Captions are sharded first (whole image blocks make the fewest, largest matmuls); images only
    when even one caption against all images of the block is over budget.
    """
    pairs = max(1, budget // max(1, per_pair))
    if pairs >= n_images:
        return n_images, max(1, min(n_captions, pairs // n_images))
    return pairs, 1


class InteractionModel(nn.Module):
    """Region encoder + word-level BiGRU text encoder + cross-attention similarity (eq. 1-2)."""

    def __init__(self, image_encoder: RegionEncoder, text_encoder: GRUTextEncoder,
                 similarity: CrossAttentionSimilarity):
        super().__init__()
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.similarity = similarity

    @classmethod
    def build(cls, *, feature_dim: int, vocab_size: int, embed_dim: int, word_dim: int, num_layers: int,
              sim_dim: int, lambda_: float = DEFAULT_LAMBDA) -> "InteractionModel":
        return cls(
            RegionEncoder(feature_dim, embed_dim),  # only region_features() is used: no pooling, no head
            GRUTextEncoder(vocab_size, word_dim, embed_dim, num_layers),  # only word_features()
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

    def pair_scores(self, regions: Tensor, words: Tensor, lengths: Tensor,
                    max_elements: int | None = DEFAULT_SHARD_ELEMENTS) -> Tensor:
        """(I, J) scores of encoded images against encoded captions, in shards of bounded memory.

        Each shard's largest intermediate holds at most about ``max_elements`` entries
        (``images x captions x words x max(d, s)``); ``None`` scores everything in one shard.
        Captions are taken in order of length and each shard is trimmed to its longest caption,
        so short captions do not pay for long ones' padding. Loops run over shards only.
        """
        n_images, n_captions = regions.shape[0], words.shape[0]
        if n_images == 0 or n_captions == 0:
            return regions.new_zeros((n_images, n_captions))
        if max_elements is None:
            return self.similarity(regions, words[:, :int(lengths.max())], lengths)
        width = max(words.shape[-1], self.similarity.sim.out_features, regions.shape[1])
        lengths = lengths.to(words.device)
        order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[order].tolist()
        out = regions.new_empty((n_images, n_captions))
        c0 = 0
        while c0 < n_captions:  # longest captions first: a shard's first caption is its longest
            longest = int(sorted_lengths[c0])
            image_step, caption_step = _shard_sizes(n_images, n_captions - c0, longest * width, max_elements)
            if caption_step >= n_captions:  # the whole block is one shard: no copies
                return self.similarity(regions, words[:, :longest], lengths)
            index = order[c0:c0 + caption_step]
            shard_words, shard_lengths = words[index, :longest], lengths[index]
            for i0 in range(0, n_images, image_step):
                out[i0:i0 + image_step, index] = self.similarity(regions[i0:i0 + image_step], shard_words,
                                                                 shard_lengths)
            c0 += caption_step
        return out
