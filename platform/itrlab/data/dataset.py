"""Torch datasets and batches over a :class:`~itrlab.data.precomp.PrecompSplit`.

Training iterates captions, each paired with its image's region features (``features[j // cpi]``, float32 per item)
and its image id, so that losses treat two captions of one image as each other's positives. Evaluation encodes a
split once, in split order: :class:`ImageDataset` each image, :class:`CaptionTextDataset` each caption
(:func:`eval_loaders`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from itrlab.data.precomp import PrecompSplit
from itrlab.data.text_features import TextFeatures
from itrlab.data.vocab import PAD_ID, Vocabulary

DEFAULT_MAX_LEN = 64  # tokens per caption, <start> and <end> included


def _apply(value, fn):
    return {k: fn(v) for k, v in value.items()} if isinstance(value, dict) else fn(value)


class _Movable:
    """``to(device)`` and ``pin_memory()`` for dataclasses of tensors (and dicts of tensors)."""

    def to(self, device: torch.device | str, non_blocking: bool = False):
        return type(self)(
            **{
                f.name: _apply(getattr(self, f.name), lambda t: t.to(device, non_blocking=non_blocking))
                for f in fields(self)
            }
        )

    def pin_memory(self):  # called by DataLoader(pin_memory=True)
        return type(self)(**{f.name: _apply(getattr(self, f.name), lambda t: t.pin_memory()) for f in fields(self)})


@dataclass
class Batch(_Movable):
    """A training batch of B (image, caption) pairs."""

    images: Tensor  # (B, R, D) float32 region features of each pair's image
    tokens: Tensor  # (B, L) long, padded with 0 (<pad>); stored text features: (B, L, H) token states
    lengths: Tensor  # (B,) long, true lengths (<start> and <end> included)
    image_ids: Tensor  # (B,) long, image index in the split; equal ids are positives
    caption_ids: Tensor  # (B,) long, caption index in the split
    extras: dict[str, Tensor] = field(default_factory=dict)  # per-sample fields a method asked for

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


@dataclass
class ImageBatch(_Movable):
    """Images of a split, for encoding the whole split."""

    images: Tensor  # (B, R, D) float32
    image_ids: Tensor  # (B,) long


@dataclass
class TextBatch(_Movable):
    """Captions of a split, for encoding the whole split."""

    tokens: Tensor  # (B, L) long, padded with 0; stored text features: (B, L, H) token states
    lengths: Tensor  # (B,) long
    caption_ids: Tensor  # (B,) long
    image_ids: Tensor  # (B,) long, the image each caption describes


class _EncodedCaptions:
    """All captions of a split encoded once, stored flat (cheap to pickle to workers)."""

    def __init__(self, split: PrecompSplit, vocab: Vocabulary, max_len: int):
        encoded = [vocab.encode(c, max_len=max_len) for c in split.captions]
        self.lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.ids = np.fromiter((i for e in encoded for i in e), dtype=np.int64, count=int(self.offsets[-1]))

    def __getitem__(self, index: int) -> Tensor:
        return torch.from_numpy(self.ids[self.offsets[index] : self.offsets[index + 1]].copy())

    def padded(self) -> tuple[Tensor, Tensor]:
        """All captions as one (C, L_max) long tensor padded with ``<pad>`` = 0, and their lengths (C,)."""
        lengths = torch.from_numpy(self.lengths)
        tokens = torch.full((len(self.lengths), int(self.lengths.max(initial=1))), PAD_ID, dtype=torch.long)
        tokens[length_positions(lengths, tokens.shape[1])] = torch.from_numpy(self.ids)
        return tokens, lengths


def encoded_captions(split: PrecompSplit, vocab, max_len: int):
    """Every caption of ``split`` as the text encoder reads it: token ids of ``vocab`` (a vocabulary or a
    pretrained tokenizer), or, when ``vocab`` is stored :class:`~itrlab.data.text_features.TextFeatures`, the
    stored token states (checked against the split's captions)."""
    if isinstance(vocab, TextFeatures):
        return vocab.open_split(split.split, split.captions, max_len)
    return _EncodedCaptions(split, vocab, max_len)


def length_positions(lengths: Tensor, width: int) -> Tensor:
    """(C, width) bool, True at the first ``lengths[c]`` positions of each row."""
    return torch.arange(width)[None, :] < lengths[:, None]


class CaptionDataset(Dataset):
    """One item per caption: ``(image features (R, D), token ids (L,), image id, caption id)``,
    plus a dict of extra fields when ``extra_fields`` names some (name -> function of the caption
    index giving a tensor; a method asks for them with ``MethodModule.batch_extras``)."""

    def __init__(
        self,
        split: PrecompSplit,
        vocab: Vocabulary,
        max_len: int = DEFAULT_MAX_LEN,
        extra_fields: Mapping[str, Callable[[int], Tensor]] | None = None,
    ):
        self.split = split
        self.vocab = vocab
        self.max_len = max_len
        self.extra_fields = dict(extra_fields or {})
        self._captions = encoded_captions(split, vocab, max_len)

    def __len__(self) -> int:
        return self.split.n_captions

    def __getitem__(self, index: int) -> tuple:
        image = self.split.image_of(index)
        item = (torch.from_numpy(self.split.image_features(image)), self._captions[index], image, index)
        if self.extra_fields:
            item += ({name: fn(index) for name, fn in self.extra_fields.items()},)
        return item

    def padded_captions(self) -> tuple[Tensor, Tensor]:
        """Every caption's token ids, (C, L_max) padded with 0, and lengths (C,): for device-resident batches."""
        return self._captions.padded()


class ImageDataset(Dataset):
    """Each image of a split once, in order: ``(image features (R, D), image id)``."""

    def __init__(self, split: PrecompSplit):
        self.split = split

    def __len__(self) -> int:
        return self.split.n_images

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return torch.from_numpy(self.split.image_features(index)), index


class CaptionTextDataset(Dataset):
    """Each caption of a split once, in order: ``(token ids (L,), caption id, image id)``."""

    def __init__(self, split: PrecompSplit, vocab: Vocabulary, max_len: int = DEFAULT_MAX_LEN):
        self.split = split
        self._captions = encoded_captions(split, vocab, max_len)

    def __len__(self) -> int:
        return self.split.n_captions

    def __getitem__(self, index: int) -> tuple[Tensor, int, int]:
        return self._captions[index], index, self.split.image_of(index)


def pad_tokens(sequences: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Stack token tensors into (B, L_max) padded with ``<pad>`` = 0, plus their lengths; (L, H) stored
    token states stack into (B, L_max, H), zero at padding."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    first = sequences[0]
    tokens = torch.full((len(sequences), int(lengths.max()), *first.shape[1:]), PAD_ID, dtype=first.dtype)
    for row, seq in enumerate(sequences):
        tokens[row, : len(seq)] = seq
    return tokens, lengths


def stack_padded(values: list[Tensor]) -> Tensor:
    """Stack tensors, zero-padding along the first axis when their lengths differ."""
    longest = max(v.shape[0] if v.dim() else 0 for v in values)
    if all(v.dim() == 0 or v.shape[0] == longest for v in values):
        return torch.stack(values)
    out = values[0].new_zeros((len(values), longest, *values[0].shape[1:]))
    for row, value in enumerate(values):
        out[row, : value.shape[0]] = value
    return out


def collate(items: list[tuple]) -> Batch:
    """Collate :class:`CaptionDataset` items into a :class:`Batch` (captions keep their order)."""
    images, token_seqs, image_ids, caption_ids = (list(part) for part in zip(*(item[:4] for item in items)))
    tokens, lengths = pad_tokens(token_seqs)
    extras = {}
    if len(items[0]) > 4:
        extras = {name: stack_padded([item[4][name] for item in items]) for name in items[0][4]}
    return Batch(
        images=torch.stack(images),
        tokens=tokens,
        lengths=lengths,
        image_ids=torch.tensor(image_ids, dtype=torch.long),
        caption_ids=torch.tensor(caption_ids, dtype=torch.long),
        extras=extras,
    )


def collate_images(items: list[tuple[Tensor, int]]) -> ImageBatch:
    images, image_ids = zip(*items)
    return ImageBatch(torch.stack(images), torch.tensor(image_ids, dtype=torch.long))


def collate_texts(items: list[tuple[Tensor, int, int]]) -> TextBatch:
    token_seqs, caption_ids, image_ids = zip(*items)
    tokens, lengths = pad_tokens(list(token_seqs))
    return TextBatch(
        tokens, lengths, torch.tensor(caption_ids, dtype=torch.long), torch.tensor(image_ids, dtype=torch.long)
    )


class ShardedBatchSampler(Sampler[list[int]]):
    """Batches of one seeded shuffle of ``n`` items, dealt round-robin to ``world_size`` workers.

    The permutation is the one a seeded, shuffling ``DataLoader`` draws (its generator first gives the workers' base
    seed), cut into batches of ``batch_size`` (the incomplete last one dropped). Worker ``rank`` takes global batches
    ``rank, rank + world_size, ...``, as many as every worker gets, so each item is in at most one worker's batches per
    epoch.
    """

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.n, self.batch_size, self.seed, self.rank, self.world_size = n, batch_size, int(seed), rank, world_size

    def permutation(self) -> Tensor:
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        torch.empty((), dtype=torch.int64).random_(generator=generator)  # the loader's worker base seed
        return torch.randperm(self.n, generator=generator)

    def __len__(self) -> int:
        return self.n // self.batch_size // self.world_size

    def __iter__(self) -> Iterator[list[int]]:
        order = self.permutation()
        for step in range(len(self)):
            start = (step * self.world_size + self.rank) * self.batch_size
            yield order[start : start + self.batch_size].tolist()


def make_loader(
    dataset: CaptionDataset,
    batch_size: int,
    shuffle: bool,
    seed: int,
    drop_last: bool = False,
    num_workers: int = 0,
    pin_memory: bool = False,
    rank: int = 0,
    world_size: int = 1,
) -> DataLoader:
    """A training loader of :class:`Batch` with a seeded shuffle (``pin_memory`` for GPU training). With ``shuffle`` and
    ``drop_last`` its batches come from a :class:`ShardedBatchSampler`; otherwise it owns a ``torch.Generator`` seeded
    with ``seed``. An exact order on resume needs a fresh loader per epoch, seeded from ``(seed, epoch)``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    common = dict(
        num_workers=num_workers,
        collate_fn=collate,
        generator=generator,
        persistent_workers=False,
        pin_memory=pin_memory,
    )
    if shuffle and drop_last:
        sampler = ShardedBatchSampler(len(dataset), batch_size, seed, rank, world_size)
        return DataLoader(dataset, batch_sampler=sampler, **common)
    if world_size != 1:
        raise ValueError("sharding across workers needs shuffle=True and drop_last=True")
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, **common)


def eval_loaders(
    split: PrecompSplit, vocab: Vocabulary, batch_size: int = 128, max_len: int = DEFAULT_MAX_LEN, num_workers: int = 0
) -> tuple[DataLoader, DataLoader]:
    """Unshuffled loaders of :class:`ImageBatch` over every image (N) and :class:`TextBatch` over every caption (cpi x
    N) of a split, in split order: row ``i`` of the encoded images is image ``i``."""
    images = DataLoader(
        ImageDataset(split), batch_size=batch_size, shuffle=False, num_workers=num_workers, collate_fn=collate_images
    )
    texts = DataLoader(
        CaptionTextDataset(split, vocab, max_len),
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        collate_fn=collate_texts,
    )
    return images, texts
