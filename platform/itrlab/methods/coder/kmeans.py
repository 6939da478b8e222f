"""Spherical k-means on torch tensors, any device: CODER's PGC pseudo-labels (C §3.4, eq. 7; docs/papers/coder.md §A4).

PGC clusters ``u = normalise(v̂^I + ŵ^I)``, one vector per training pair, into K = 10,000 (F30K) or
20,000 (COCO) clusters every epoch, 20 iterations on the GPU. Here:

- Cosine similarity on L2-normalised rows (the input is normalised here; zero rows stay zero).
  A centroid is the normalised sum of its members (the mean direction).
- Init ``"k-means++"`` (D² sampling with D² = 2 - 2 cos, one candidate per step), ``"random"``
  (K distinct points) or given centroids (a warm start). All random numbers come from a CPU ``torch.Generator``
  seeded with ``seed``, so the draws are the same on every device. k-means++ costs K sequential passes over
  the data (O(N d) each).
- Fixed iterations (default 20) of assign-then-update; it stops early only at a fixed point (no
  label changed and no cluster was empty), which later iterations could not change.
- Bounded memory: similarities are computed for chunks of rows so that a chunk's (rows x K)
  block stays within ``memory_budget`` bytes; N x K is never materialised beyond that.
- Empty clusters are re-seeded deterministically: empty cluster ids in increasing order take the
  points least similar to their centroid (ties by index), drawn from clusters that keep at least
  one member; those points move to the re-seeded clusters.
- Deterministic for a seed on a given device: the centroid sums use ``index_add_`` on the CPU and a
  one-hot matrix product elsewhere (CUDA's ``index_add_`` accumulates in a nondeterministic
  order).

The result's labels and centroids are consistent: each centroid is the mean direction of the
points labelled with it (the labels are the last assignment, before the last update).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

INITS = ("k-means++", "random")
DEFAULT_BUDGET = 256 * 2**20  # bytes for one chunk's similarity block


@dataclass
class KMeansResult:
    centroids: Tensor  # (K, d) float32, unit rows, on the input's device
    labels: Tensor  # (N,) int64
    iterations: int  # assign-update iterations run
    mean_similarity: float  # mean cosine of the points to their centroid in the last assignment
    reseeded: int  # empty clusters re-seeded, over all iterations


def _rows_per_chunk(k: int, budget: int) -> int:
    return max(1, budget // (8 * k))  # the (rows x K) float32 block plus as much again for temporaries


def assign(x: Tensor, centroids: Tensor, memory_budget: int = DEFAULT_BUDGET) -> tuple[Tensor, Tensor]:
    """``(labels (N,), similarity (N,))``: each row's most similar centroid, in bounded chunks."""
    n, k = x.shape[0], centroids.shape[0]
    labels = torch.empty(n, dtype=torch.long, device=x.device)
    sims = torch.empty(n, dtype=x.dtype, device=x.device)
    step = _rows_per_chunk(k, memory_budget)
    for start in range(0, n, step):
        best = (x[start : start + step] @ centroids.T).max(dim=1)
        sims[start : start + step], labels[start : start + step] = best.values, best.indices
    return labels, sims


def _cluster_sums(
    x: Tensor, labels: Tensor, k: int, memory_budget: int, one_hot: bool | None = None
) -> tuple[Tensor, Tensor]:
    """``(sums (K, d), counts (K,))`` of the points of each cluster, deterministically.

    ``index_add_`` on the CPU, chunked one-hot products elsewhere (``one_hot`` forces either).
    """
    counts = torch.bincount(labels, minlength=k)
    if not (x.device.type != "cpu" if one_hot is None else one_hot):
        return torch.zeros(k, x.shape[1], dtype=x.dtype).index_add_(0, labels, x), counts
    sums = torch.zeros(k, x.shape[1], dtype=x.dtype, device=x.device)
    step = _rows_per_chunk(k, memory_budget)
    for start in range(0, x.shape[0], step):
        chunk = labels[start : start + step]
        onehot = torch.zeros(k, chunk.shape[0], dtype=x.dtype, device=x.device)
        onehot[chunk, torch.arange(chunk.shape[0], device=x.device)] = 1.0
        sums += onehot @ x[start : start + step]
    return sums, counts


def _kmeanspp(x: Tensor, k: int, uniforms: Tensor) -> Tensor:
    """Indices of K k-means++ seeds (D² sampling; D² = 2 - 2 cos on unit rows), without host syncs."""
    n = x.shape[0]
    acc = torch.float64 if x.device.type != "mps" else torch.float32
    u = uniforms.to(device=x.device, dtype=acc)
    index = torch.empty(k, dtype=torch.long, device=x.device)
    index[0] = torch.clamp((u[0] * n).long(), max=n - 1)
    dist = (2 - 2 * (x @ x.index_select(0, index[:1]).T)[:, 0]).clamp_min(0)
    for j in range(1, k):
        cum = torch.cumsum(dist.to(acc), dim=0)
        total = cum[-1:]
        pick = torch.searchsorted(cum, u[j : j + 1] * total, right=True).clamp(max=n - 1)
        # every point at distance 0 (duplicates): fall back to a uniform draw
        index[j : j + 1] = torch.where(total > 0, pick, torch.clamp((u[j : j + 1] * n).long(), max=n - 1))
        dist = torch.minimum(dist, (2 - 2 * (x @ x.index_select(0, index[j : j + 1]).T)[:, 0]).clamp_min(0))
    return index


def _reseed(labels: Tensor, sims: Tensor, counts: Tensor) -> int:
    """Move the least similar points into the empty clusters (in place); returns how many."""
    empty = torch.nonzero(counts == 0).flatten()
    if empty.numel() == 0:
        return 0
    order = torch.sort(sims, stable=True).indices.cpu()  # least similar first, ties by index
    host_labels, left = labels.cpu(), counts.cpu().clone()
    movers: list[int] = []
    for i in order.tolist():  # stops after len(empty) movers
        c = int(host_labels[i])
        if left[c] > 1:  # never empty the mover's own cluster
            left[c] -= 1
            movers.append(i)
            if len(movers) == empty.numel():
                break
    if len(movers) < empty.numel():  # cannot happen when K <= N
        raise RuntimeError("k-means could not re-seed its empty clusters")
    index = torch.tensor(movers, dtype=torch.long, device=labels.device)
    labels[index] = empty
    sims[index] = 1.0
    return len(movers)


def cluster_count_problem(k: int, n: int) -> str | None:
    """What is wrong with ``k`` clusters of ``n`` training pairs, or None: the one place of the rule
    ``1 <= K <= N`` (CODER's config check and k-means both ask here)."""
    if 1 <= k <= n:
        return None
    return f"must be between 1 and the number of training pairs ({n})"


def spherical_kmeans(
    x: Tensor,
    k: int,
    iterations: int = 20,
    init: str | Tensor = "k-means++",
    seed: int = 0,
    memory_budget: int = DEFAULT_BUDGET,
    stop_early: bool = True,
) -> KMeansResult:
    """Spherical k-means of the rows of ``x`` (N, d) into ``k`` clusters (module doc).

    ``init`` is ``"k-means++"``, ``"random"``, or a (k, d) tensor of starting centroids (a warm
    start, e.g. the previous epoch's). Raises :class:`ValueError` when ``k`` breaks
    :func:`cluster_count_problem`'s rule, or for a bad argument.
    """
    if x.dim() != 2:
        raise ValueError(f"k-means expects an (N, d) matrix, got shape {tuple(x.shape)}")
    n = x.shape[0]
    problem = cluster_count_problem(k, n)
    if problem:
        raise ValueError(f"k-means: K={k} {problem}")
    if iterations < 1:
        raise ValueError(f"k-means needs iterations >= 1, got {iterations}")
    if isinstance(init, Tensor):
        if init.shape != (k, x.shape[1]):
            raise ValueError(f"k-means initial centroids must be ({k}, {x.shape[1]}), got {tuple(init.shape)}")
    elif init not in INITS:
        raise ValueError(f"k-means init must be one of {INITS} or a tensor of centroids, got {init!r}")
    x = F.normalize(x.detach().float(), dim=1)
    generator = torch.Generator().manual_seed(seed)
    if isinstance(init, Tensor):
        centroids = F.normalize(init.detach().to(device=x.device, dtype=x.dtype), dim=1)
    elif init == "random":
        centroids = x[torch.randperm(n, generator=generator)[:k].to(x.device)].clone()
    else:
        centroids = x[_kmeanspp(x, k, torch.rand(k, generator=generator, dtype=torch.float64))].clone()
    previous: Tensor | None = None
    reseeded = 0
    for it in range(1, iterations + 1):  # noqa: B007 - read after the loop: the iterations it ran
        labels, sims = assign(x, centroids, memory_budget)
        counts = torch.bincount(labels, minlength=k)
        moved = _reseed(labels, sims, counts)
        reseeded += moved
        sums, counts = _cluster_sums(x, labels, k, memory_budget)
        centroids = F.normalize(sums, dim=1)
        if stop_early and moved == 0 and previous is not None and torch.equal(labels, previous):
            break
        previous = labels
    return KMeansResult(
        centroids=centroids, labels=labels, iterations=it, mean_similarity=float(sims.mean()), reseeded=reseeded
    )


__all__ = ["INITS", "KMeansResult", "assign", "cluster_count_problem", "spherical_kmeans"]
