"""Image and caption encoders of the dual-encoder model.

Image: region features (B, R, D) -> linear projection -> pooling -> L2 norm.
Text: word ids -> embedding -> BiGRU (forward and backward halves averaged) -> pooling -> L2 norm.
An optional projection head (ConVSE's two-layer MLP, §IV-A.2) sits before the normalisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from itrlab.models.pooling import build_pooling


class ProjectionHead(nn.Module):
    """ConVSE's non-linear head: FC(hidden) -> ReLU -> FC(embed_dim)."""

    def __init__(self, embed_dim: int, hidden_dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(embed_dim, hidden_dim), nn.ReLU(inplace=True), nn.Linear(hidden_dim, embed_dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class RegionEncoder(nn.Module):
    def __init__(self, feature_dim: int, embed_dim: int, pooling: str = "mean", projection_hidden: int | None = None):
        super().__init__()
        self.fc = nn.Linear(feature_dim, embed_dim)
        self.pool = build_pooling(pooling)
        self.head = ProjectionHead(embed_dim, projection_hidden) if projection_hidden else nn.Identity()

    def forward(self, regions: Tensor, n_regions: Tensor | None = None) -> Tensor:
        if n_regions is None:
            n_regions = regions.new_full((regions.size(0),), regions.size(1), dtype=torch.long)
        pooled = self.pool(self.fc(regions), n_regions)
        return F.normalize(self.head(pooled), dim=-1)


class GRUTextEncoder(nn.Module):
    def __init__(self, vocab_size: int, word_dim: int, embed_dim: int, num_layers: int = 1,
                 pooling: str = "mean", projection_hidden: int | None = None):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.gru = nn.GRU(word_dim, embed_dim, num_layers=num_layers, batch_first=True, bidirectional=True)
        self.pool = build_pooling(pooling)
        self.head = ProjectionHead(embed_dim, projection_hidden) if projection_hidden else nn.Identity()
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        half = out.size(-1) // 2
        words = (out[..., :half] + out[..., half:]) / 2
        return F.normalize(self.head(self.pool(words, lengths)), dim=-1)

