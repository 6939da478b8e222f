"""Image and caption encoders of the dual-encoder model.

Image: region features (B, R, D) -> linear projection -> pooling -> L2 norm. Text: word ids -> embedding -> BiGRU
(forward and backward halves averaged) -> pooling -> L2 norm. An optional projection head (ConVSE's two-layer MLP,
§IV-A.2) sits before the normalisation; ``head=False`` gives the embedding before it (:func:`unit_embedding`). The
features before pooling (``RegionEncoder.region_features``, ``GRUTextEncoder.word_features``) are what interaction
models (:mod:`itrlab.models.interaction`) use.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from itrlab.models.batched import MaskedGRU
from itrlab.models.glove import GloveEmbedding
from itrlab.models.pooling import build_pooling


def unit_embedding(head: nn.Module, pooled: Tensor, through_head: bool = True) -> Tensor:
    """Pooled features (B, d) as unit vectors: through the projection ``head`` (``nn.Identity`` in a model without
    one), or before it (``through_head=False``: the base network's embedding, which SimCLR's reading evaluates)."""
    return F.normalize(head(pooled) if through_head else pooled, dim=-1)


class ProjectionHead(nn.Module):
    """ConVSE's non-linear head (§IV-A.2): FC(hidden) -> ReLU -> FC(embed_dim).

    Both layers start with Xavier-uniform weights and zero biases, as VSE++'s and SimCLR's heads do. With PyTorch's
    default ``nn.Linear`` init the bias is as large as the weights' response to a unit-norm input, so every input leaves
    the head almost the same vector (mean cosine 0.79 between random unit inputs' outputs, against 0.30), and a ConVSE++
    started from its base network sat on its hinge's plateau at chance (docs/training.md#stages).
    """

    def __init__(self, embed_dim: int, hidden_dim: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim), nn.ReLU(inplace=True), nn.Linear(hidden_dim, embed_dim)
        )
        for layer in (self.net[0], self.net[2]):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class RegionEncoder(nn.Module):
    def __init__(self, feature_dim: int, embed_dim: int, pooling: str = "mean", projection_hidden: int | None = None):
        super().__init__()
        self.fc = nn.Linear(feature_dim, embed_dim)
        self.pool = build_pooling(pooling)
        self.head = ProjectionHead(embed_dim, projection_hidden) if projection_hidden else nn.Identity()

    def region_features(self, regions: Tensor) -> Tensor:
        """(B, R, embed_dim) projected region features, before pooling (not normalised)."""
        return self.fc(regions)

    def forward(self, regions: Tensor, n_regions: Tensor | None = None, head: bool = True) -> Tensor:
        """(B, embed_dim) unit vectors: through the projection head, or before it (``head=False``)."""
        if n_regions is None:
            n_regions = regions.new_full((regions.size(0),), regions.size(1), dtype=torch.long)
        pooled = self.pool(self.region_features(regions), n_regions)
        return unit_embedding(self.head, pooled, head)


class GRUTextEncoder(nn.Module):
    """Word embedding -> BiGRU -> pooling -> (head) -> L2 norm. ``glove=True`` makes the embedding a
    :class:`~itrlab.models.glove.GloveEmbedding`, filled by :func:`~itrlab.models.glove.init_glove_embeddings` once the
    vocabulary is known."""

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        embed_dim: int,
        num_layers: int = 1,
        pooling: str = "mean",
        projection_hidden: int | None = None,
        glove: bool = False,
    ):
        super().__init__()
        if glove:
            self.embed = GloveEmbedding(vocab_size, word_dim)  # initialises its own rows
        else:
            self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.gru = nn.GRU(word_dim, embed_dim, num_layers=num_layers, batch_first=True, bidirectional=True)
        self.pool = build_pooling(pooling)
        self.head = ProjectionHead(embed_dim, projection_hidden) if projection_hidden else nn.Identity()
        if not glove:
            nn.init.uniform_(self.embed.weight, -0.1, 0.1)

    def word_features(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """(B, L, embed_dim) word features, the BiGRU's forward and backward states averaged; zero at and past each
        length; not normalised."""
        return self.features_from_embeddings(self.input_embeddings(tokens), lengths)

    def input_embeddings(self, tokens: Tensor) -> Tensor:
        """(B, L, word_dim) word embeddings: the BiGRU's input (where AsCL injects its noise)."""
        return self.embed(tokens)

    def features_from_embeddings(self, embeddings: Tensor, lengths: Tensor) -> Tensor:
        """:meth:`word_features` from given input embeddings (B, L, word_dim), perturbed or not."""
        if isinstance(self.gru, MaskedGRU):  # grouped training (itrlab.models.batched): no packing under vmap
            out = self.gru(embeddings, lengths)
        else:
            packed = pack_padded_sequence(embeddings, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = self.gru(packed)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=embeddings.size(1))
        half = out.size(-1) // 2
        return (out[..., :half] + out[..., half:]) / 2

    def pool_features(self, words: Tensor, lengths: Tensor, head: bool = True) -> Tensor:
        """(B, embed_dim) unit vectors from word features: pooling, head (unless ``head=False``), L2 norm."""
        return unit_embedding(self.head, self.pool(words, lengths), head)

    def forward(self, tokens: Tensor, lengths: Tensor, head: bool = True) -> Tensor:
        return self.pool_features(self.word_features(tokens, lengths), lengths, head)
