"""Bounded-memory scoring of every image of a block against every caption of another, in shards.

Interaction models (the cross-attention model, the fusion scorer) cannot score a split with one matrix product: each
pair runs its own cross-attention, so a whole block may not fit in memory. :func:`shard_plan` cuts the
``n_images x n_captions`` block into shards, runs of consecutive images against runs of consecutive captions, whose
largest intermediate stays within ``max_elements``; :func:`sharded_pair_scores` scores them and assembles the matrix.
Loops run over shards only, never over queries. The plan counts a cost in elements per pair:

* ``pair_costs[j]`` = entries one (image, caption ``j``) pair adds to a shard's largest intermediate (cross-attention:
  ``lengths[j] * max(d, s, R)``; the fusion scorer: a uniform size);
* ``image_step`` = all images when every caption fits against all of them, else as many as the costliest caption
  allows (at least 1);
* captions are taken in the longest runs whose summed cost times ``image_step`` stays within the budget (at least one
  caption per shard).

A score function must make each pair's score a function of that pair alone (masks, no batch statistics), so that
the shard layout never changes a score.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

BlockScoreFn = Callable[[slice, slice], Tensor]
"""``score_block(image_slice, caption_slice) -> (n_i, n_c)`` scores of that block of pairs."""


def shard_plan(n_images: int, pair_costs: Tensor, max_elements: int | None) -> list[tuple[slice, slice]]:
    """The shards ``(image_slice, caption_slice)`` covering ``n_images x len(pair_costs)`` pairs, in row-major order of
    caption runs (each caption run against every image block); one shard when everything fits or ``max_elements`` is
    None. ``pair_costs``: (n_captions,) integer cost of one (image, caption ``j``) pair in elements."""
    costs = torch.as_tensor(pair_costs).detach().to("cpu", torch.int64)
    n_captions = int(costs.numel())
    everything = [(slice(0, n_images), slice(0, n_captions))]
    if max_elements is None or n_images == 0 or n_captions == 0:
        return everything
    budget = max(1, int(max_elements))  # a budget below one element acts as 1 (as xattn's always did)
    longest = int(costs.max())
    image_step = n_images if budget // n_images >= longest else max(1, budget // longest)
    per_shard = max(longest, budget // image_step)
    ends = torch.cumsum(costs, 0)
    if image_step == n_images and int(ends[-1]) <= per_shard:
        return everything
    plan: list[tuple[slice, slice]] = []
    c0 = 0
    while c0 < n_captions:  # the most consecutive captions whose costs fit the shard
        start = int(ends[c0 - 1]) if c0 else 0
        c1 = max(c0 + 1, int(torch.searchsorted(ends, start + per_shard, right=True)))
        for i0 in range(0, n_images, image_step):
            plan.append((slice(i0, min(i0 + image_step, n_images)), slice(c0, c1)))
        c0 = c1
    return plan


def sharded_pair_scores(
    score_block: BlockScoreFn, n_images: int, pair_costs: Tensor, max_elements: int | None
) -> Tensor:
    """(n_images, n_captions) scores assembled from ``score_block`` over :func:`shard_plan`'s shards (a single shard's
    own result, uncopied); differentiable through autograd-tracked slice assignment."""
    plan = shard_plan(n_images, pair_costs, max_elements)
    if len(plan) == 1:
        return score_block(*plan[0])
    out: Tensor | None = None
    for images, captions in plan:
        block = score_block(images, captions)
        if out is None:
            out = block.new_empty((n_images, len(pair_costs)))
        out[images, captions] = block
    assert out is not None
    return out


__all__ = ["BlockScoreFn", "shard_plan", "sharded_pair_scores"]
