"""CODER's prototype-based graph clustering (PGC, C §3.4, eq. 7): pseudo-labels and prototypes.

Every training pair ``j`` gets a pseudo-label ``z_j``: its cluster among ``K`` from spherical
k-means on ``u_j = normalise(v̂_j + ŵ_j)``, the sum of the pair's unit image and caption embeddings
(docs/papers/coder.md §A4). The prototypes ``P^C ∈ R^{K×F}`` (no bias) turn concept embeddings into cluster logits.

"Online" (unstated in the paper) is read as the spec proposes: recluster once per epoch from the
second epoch on, on the momentum encoder's embeddings, and reinitialise ``P^C`` after each
reclustering (the cluster ids are a new permutation). ``P^C`` scores *concept* embeddings, so each
prototype starts at the unit mean of its cluster's concept embeddings ``normalise(v^C + w^C)``, the
space it scores, not at the instance-space centroid the clusters were found with; the method then
drops the optimizer's moments of ``P^C`` (:func:`itrlab.methods.base.mark_reinitialised`): they belong
to the previous permutation. Labels, prototypes and the epoch last clustered are module state: a
resumed run continues with exactly what it had.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from itrlab.methods.coder.kmeans import spherical_kmeans


class ClusterPrototypes(nn.Module):
    def __init__(self, n_pairs: int, dim: int, k: int, iterations: int = 20, seed: int = 0):
        super().__init__()
        if not 1 <= k <= n_pairs:
            raise ValueError(f"PGC needs 1 <= K <= the number of training pairs ({n_pairs}), got K={k}")
        self.k, self.iterations, self.seed = k, iterations, seed
        self.prototypes = nn.Linear(dim, k, bias=False)
        self.register_buffer("labels", torch.full((n_pairs,), -1, dtype=torch.long))
        self.register_buffer("clustered_epoch", torch.zeros((), dtype=torch.long))

    def logits(self, concept_embeddings: Tensor) -> Tensor:
        """(B, K) ``P^C v^C`` (before the softmax)."""
        return self.prototypes(concept_embeddings)

    def labels_of(self, pair_ids: Tensor) -> Tensor:
        """(B,) pseudo-labels of training pairs (``-1`` before the first clustering)."""
        return self.labels[pair_ids.to(self.labels.device)]

    @torch.no_grad()
    def recluster(self, image_embeddings: Tensor, caption_embeddings: Tensor, epoch: int,
                  image_concepts: Tensor | None = None, caption_concepts: Tensor | None = None) -> dict[str, float]:
        """k-means on ``normalise(v̂ + ŵ)`` of every training pair (rows aligned): new labels; P^C at each
        cluster's unit mean of ``normalise(v^C + w^C)`` (the concept embeddings it scores; without them,
        at the k-means centroids)."""
        u = F.normalize(F.normalize(image_embeddings, dim=1) + F.normalize(caption_embeddings, dim=1), dim=1)
        result = spherical_kmeans(u, self.k, iterations=self.iterations, seed=self.seed + epoch)
        labels = result.labels.to(u.device)
        self.labels.copy_(labels.to(self.labels.device))
        prototypes = result.centroids
        if image_concepts is not None and caption_concepts is not None:
            c = F.normalize(F.normalize(image_concepts, dim=1) + F.normalize(caption_concepts, dim=1), dim=1)
            sums = torch.zeros(self.k, c.shape[1], dtype=c.dtype, device=c.device).index_add_(0, labels.to(c.device), c)
            prototypes = F.normalize(sums, dim=1)  # a cluster without members (k-means reseeds them) stays 0
        self.prototypes.weight.copy_(prototypes.to(self.prototypes.weight))
        self.clustered_epoch.fill_(epoch)
        return {"pgc_kmeans_similarity": result.mean_similarity, "pgc_kmeans_reseeded": float(result.reseeded)}
