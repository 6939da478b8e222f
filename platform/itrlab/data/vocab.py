"""Tokenisation and the word vocabulary.

The tokenizer is a plain regular expression (lower-case runs of letters and digits), so nothing downloads (no NLTK
data). The vocabulary is built from the training captions only: the reference repositories built theirs from all
splits, which gives a test-only word a trained embedding row instead of ``<unk>``.
:meth:`Vocabulary.coverage` reports how much of another split the vocabulary covers.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from itrlab.errors import DataError
from itrlab.files import atomic_write_text, read_json

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIAL_TOKENS = (PAD, START, END, UNK)  # ids 0, 1, 2, 3
PAD_ID, START_ID, END_ID, UNK_ID = range(4)
FORMAT_VERSION = 1

_TOKEN = re.compile(r"[^\W_]+")  # letters and digits of any script; punctuation and _ split


def tokenize(text: str) -> list[str]:
    """Lower-case words and numbers of ``text``: ``"A dog's ball!"`` -> ``["a", "dog", "s", "ball"]``."""
    return _TOKEN.findall(text.lower())


class Vocabulary:
    """Word <-> id mapping with ``<pad>``=0, ``<start>``=1, ``<end>``=2, ``<unk>``=3."""

    def __init__(self, words: Sequence[str]):
        """Build from the ordered word list (special tokens first, as :meth:`build` makes it)."""
        if tuple(words[:4]) != SPECIAL_TOKENS:
            raise ValueError(f"a vocabulary must start with {SPECIAL_TOKENS}")
        if len(set(words)) != len(words):
            raise ValueError("a vocabulary must not repeat words")
        self._words = list(words)
        self._ids = {w: i for i, w in enumerate(self._words)}

    @classmethod
    def build(cls, captions: Iterable[str], min_count: int = 1) -> Vocabulary:
        """Vocabulary of the words occurring at least ``min_count`` times in ``captions`` (training captions only),
        ordered by decreasing count, ties alphabetically, so that the same captions give the same ids."""
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        counts = Counter(token for caption in captions for token in tokenize(caption))
        kept = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in SPECIAL_TOKENS), key=lambda w: (-counts[w], w)
        )
        return cls(list(SPECIAL_TOKENS) + kept)

    @property
    def words(self) -> list[str]:
        """All words, index = id (a copy)."""
        return list(self._words)

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, word: str) -> bool:
        return word in self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self._words == other._words

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} words)"

    def word_to_id(self, word: str) -> int:
        return self._ids.get(word, UNK_ID)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Token ids of ``text`` framed by ``<start>`` and ``<end>``; unknown words -> ``<unk>``.

        With ``max_len`` (>= 2, counting the frame), long captions are cut and keep ``<end>``.
        """
        ids = [self._ids.get(token, UNK_ID) for token in tokenize(text)]
        if max_len is not None:
            if max_len < 2:
                raise ValueError(f"max_len must be >= 2, got {max_len}")
            ids = ids[: max_len - 2]
        return [START_ID, *ids, END_ID]

    def decode(self, ids: Iterable[int]) -> str:
        """Words of ``ids`` joined by spaces; ``<pad>``, ``<start>`` and ``<end>`` are dropped."""
        return " ".join(self._words[int(i)] for i in ids if int(i) not in (PAD_ID, START_ID, END_ID))

    def coverage(self, captions: Iterable[str]) -> float:
        """Fraction of the tokens of ``captions`` that are in the vocabulary (1.0 if none)."""
        total = known = 0
        for caption in captions:
            for token in tokenize(caption):
                total += 1
                known += token in self._ids
        return known / total if total else 1.0

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON."""
        payload = {"format": "itrlab-vocabulary", "version": FORMAT_VERSION, "words": self._words}
        atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        """Read a vocabulary written by :meth:`save`; problems are :class:`DataError`."""
        path = Path(path)
        payload = read_json(path, "vocabulary file")
        words = payload.get("words") if isinstance(payload, dict) else None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise DataError(path, "not an itrlab vocabulary (no 'words' list of strings)")
        try:
            return cls(words)
        except ValueError as exc:
            raise DataError(path, str(exc)) from None
