"""Device-resident training data (``train.data_path``): the split on the device, batches by indexing.

A :class:`ResidentSplit` copies the training split's region features onto the device once per run, in their stored dtype
(cast to float32 per batch, as the loader's items are), with every caption tokenized once into one padded (C, L_max)
tensor: a batch is a few index operations, with no per-item Python, host-to-device copy or collation. Batches are the
loader path's exactly (the order of :class:`~itrlab.data.dataset.ShardedBatchSampler`, the same fields, dtypes, trimming
and ``Batch.extras``), so on the CPU a run's losses and tables are bit-identical on either path.

:func:`choose_data_path` resolves ``auto``: resident on a GPU when the split fits in half of its free memory (the
other half for the model, evaluation and trials sharing the GPU), else the loader. On a CPU ``auto`` is the loader:
a memory map keeps one page-cache copy per node, shared by concurrent trials, where resident data would copy it into
every trial (docs/speed.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import torch
from torch import Tensor

from itrlab.data.dataset import Batch, CaptionDataset, stack_padded
from itrlab.data.precomp import PrecompSplit
from itrlab.gpu_memory import free_memory_bytes

DATA_PATHS = ("auto", "resident", "loader")
FREE_MEMORY_SHARE = 0.5  # auto: resident when the split needs at most this share of the free GPU memory
_CHUNK_BYTES = 256 << 20  # features are copied to the device in chunks of this size


def resident_bytes(split: PrecompSplit, max_len: int, text_width: int = 0) -> int:
    """Device memory a :class:`ResidentSplit` of ``split`` takes (features, padded tokens, lengths), at most:
    token ids take 8 bytes a token; stored text states (``text_width`` > 0) ``text_width`` float16 values."""
    features = split.features.size * split.features.dtype.itemsize
    per_token = 2 * text_width if text_width else 8
    return int(features + split.n_captions * (max_len * per_token + 16))


def choose_data_path(
    spec: str,
    device: torch.device,
    split: PrecompSplit,
    max_len: int,
    free_bytes: int | None = None,
    text_width: int = 0,
) -> str:
    """``resident`` or ``loader`` for ``train.data_path`` = ``spec`` on ``device``; ``free_bytes``: the device's free
    memory (default: ``torch.cuda.mem_get_info`` on a GPU); ``text_width``: the width of stored text states (0: token
    ids)."""
    if spec not in DATA_PATHS:
        raise ValueError(f"data path must be one of {', '.join(DATA_PATHS)}, got {spec!r}")
    if spec != "auto":
        return spec
    if device.type != "cuda":
        return "loader"
    if free_bytes is None:
        free_bytes = free_memory_bytes(device)
    return "resident" if resident_bytes(split, max_len, text_width) <= FREE_MEMORY_SHARE * free_bytes else "loader"


def load_features(features: np.ndarray, device: torch.device, chunk_bytes: int = _CHUNK_BYTES) -> Tensor:
    """The (N, R, D) features (a memory map) as one tensor on ``device``, in their dtype, copied in chunks
    (host memory holds one chunk at a time, never the whole file)."""
    out = torch.empty(features.shape, dtype=torch.from_numpy(np.empty(0, features.dtype)).dtype, device=device)
    row_bytes = max(1, int(np.prod(features.shape[1:])) * features.dtype.itemsize)
    rows = max(1, chunk_bytes // row_bytes)
    for start in range(0, features.shape[0], rows):
        chunk = torch.from_numpy(np.array(features[start : start + rows]))
        if device.type == "cuda":
            chunk = chunk.pin_memory()
        out[start : start + rows].copy_(chunk, non_blocking=device.type == "cuda")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out


class ResidentSplit:
    """A training split held on ``device``: features (N, R, D) in their stored dtype, tokens (C, L_max),
    lengths and image ids (C,); :meth:`batches` builds :class:`Batch` es by indexing them."""

    def __init__(self, dataset: CaptionDataset, device: torch.device):
        split = dataset.split
        self.device = device
        self.extra_fields = dict(dataset.extra_fields)
        split.check_intact()
        self.features = load_features(split.features, device)
        tokens, lengths = dataset.padded_captions()
        self.host_lengths = lengths  # the batch's longest caption is read here: no device sync per batch
        self.tokens = tokens.to(device)
        self.lengths = lengths.to(device)
        self.image_ids = torch.tensor([split.image_of(j) for j in range(split.n_captions)], dtype=torch.long).to(device)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.features, self.tokens, self.lengths, self.image_ids))

    def batch(self, indices: list[int]) -> Batch:
        """The :class:`Batch` of these caption indices, as :func:`collate` makes it from the loader's items."""
        host = torch.tensor(indices, dtype=torch.long)
        width = int(self.host_lengths[host].max())
        index = host.to(self.device, non_blocking=True)
        image_ids = self.image_ids[index]
        extras = {}
        if self.extra_fields:  # per item, as the loader calls them (they may change between epochs)
            extras = {
                name: stack_padded([fn(i) for i in indices]).to(self.device, non_blocking=True)
                for name, fn in self.extra_fields.items()
            }
        return Batch(
            images=self.features[image_ids].float(),
            tokens=self.tokens[index, :width],
            lengths=self.lengths[index],
            image_ids=image_ids,
            caption_ids=index,
            extras=extras,
        )

    def batches(self, sampler: Iterable[list[int]]) -> Iterator[Batch]:
        """One batch per list of indices that ``sampler`` (a ShardedBatchSampler) yields, in its order."""
        for indices in sampler:
            yield self.batch(indices)
