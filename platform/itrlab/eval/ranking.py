"""Ranks of a whole split from a block-wise score function, in one pass over ``S``.

``N`` images and ``captions_per_image * N`` captions, caption ``j`` of image ``j // captions_per_image``; ``S[i, j]`` is
the similarity of image ``i`` and caption ``j``, never materialised whole: a :data:`ScoreFn` returns one block,
``score_fn(image_slice, caption_slice) -> S[image_slice, caption_slice]``.

Ranks are 0-based. **Tie rule (pessimistic):** a positive's rank is the number of *negatives* that score at least as
high, so a collapsed model whose scores are all equal gets the worst ranks, not R@1 = 100:

* image->text: ``i2t[i] = #{captions j of other images : S[i, j] >= max_k S[i, own caption k]}``; * text->image:
``t2i[j] = #{images i != j // cpi : S[i, j] >= S[j // cpi, j]}``.

:func:`compute_ranks`, per block ``B`` of ``image_chunk`` images: the diagonal block ``S[B, captions of B]`` holds
every positive of ``B`` (each image's best own score, each caption's ``gt``) and the counts within it; the blocks
``S[B, captions before B]`` and ``S[B, captions after B]`` add their counts, rows against the images' best own scores
(i2t), columns against the captions' ``gt`` (t2i). Each entry of ``S`` is scored once, by at most three calls per
block and none per query, so an interaction model costs no more than the dense matrix would.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

ScoreFn = Callable[[slice, slice], Tensor]
"""``score_fn(image_slice, caption_slice) -> S[image_slice, caption_slice]`` (float tensor)."""

DEFAULT_IMAGE_CHUNK = 512


@dataclass(frozen=True, eq=False)
class Ranks:
    """0-based ranks of one evaluated matrix, plus the sums behind DBL's MD.

    Attributes:
        i2t: (N,) int64, rank of the best-ranked own caption of each image among all captions.
        t2i: (cpi * N,) int64, rank of each caption's image among all images.
        positive_sum: sum of ``S`` over the ``cpi * N`` positive (image, own caption) pairs.
        negative_sum: sum of ``S`` over the ``cpi * N * (N - 1)`` other pairs.
        captions_per_image: ``cpi``.
    """

    i2t: np.ndarray
    t2i: np.ndarray
    positive_sum: float
    negative_sum: float
    captions_per_image: int

    @property
    def n_images(self) -> int:
        return int(self.i2t.shape[0])

    @property
    def n_positive(self) -> int:
        return int(self.t2i.shape[0])

    @property
    def n_negative(self) -> int:
        return self.n_positive * (self.n_images - 1)

    @property
    def md(self) -> float:
        """DBL's MD: mean positive similarity minus mean negative similarity (NaN if N == 1)."""
        if self.n_negative == 0:
            return math.nan
        return self.positive_sum / self.n_positive - self.negative_sum / self.n_negative

    def same_as(self, other: Ranks) -> bool:
        """True when both hold identical ranks and identical sums."""
        return (
            self.captions_per_image == other.captions_per_image
            and np.array_equal(self.i2t, other.i2t)
            and np.array_equal(self.t2i, other.t2i)
            and self.positive_sum == other.positive_sum
            and self.negative_sum == other.negative_sum
        )


def dense_score_fn(
    image_emb: Tensor | np.ndarray, caption_emb: Tensor | np.ndarray, normalize: bool = False
) -> ScoreFn:
    """A :data:`ScoreFn` for embedding models: ``S = images @ captions.T`` in float32 (the cosine for unit-norm
    embeddings; ``normalize=True`` L2-normalises the rows first), on the embeddings' device. On CPU the product runs
    through numpy's BLAS on zero-copy views, faster than torch's MKL sgemm on AMD CPUs
    (docs/speed.md#figures-behind-the-codes-choices), and returns a float32 torch tensor."""
    images = torch.as_tensor(image_emb).detach().to(torch.float32)
    captions = torch.as_tensor(caption_emb).detach().to(torch.float32)
    if images.dim() != 2 or captions.dim() != 2 or images.shape[1] != captions.shape[1]:
        raise ValueError(
            f"embeddings must be (N, d) and (M, d) with the same d, got images {tuple(images.shape)} "
            f"and captions {tuple(captions.shape)}"
        )
    if normalize:
        images = torch.nn.functional.normalize(images, dim=1)
        captions = torch.nn.functional.normalize(captions, dim=1)

    if images.device.type == "cpu" and captions.device.type == "cpu":
        image_array, caption_array = images.numpy(), captions.numpy()

        def score_cpu(image_slice: slice, caption_slice: slice) -> Tensor:
            return torch.from_numpy(image_array[image_slice] @ caption_array[caption_slice].T)

        return score_cpu

    def score(image_slice: slice, caption_slice: slice) -> Tensor:
        with torch.no_grad():
            return images[image_slice] @ captions[caption_slice].T

    return score


def _block(score_fn: ScoreFn, rows: tuple[int, int], cols: tuple[int, int], dtype=None) -> Tensor:
    """One block ``S[rows, cols]`` from ``score_fn``, checked for shape."""
    block = torch.as_tensor(score_fn(slice(*rows), slice(*cols))).detach()
    expected = (rows[1] - rows[0], cols[1] - cols[0])
    if tuple(block.shape) != expected:
        raise ValueError(f"score_fn(slice{rows}, slice{cols}) returned shape {tuple(block.shape)}, expected {expected}")
    if not block.is_floating_point() or block.dtype == torch.bfloat16:
        block = block.to(torch.float32)  # exact for bfloat16, which numpy cannot view
    return block if dtype is None else block.to(dtype)


def _counts_and_sum(block: Tensor, row_threshold: Tensor, col_threshold: Tensor, use_numpy: bool | None = None):
    """``(#{S >= row_threshold} per row, #{S >= col_threshold} per column, sum of S in float64)``; CPU blocks through
    numpy (zero-copy, several times faster than torch on CPU), other devices in torch, returning host counts."""
    if use_numpy is None:
        use_numpy = block.device.type == "cpu"
    if use_numpy:
        scores = block.numpy()
        rows = np.count_nonzero(scores >= row_threshold.numpy()[:, None], axis=1)
        cols = np.count_nonzero(scores >= col_threshold.numpy()[None, :], axis=0)
        return rows, cols, float(scores.sum(dtype=np.float64))
    rows = (block >= row_threshold[:, None]).sum(1)
    cols = (block >= col_threshold[None, :]).sum(0)
    return rows.cpu().numpy(), cols.cpu().numpy(), float(block.sum(dtype=torch.float64))


def compute_ranks(
    score_fn: ScoreFn, n_images: int, captions_per_image: int = 5, image_chunk: int = DEFAULT_IMAGE_CHUNK
) -> Ranks:
    """Ranks of all images and captions of one matrix, scored ``image_chunk`` images at a time (the module docstring);
    peak memory about ``image_chunk * cpi * N`` scores. ``ValueError`` if a block has the wrong shape or any score is
    not finite."""
    if n_images < 1 or captions_per_image < 1 or image_chunk < 1:
        raise ValueError(
            f"need n_images, captions_per_image and image_chunk >= 1, got "
            f"{n_images}, {captions_per_image}, {image_chunk}"
        )
    cpi, n_captions = captions_per_image, captions_per_image * n_images
    blocks = [(start, min(start + image_chunk, n_images)) for start in range(0, n_images, image_chunk)]
    i2t = np.zeros(n_images, dtype=np.int64)
    t2i = np.zeros(n_captions, dtype=np.int64)
    best_own: list[Tensor] = []  # per block: (b,) max score of each image's own captions
    gt_parts: list[Tensor] = []  # per block: (cpi * b,) score of each caption with its image
    positive_sum = total_sum = 0.0
    with torch.no_grad():
        dtype = None
        for start, stop in blocks:  # 1. diagonal blocks: positives and in-block counts
            size = stop - start
            diag = _block(score_fn, (start, stop), (cpi * start, cpi * stop), dtype)
            dtype = diag.dtype
            index = torch.arange(size, device=diag.device)
            own = diag.reshape(size, size, cpi)[index, index]  # (b, cpi): each image with its captions
            best, gt = own.amax(dim=1), own.reshape(-1)
            rows, cols, block_sum = _counts_and_sum(diag, best, gt)
            # the counts include the positives themselves: the image's own captions at its best
            # score (i2t) and the caption's own image (t2i); only negatives count towards a rank
            i2t[start:stop] += rows - (own >= best[:, None]).sum(1).cpu().numpy()
            t2i[cpi * start : cpi * stop] += cols - 1
            positive_sum += float(own.sum(dtype=torch.float64))
            total_sum += block_sum
            best_own.append(best)
            gt_parts.append(gt)
        gt_all = torch.cat(gt_parts)
        for (start, stop), best in zip(blocks, best_own):  # 2. off-diagonal blocks
            for col_start, col_stop in ((0, cpi * start), (cpi * stop, n_captions)):
                if col_stop == col_start:
                    continue
                block = _block(score_fn, (start, stop), (col_start, col_stop), dtype)
                rows, cols, block_sum = _counts_and_sum(block, best, gt_all[col_start:col_stop])
                i2t[start:stop] += rows
                t2i[col_start:col_stop] += cols
                total_sum += block_sum
    if not math.isfinite(total_sum):
        raise ValueError("score_fn returned NaN or infinite scores; ranks would be meaningless")
    return Ranks(i2t, t2i, positive_sum, total_sum - positive_sum, cpi)
