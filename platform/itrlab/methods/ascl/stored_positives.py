"""AsCL's type-II/III positives on stored token states (``model.text.encoder: precomp``).

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


Layout = list[list[tuple[int, int]]]  # per generated caption: the (caption, position) of each of its states


def positive_layout(
    generator: PositiveGenerator,
    lengths: Tensor,
    image_ids: Tensor,
    caption_ids: Tensor,
    random: torch.Generator | None,
    pool: StatePool | None,
    stride: int,
) -> Layout:
    """Where each ``T⁺``'s states come from: per generated caption, the (training caption, position) of each of its
    states, frame included (module docstring). ``generator`` edits position ids (it must frame nothing:
    ``start_id = end_id = None``); ``stride`` exceeds every caption's length; captions outside the batch
    (``caption_ids``, whose lengths are ``lengths``) are the ``pool``'s."""
    if generator.start_id is not None or generator.end_id is not None:
        raise ValueError("stored positives frame the states themselves: the id generator must frame nothing")
    if int(lengths.max()) > stride:
        raise ValueError(f"a caption of {int(lengths.max())} states does not fit the stride {stride}")
    sizes = [int(n) for n in lengths.tolist()]
    batch = {int(c): n for c, n in zip(caption_ids.tolist(), sizes)}
    width = max(max(len(content_ids(0, n, stride)) for n in sizes), 1)
    ids = torch.zeros((len(sizes), width), dtype=torch.long)
    for row, (caption, n) in enumerate(zip(caption_ids.tolist(), sizes)):
        content = content_ids(int(caption), n, stride)
        ids[row, : len(content)] = torch.tensor(content, dtype=torch.long)
    content_lengths = torch.tensor([max(n - FRAME, 0) for n in sizes], dtype=torch.long)
    edited, edited_lengths, _ = generator(ids, content_lengths, image_ids.cpu(), random, pool=pool)

    def length(caption: int) -> int:
        return batch[caption] if caption in batch else pool.captions.kept(caption)

    layout = []
    for row, n in enumerate(edited_lengths.tolist()):
        positions = [divmod(int(i) - 1, stride) for i in edited[row, :n].tolist()]
        if not positions:  # nothing to edit: the caption itself
            caption = int(caption_ids[row])
            layout.append([(caption, p) for p in range(sizes[row])])
            continue
        first, last = positions[0][0], positions[-1][0]
        layout.append([(first, 0), *positions, (last, length(last) - 1)])
    return layout


def layout_states(layout: Layout, states: Tensor, caption_ids: Tensor, lengths: Tensor, pool: StatePool | None):
    """``T⁺`` as stored states (B, L', H) float32, zero at padding, and lengths (B,): the states ``layout`` names,
    read from the batch's ``states`` (captions ``caption_ids``) or the ``pool``."""
    batch = {int(c): row for row, c in enumerate(caption_ids.tolist())}
    sizes = [int(n) for n in lengths.tolist()]
    cache: dict[int, Tensor] = {}

    def caption_states(caption: int) -> Tensor:
        if caption not in cache:
            row = batch.get(caption)
            cache[caption] = states[row, : sizes[row]].float() if row is not None else pool.states(caption)
        return cache[caption]

    out_lengths = torch.tensor([len(row) for row in layout], dtype=torch.long)
    out = states.new_zeros((len(layout), int(out_lengths.max()), states.shape[-1]), dtype=torch.float32)
    for row, places in enumerate(layout):
        out[row, : len(places)] = torch.stack([caption_states(c)[p] for c, p in places])
    return out.to(states.device), out_lengths.to(lengths.device)


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
    """``T⁺`` as stored states (B, L', H) float32, zero at padding, and lengths (B,) (module docstring):
    :func:`positive_layout`, read by :func:`layout_states`."""
    layout = positive_layout(generator, lengths, image_ids, caption_ids, random, pool, stride)
    return layout_states(layout, states, caption_ids, lengths, pool)


__all__ = [
    "Layout",
    "StatePool",
    "StoredCaptions",
    "content_ids",
    "layout_states",
    "positive_layout",
    "stored_positives",
]
