"""AsCL's type-II/III positives on stored token states (``model.text.encoder: precomp``; issue 42, item 2).

Stored text features hold each caption's token states, computed once by a frozen MiniLM, and no token ids: a
generated caption cannot be encoded again. Its states are cut and joined instead, the same edits
:class:`~itrlab.methods.ascl.text_augment.PositiveGenerator` makes on ids (docs/papers/ascl.md#stored-text-features):

* type II (concatenation of two captions of the image): the first caption's ``[CLS]`` and content states, then
  the second's content and ``[SEP]`` states;
* type III (truncation): the caption's ``[CLS]``, its first ⌈n/2⌉ content states (word pieces: no ids tell
  where a word ends) and its ``[SEP]``.

Each state keeps the context it was computed in (a truncated caption's states still saw its second half),
which the paper's re-encoded captions would not. The edits run on *position ids*: content token ``p`` of
caption ``c`` of the training split is ``c * stride + p + 1``, so the id generator draws exactly as on
token ids (same candidates, the same caption from the batch and the pool counted once), and the states are
gathered afterwards from the batch or, for the pool's captions, from the training split's stored states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from itrlab.methods.ascl.text_augment import PositiveGenerator

FRAME = 2  # [CLS] and [SEP]: the first and last stored state of a caption


class StoredCaptions(Protocol):
    """A split's stored states: ``len``, ``split[c]`` (L_c, H) and ``kept(c)`` (L_c); e.g.
    :class:`~itrlab.data.text_features.SplitText`."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Tensor: ...

    def kept(self, index: int) -> int: ...


class StatePool:
    """The training split's captions by image id, as position ids (module docstring), for type II's pool.

    ``get(image_id)`` -> the content position ids of each of the image's ``captions_per_image`` captions;
    ``states(c)`` -> caption ``c``'s stored states (L_c, H) float32. Shared, never copied (like
    :class:`~itrlab.methods.ascl.networks.CaptionPool`).
    """

    def __init__(self, captions: StoredCaptions, captions_per_image: int, stride: int):
        self.captions, self.cpi, self.stride = captions, captions_per_image, stride

    def __deepcopy__(self, memo: dict) -> StatePool:
        return self

    def get(self, image_id: int, default: Sequence = ()) -> list[list[int]]:
        first = int(image_id) * self.cpi
        if not 0 <= first < len(self.captions):
            return list(default)
        return [content_ids(c, self.captions.kept(c), self.stride) for c in range(first, first + self.cpi)]

    def states(self, caption: int) -> Tensor:
        return self.captions[caption].float()


def content_ids(caption: int, length: int, stride: int) -> list[int]:
    """Position ids of caption ``caption``'s content tokens (its states 1 .. length - 2)."""
    return [caption * stride + p + 1 for p in range(1, max(length - 1, 1))]


def stored_positives(
    generator: PositiveGenerator,
    states: Tensor,
    lengths: Tensor,
    image_ids: Tensor,
    caption_ids: Tensor,
    random: torch.Generator | None,
    pool: StatePool | None,
    stride: int,
) -> tuple[Tensor, Tensor]:
    """``T⁺`` as stored states (B, L', H) float32, zero at padding, and lengths (B,) (module docstring).

    ``generator`` edits position ids (it must frame nothing: ``start_id = end_id = None``); ``stride`` exceeds
    every caption's length. Captions of the batch are read from ``states``, others from ``pool``.
    """
    if generator.start_id is not None or generator.end_id is not None:
        raise ValueError("stored positives frame the states themselves: the id generator must frame nothing")
    if int(lengths.max()) > stride:
        raise ValueError(f"a caption of {int(lengths.max())} states does not fit the stride {stride}")
    batch = {int(c): row for row, c in enumerate(caption_ids.tolist())}
    sizes = [int(n) for n in lengths.tolist()]
    width = max(max(len(content_ids(0, n, stride)) for n in sizes), 1)
    ids = torch.zeros((len(sizes), width), dtype=torch.long)
    for row, (caption, n) in enumerate(zip(caption_ids.tolist(), sizes)):
        content = content_ids(int(caption), n, stride)
        ids[row, : len(content)] = torch.tensor(content, dtype=torch.long)
    content_lengths = torch.tensor([max(n - FRAME, 0) for n in sizes], dtype=torch.long)
    edited, edited_lengths, _ = generator(ids, content_lengths, image_ids.cpu(), random, pool=pool)
    cache: dict[int, Tensor] = {}

    def caption_states(caption: int) -> Tensor:
        if caption not in cache:
            row = batch.get(caption)
            cache[caption] = states[row, : sizes[row]].float() if row is not None else pool.states(caption)
        return cache[caption]

    out_rows = []
    for row, n in enumerate(edited_lengths.tolist()):
        positions = [divmod(int(i) - 1, stride) for i in edited[row, :n].tolist()]
        if not positions:  # nothing to edit: the caption itself
            out_rows.append(caption_states(int(caption_ids[row])))
            continue
        first, last = caption_states(positions[0][0]), caption_states(positions[-1][0])
        body = [caption_states(c)[p] for c, p in positions]
        out_rows.append(torch.stack([first[0], *body, last[-1]]))
    out_lengths = torch.tensor([len(r) for r in out_rows], dtype=torch.long)
    out = states.new_zeros((len(out_rows), int(out_lengths.max()), states.shape[-1]), dtype=torch.float32)
    for row, value in enumerate(out_rows):
        out[row, : len(value)] = value
    return out.to(states.device), out_lengths.to(lengths.device)


__all__ = ["StatePool", "StoredCaptions", "content_ids", "stored_positives"]
