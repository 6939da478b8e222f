"""Model parts that run under ``torch.func.vmap``: what grouped training (:mod:`itrlab.train.grouped`) swaps in for the
parts that do not.

``nn.GRU`` over a packed sequence does not vmap: ``pack_padded_sequence`` reads the lengths on the host and the fused
RNN kernels have no batching rule. :class:`MaskedGRU` is the same recurrence as matrix products, holding the nn.GRU's
own parameters (a state dict fits both), so that under vmap every product is one grouped matmul. For each direction and
layer (PyTorch's equations, gates in the order r, z, n)::

    r = σ(W_ir x_t + b_ir + W_hr h + b_hr)
    z = σ(W_iz x_t + b_iz + W_hz h + b_hz)
    n = tanh(W_in x_t + b_in + r ⊙ (W_hn h + b_hn))
    h' = n + z ⊙ (h - n)                       ( = (1 - z) ⊙ n + z ⊙ h )

A mask emulates packing: past a caption's length the state is kept and the output is 0, so the forward direction
ends at the last word and the backward one starts there from a zero state, as with ``pack_padded_sequence``.
:func:`make_batchable` swaps every ``nn.GRU`` of a module for a :class:`MaskedGRU` and switches the cross-attention
scorer to its padded form (:class:`~itrlab.models.interaction.CrossAttentionSimilarity`'s ``padded``): packing words
by a boolean mask has a data-dependent shape, which vmap cannot batch.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from itrlab.models.pooling import length_mask


class MaskedGRU(nn.Module):
    """A (bi)directional multi-layer GRU over padded input with lengths, as matmuls (vmap-able), holding an ``nn.GRU``'s
    (``batch_first=True``) Parameter objects under their names. ``forward(x, lengths)`` returns
    ``(B, L, directions * hidden)``, zero past each length:
    ``pad_packed_sequence(gru(pack_padded_sequence(x, lengths)))``."""

    def __init__(self, gru: nn.GRU):
        super().__init__()
        if not gru.batch_first or gru.proj_size or gru.dropout:
            raise ValueError("MaskedGRU takes a batch_first nn.GRU without projection or dropout")
        self.hidden_size, self.num_layers, self.bidirectional = gru.hidden_size, gru.num_layers, gru.bidirectional
        self.bias = gru.bias
        for name, parameter in gru.named_parameters(recurse=False):
            self.register_parameter(name, parameter)

    def _weights(self, layer: int, suffix: str) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}", None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _direction(self, x: Tensor, mask: Tensor, layer: int, reverse: bool) -> Tensor:
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, "_reverse" if reverse else "")
        gates_x = nn.functional.linear(x, w_ih, b_ih)  # (B, L, 3H): every step's input part at once
        h = x.new_zeros(x.shape[0], self.hidden_size)
        outputs: list[Tensor] = []
        steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
        for t in steps:
            i_r, i_z, i_n = gates_x[:, t].chunk(3, dim=-1)
            h_r, h_z, h_n = nn.functional.linear(h, w_hh, b_hh).chunk(3, dim=-1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            new = n + z * (h - n)
            valid = mask[:, t, None]
            h = torch.where(valid, new, h)
            outputs.append(torch.where(valid, new, torch.zeros_like(new)))
        if reverse:
            outputs.reverse()
        return torch.stack(outputs, dim=1)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        mask = length_mask(lengths.to(x.device), x.shape[1])
        for layer in range(self.num_layers):
            directions = [self._direction(x, mask, layer, False)]
            if self.bidirectional:
                directions.append(self._direction(x, mask, layer, True))
            x = torch.cat(directions, dim=-1)
        return x


def make_batchable(module: nn.Module) -> nn.Module:
    """``module`` with every ``nn.GRU`` replaced by a :class:`MaskedGRU` over the same parameters and
    every cross-attention scorer set to its padded form (in place; returned for convenience)."""
    for name, child in list(module.named_children()):
        if isinstance(child, nn.GRU):
            setattr(module, name, MaskedGRU(child))
        else:
            make_batchable(child)
    if hasattr(module, "padded"):
        module.padded = True
    return module
