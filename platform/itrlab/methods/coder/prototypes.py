"""CODER's prototype-based graph clustering (PGC, C §3.4, eq. 7): pseudo-labels and prototypes.

Every training pair ``j`` gets a pseudo-label ``z_j``: its cluster among ``K`` from spherical
k-means on ``u_j = normalise(v̂_j + ŵ_j)``, the sum of the pair's unit image and caption embeddings
(docs/papers/coder.md §A4). The prototypes ``P^C ∈ R^{K×F}`` (no bias) turn concept embeddings into cluster logits.

"Online" (unstated in the paper) is read as the spec proposes: recluster once per epoch from the
second epoch on, on the momentum encoder's embeddings, and reinitialise ``P^C`` after each
reclustering (the cluster ids are a new permutation). ``P^C`` scores *concept* embeddings, so each
prototype starts at the unit mean of its cluster's concept embeddings ``normalise(v^C + w^C)``, the
space it scores, not at the instance-space centroid the clusters were found with (``reset="random"``:
seeded random unit rows instead); the method then drops the optimizer's moments of ``P^C``
(:func:`itrlab.methods.base.mark_reinitialised`): they belong to the previous permutation. The logits
are eq. 7's ``P^C v^C``, or with a temperature τ the cosines ``cos(v^C, p_k) / τ``: cosines alone
are bounded to [-1, 1], and a classifier over K classes then cannot go far below ln K
(docs/papers/coder.md#pgc). Labels, prototypes and the epoch last clustered are module state: a
resumed run continues with exactly what it had.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from itrlab.methods.coder.kmeans import spherical_kmeans

Reset = Literal["cluster_mean", "random"]  # where the prototypes restart after a reclustering
RESETS = get_args(Reset)


class ClusterPrototypes(nn.Module):
    """``K`` prototypes over ``n_pairs`` training pairs. ``temperature`` τ: the logits are cosines over τ,
    ``cos(v^C, p_k) / τ`` (None: eq. 7's plain ``P^C v^C``); ``reset``: where the prototypes restart after
    a reclustering, ``cluster_mean`` (the unit mean of the cluster's concept embeddings) or ``random``
    (unit rows drawn with ``seed + epoch``)."""

    def __init__(
        self,
        n_pairs: int,
        dim: int,
        k: int,
        iterations: int = 20,
        seed: int = 0,
        temperature: float | None = None,
        reset: str = "cluster_mean",
    ):
        super().__init__()
        if temperature is not None and not temperature > 0:
            raise ValueError(f"the PGC temperature must be > 0 (or None), got {temperature!r}")
        if reset not in RESETS:
            raise ValueError(f"the prototypes' reset must be one of {RESETS}, got {reset!r}")
        self.k, self.iterations, self.seed = k, iterations, seed
        self.temperature, self.reset = temperature, reset
        self.prototypes = nn.Linear(dim, k, bias=False)
        self.register_buffer("labels", torch.full((n_pairs,), -1, dtype=torch.long))
        self.register_buffer("clustered_epoch", torch.zeros((), dtype=torch.long))

    def logits(self, concept_embeddings: Tensor) -> Tensor:
        """(B, K) logits before the softmax: ``P^C v^C``, or ``cos(v^C, p_k) / τ`` with a temperature."""
        if self.temperature is None:
            return self.prototypes(concept_embeddings)
        unit = F.normalize(self.prototypes.weight, dim=-1)
        return F.normalize(concept_embeddings, dim=-1) @ unit.T / self.temperature

    @torch.no_grad()
    def mean_cosine(self) -> Tensor:
        """The mean cosine over pairs of distinct prototypes (1: all alike), in O(K·F)."""
        unit = F.normalize(self.prototypes.weight.float(), dim=-1)
        pairs = unit.sum(0).pow(2).sum() - unit.pow(2).sum()
        return pairs / max(self.k * (self.k - 1), 1)

    def labels_of(self, pair_ids: Tensor) -> Tensor:
        """(B,) pseudo-labels of training pairs (``-1`` before the first clustering)."""
        return self.labels[pair_ids.to(self.labels.device)]

    @torch.no_grad()
    def recluster(
        self,
        image_embeddings: Tensor,
        caption_embeddings: Tensor,
        epoch: int,
        image_concepts: Tensor | None = None,
        caption_concepts: Tensor | None = None,
    ) -> dict[str, float]:
        """k-means on ``normalise(v̂ + ŵ)`` of every training pair (rows aligned): new labels; P^C reset at
        each cluster's unit mean of ``normalise(v^C + w^C)`` (the concept embeddings it scores; without them,
        at the k-means centroids), or at random unit rows (``reset="random"``)."""
        u = F.normalize(F.normalize(image_embeddings, dim=1) + F.normalize(caption_embeddings, dim=1), dim=1)
        result = spherical_kmeans(u, self.k, iterations=self.iterations, seed=self.seed + epoch)
        labels = result.labels.to(u.device)
        self.labels.copy_(labels.to(self.labels.device))
        prototypes = result.centroids
        if self.reset == "random":
            generator = torch.Generator().manual_seed(self.seed + epoch)
            prototypes = F.normalize(
                torch.randn(self.prototypes.weight.shape, generator=generator, dtype=torch.float64), dim=1
            )
        elif image_concepts is not None and caption_concepts is not None:
            c = F.normalize(F.normalize(image_concepts, dim=1) + F.normalize(caption_concepts, dim=1), dim=1)
            sums = torch.zeros(self.k, c.shape[1], dtype=c.dtype, device=c.device).index_add_(0, labels.to(c.device), c)
            prototypes = F.normalize(sums, dim=1)  # a cluster without members (k-means reseeds them) stays 0
        self.prototypes.weight.copy_(prototypes.to(self.prototypes.weight))
        self.clustered_epoch.fill_(epoch)
        return {"pgc_kmeans_similarity": result.mean_similarity, "pgc_kmeans_reseeded": float(result.reseeded)}
