"""CODER's concept branch: the concept GCN and the concept embeddings (C §3.3, eq. 2; S eq. 5-6).

- :func:`concept_word_vectors` gives X, one word vector per concept: GloVe 6B 50-d through
  :func:`itrlab.models.glove.glove_vectors` (the paper uses 300-d Wikipedia GloVe: a logged
  deviation, docs/papers/coder.md §A1), or random vectors (tests, GloVe off). Rows GloVe lacks, and every row in
  random mode, are drawn from N(0, 0.7²) with a seeded generator (0.7 is about the per-component
  spread of GloVe 6B 50-d).
- :class:`ConceptGCN`: ``Y = LeakyReLU_0.2(A~ X W)`` (S eq. 5), one layer by default; with
  ``layers = L > 1`` (docs/papers/coder.md §A7.3, CVSE used 300 -> 512 -> 1024) the widths go in -> F/2 -> ... -> F
  and every layer applies the LeakyReLU, so L = 1 is exactly the paper's layer. No bias. A~ and X
  are buffers: checkpoints carry the graph and the word vectors.
- :class:`ConceptEmbedder`: ``a_i = softmax_i(lambda_c · q W y_iᵀ)``, ``v^C = sum_i a_i y_i``
  (C eq. 2 = S eq. 6), with separate ``W^v`` (image side) and ``W^w`` (text side) in R^{FxF}, no
  bias, lambda_c = 10 (CVSE's ``smooth_coef``, docs/papers/coder.md §A7.2). As written (the class's
  defaults) the score is the plain product over the GCN output, and it saturates: in the first epoch
  every image attends to one concept (docs/papers/coder.md#collapse). CODER's defaults take CVSE's two
  normalisations: ``normalize_scores`` (``method.concept_attention_normalise``) uses unit concepts ŷ_i
  (CVSE's GCN output is L2-normalised), in the score and in the sum, and a unit query in the score,
  so that lambda_c is the inverse temperature of a bounded score; ``query_norm="batch"``
  (``method.concept_query_norm``) batch-normalises the query first (CVSE's FC -> BatchNorm), which
  takes out the component all queries share.
- :func:`collapse_figures`: the attention's top weight and entropy and the concept embeddings' mean
  pairwise cosine of a batch, logged every epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from itrlab.methods.coder.concept_vocab import ConceptVocabulary, cooccurrence_graph
from itrlab.models.glove import GLOVE_DIM, glove_vectors

RANDOM_STD = 0.7
SIDES = ("image", "text")
QUERY_NORMS = ("none", "batch")


def concept_word_vectors(
    words: ConceptVocabulary | Sequence[str], source: str = "glove", dim: int = GLOVE_DIM, seed: int = 0
) -> tuple[Tensor, float]:
    """``(X (g, dim) float32, coverage)``: word vectors of the concepts and the share GloVe covers.

    ``source="glove"`` (dim must be 50) or ``"random"`` (coverage 0). Missing or random rows are
    N(0, 0.7²) from a generator seeded with ``seed``.
    """
    words = list(words.words if isinstance(words, ConceptVocabulary) else words)
    if source not in ("glove", "random"):
        raise ValueError(f"concept word vectors: source must be 'glove' or 'random', got {source!r}")
    if source == "glove" and dim != GLOVE_DIM:
        raise ValueError(f"GloVe vectors are {GLOVE_DIM}-d, got dim={dim}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(len(words), dim, generator=generator) * RANDOM_STD
    if source == "random" or not words:
        return x, 0.0
    found, vectors = glove_vectors(words)
    x[torch.from_numpy(np.flatnonzero(found))] = torch.from_numpy(vectors)
    return x, float(found.mean())


class ConceptGCN(nn.Module):
    """``Y = LeakyReLU_0.2(A~ X W)`` over the fixed concept graph (S eq. 5; module doc)."""

    def __init__(
        self,
        adjacency: Tensor,
        features: Tensor,
        out_dim: int,
        layers: int = 1,
        hidden_dim: int | None = None,
        negative_slope: float = 0.2,
    ):
        super().__init__()
        g = features.shape[0]
        if adjacency.dim() != 2 or adjacency.shape != (g, g):
            raise ValueError(f"the adjacency must be ({g}, {g}) for {g} concepts, got {tuple(adjacency.shape)}")
        if layers < 1:
            raise ValueError(f"gcn layers must be >= 1, got {layers}")
        self.register_buffer("adjacency", adjacency.detach().float().clone())
        self.register_buffer("features", features.detach().float().clone())
        hidden = hidden_dim or max(1, out_dim // 2)
        dims = [features.shape[1], *([hidden] * (layers - 1)), out_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:]))
        for layer in self.layers:  # Kipf & Welling's uniform(±1/sqrt(out)), as CVSE's GraphConvolution
            bound = layer.out_features**-0.5
            nn.init.uniform_(layer.weight, -bound, bound)
        self.act = nn.LeakyReLU(negative_slope)
        self.out_dim = out_dim

    def forward(self) -> Tensor:
        """Y (g, out_dim): the concept representations."""
        h = self.features
        for layer in self.layers:
            h = self.act(self.adjacency @ layer(h))
        return h


def build_concept_gcn(
    vocabulary: ConceptVocabulary,
    captions: Iterable[str],
    out_dim: int,
    *,
    graph_eps: float = 0.3,
    graph_rescale: bool = False,
    layers: int = 1,
    word_vectors: str = "glove",
    seed: int = 0,
) -> ConceptGCN:
    """The concept GCN of ``vocabulary`` over the TRAINING ``captions`` (graph: S eq. 4-5)."""
    adjacency = cooccurrence_graph(captions, vocabulary, graph_eps=graph_eps, rescale=graph_rescale)
    features, _ = concept_word_vectors(vocabulary, source=word_vectors, seed=seed)
    return ConceptGCN(adjacency, features, out_dim, layers=layers)


class ConceptEmbedder(nn.Module):
    """Concept embeddings v^C / w^C of a batch of query vectors (C eq. 2 = S eq. 6; module doc).

    ``forward(query (B, F), side)`` -> ``(B, F)``; ``side`` is ``"image"`` (W^v) or ``"text"``
    (W^w). Pass ``concepts=`` (Y from one :meth:`concepts` call) to share Y between both sides of
    a step; with ``return_weights=True`` the attention ``a`` (B, g) comes too (rows sum to 1).

    ``normalize_scores``: unit concepts ŷ_i (CVSE's GCN output), in the score and in the sum, and a
    unit query in the score: ``a_i = softmax_i(lambda_c · q̂ W ŷ_iᵀ)``, ``v^C = sum_i a_i ŷ_i``.
    ``query_norm="batch"``: the query is batch-normalised first (one BatchNorm1d per side, CVSE's
    FC -> BatchNorm), which takes out the component every query shares.
    """

    def __init__(self, gcn: ConceptGCN, smooth: float = 10.0, normalize_scores: bool = False, query_norm: str = "none"):
        super().__init__()
        if query_norm not in QUERY_NORMS:
            raise ValueError(f"query_norm must be one of {QUERY_NORMS}, got {query_norm!r}")
        self.gcn = gcn
        dim = gcn.out_dim
        self.image_proj = nn.Parameter(torch.empty(dim, dim))
        self.text_proj = nn.Parameter(torch.empty(dim, dim))
        nn.init.xavier_uniform_(self.image_proj)
        nn.init.xavier_uniform_(self.text_proj)
        self.smooth = float(smooth)
        self.normalize_scores = normalize_scores
        self.query_norm = (
            nn.ModuleDict({side: nn.BatchNorm1d(dim) for side in SIDES}) if query_norm == "batch" else None
        )

    def concepts(self) -> Tensor:
        """Y (g, F) from the GCN; unit rows ŷ with ``normalize_scores``."""
        y = self.gcn()
        return F.normalize(y, dim=-1) if self.normalize_scores else y

    def attention(self, query: Tensor, side: str, concepts: Tensor | None = None) -> Tensor:
        """``a = softmax_i(lambda_c · q W y_iᵀ)``, (B, g) (with ``normalize_scores``, of q̂ and ŷ_i)."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        y = self.concepts() if concepts is None else concepts
        if query.dim() != 2 or query.shape[1] != y.shape[1]:
            raise ValueError(f"expected queries of shape (B, {y.shape[1]}), got {tuple(query.shape)}")
        proj = self.image_proj if side == "image" else self.text_proj
        if self.query_norm is not None:
            query = self.query_norm[side](query)
        if self.normalize_scores:
            query, y = F.normalize(query, dim=-1), F.normalize(y, dim=-1)
        return torch.softmax(self.smooth * (query @ proj) @ y.T, dim=-1)

    def forward(
        self, query: Tensor, side: str, concepts: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        y = self.concepts() if concepts is None else concepts
        weights = self.attention(query, side, y)
        out = weights @ y
        return (out, weights) if return_weights else out


@torch.no_grad()
def collapse_figures(embeddings: Tensor, weights: Tensor, side: str) -> dict[str, Tensor]:
    """How far a batch's concept branch is from collapse, logged every epoch (docs/papers/coder.md#collapse):
    ``attention_top_<side>``, the mean top attention weight (1: one concept per sample);
    ``attention_entropy_<side>``, the mean attention entropy in nats (0: one concept, ln g: uniform);
    ``concept_cosine_<side>``, the mean cosine over the batch's pairs of concept embeddings (1: all alike)."""
    unit = F.normalize(embeddings.detach().float(), dim=-1)
    n = unit.shape[0]
    pairs = unit.sum(0).pow(2).sum() - unit.pow(2).sum()  # sum over i != j of cos(u_i, u_j)
    weights = weights.detach().float()
    return {
        f"attention_top_{side}": weights.max(dim=1).values.mean(),
        f"attention_entropy_{side}": -torch.special.xlogy(weights, weights).sum(dim=1).mean(),
        f"concept_cosine_{side}": pairs / max(n * (n - 1), 1),
    }


__all__ = [
    "ConceptEmbedder",
    "ConceptGCN",
    "RANDOM_STD",
    "build_concept_gcn",
    "collapse_figures",
    "concept_word_vectors",
]
