"""A pair-aligned memory bank of momentum embeddings: CODER's two queues B_v and B_w (C §3.2, eq. 6).

Slot ``m`` holds the momentum image embedding and the momentum caption embedding of one training
pair and that pair's image id (``-1`` while the slot is empty), so one id vector tells for both
queues which entries share an anchor's image (never negatives: sibling captions, repeats of the
image). Everything is a buffer: checkpoints, resume, retries and DDP carry the queue exactly.

Keys are enqueued after the loss, first-in first-out, as MoCo does; under data parallelism each
worker gathers the keys of every worker first (:func:`~itrlab.models.gather.gather_from_all`),
so all workers hold the same queue. The queue size must be a multiple of the enqueued batch.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from itrlab.models.gather import gather_from_all


class MomentumQueue(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        if size < 1:
            raise ValueError(f"the queue size must be >= 1, got {size}")
        self.size = size
        self.register_buffer("images", torch.zeros(size, dim))
        self.register_buffer("captions", torch.zeros(size, dim))
        self.register_buffer("image_ids", torch.full((size,), -1, dtype=torch.long))
        self.register_buffer("pointer", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def enqueue(self, images: Tensor, captions: Tensor, image_ids: Tensor) -> None:
        """Append one batch of (momentum image, momentum caption, image id) from every worker."""
        images, captions, image_ids = gather_from_all(images), gather_from_all(captions), gather_from_all(image_ids)
        batch = images.shape[0]
        if self.size % batch:
            raise ValueError(
                f"the queue size ({self.size}) must be a multiple of the enqueued batch ({batch} "
                "pairs: train.batch_size times the number of workers)"
            )
        start = int(self.pointer)
        self.images[start : start + batch] = images.to(self.images.dtype)
        self.captions[start : start + batch] = captions.to(self.captions.dtype)
        self.image_ids[start : start + batch] = image_ids
        self.pointer.fill_((start + batch) % self.size)

    @property
    def filled(self) -> int:
        return int((self.image_ids >= 0).sum())
