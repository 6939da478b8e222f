"""Pooling of a set of feature vectors (regions or words) into one vector.

``MeanPooling`` averages the valid positions. ``GPO`` is the Generalized Pooling Operator of VSE∞
(Chen et al., CVPR 2021): each feature dimension is sorted in descending order over the valid
positions and summed with weights that a small bidirectional GRU computes from sinusoidal
encodings of the positions (so the weights depend only on the set's size, not on its content).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def length_mask(lengths: Tensor, max_len: int) -> Tensor:
    """(B, max_len) boolean mask, True at the valid positions."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


class MeanPooling(nn.Module):
    def forward(self, features: Tensor, lengths: Tensor) -> Tensor:
        mask = length_mask(lengths, features.size(1)).unsqueeze(-1).to(features.dtype)
        return (features * mask).sum(1) / lengths.clamp(min=1).unsqueeze(-1).to(features.dtype)


def sinusoid_encoding(length: int, dim: int) -> Tensor:
    """(length, dim) sinusoidal position encodings (Vaswani et al.)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    encoding = torch.zeros(length, dim)
    encoding[:, 0::2] = torch.sin(position * frequency)
    encoding[:, 1::2] = torch.cos(position * frequency)
    return encoding


class GPO(nn.Module):
    """VSE∞'s generalized pooling: weights from a BiGRU over position encodings, applied to sorted features."""

    def __init__(self, position_dim: int = 32, hidden_dim: int = 32, temperature: float = 0.1):
        super().__init__()
        self.position_dim = position_dim
        self.temperature = temperature
        self.gru = nn.GRU(position_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.score = nn.Linear(hidden_dim, 1, bias=False)

    def weights(self, lengths: Tensor, max_len: int) -> Tensor:
        """(B, max_len, 1) pooling weights; zero beyond each length."""
        mask = length_mask(lengths, max_len).unsqueeze(-1)
        positions = sinusoid_encoding(max_len, self.position_dim).to(lengths.device)
        positions = positions.expand(lengths.size(0), -1, -1).masked_fill(~mask, 0.0)
        packed = pack_padded_sequence(positions, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=max_len)
        half = out.size(-1) // 2
        scores = self.score((out[..., :half] + out[..., half:]) / 2)
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores / self.temperature, dim=1)

    def forward(self, features: Tensor, lengths: Tensor) -> Tensor:
        max_len = features.size(1)
        mask = length_mask(lengths, max_len).unsqueeze(-1)
        ordered = features.masked_fill(~mask, float("-inf")).sort(dim=1, descending=True).values
        ordered = ordered.masked_fill(~mask, 0.0)
        return (ordered * self.weights(lengths, max_len)).sum(1)


def build_pooling(name: str) -> nn.Module:
    if name == "mean":
        return MeanPooling()
    if name == "gpo":
        return GPO()
    raise ValueError(f"unknown pooling {name!r}; allowed: mean, gpo")
