"""AsCL's generated captions (AsCL §II-B, §III-C; ``docs/papers/ascl.md`` §B1).

**Type-I negatives** ``T⁻`` (Asymmetry-I: the text says more than the image) perturb the text
encoder's INPUT embeddings ``W`` (B, L, E), which the method then re-encodes (ConSERT practice,
the paper's "textual embedding layers"; spec flag ``noise_site``). :class:`NegativeGenerator`:

==================  ===========================================================================
``gaussian``        ``W + σ·s·N(0, 1)``: σ = ``sigma``; ``s`` = 1 (``sigma_units: absolute``, the
                    reference code's σ = 1) or the standard deviation of the entries it perturbs in
                    this batch (``sigma_units: std``, detached), so that σ means the same on word
                    embeddings of std 0.06 and on contextual states of std 0.5
``shuffle``         a uniformly random permutation of the caption's tokens
``token_cutoff``    zero ``cutoff_rows`` (default 1) random rows (tokens)
``feature_cutoff``  zero ``cutoff_cols`` (default 1) random columns (features) of the caption's rows
``cutoff``          per sample, token or feature cutoff with probability ½ each (Fig. 3b "Cutoff")
``dropout``         zero each entry with probability ``p`` (default 0.5), scale the rest by
                    1/(1 - p) (``torch.nn.functional.dropout``'s convention)
``mixture``         per sample, one of gaussian, shuffle, token_cutoff, feature_cutoff, dropout,
                    uniformly (Fig. 3b "Mixture"); ``mixture_of`` narrows the choice (stored text
                    states: no shuffle, which nothing after them would see)
==================  ===========================================================================

Defaults are the reference code's (the paper gives none). Every perturbation touches only the
caption's *span*: its real tokens, less the first and last (the ``<start>``/``<end>`` or
``[CLS]``/``[SEP]`` frame) when ``protect_ends`` is True; padding and the frame are returned
unchanged. A caption whose span is empty (or has one token, for ``shuffle``) is returned as is.
``T̃⁻`` is the same generator applied to the embeddings of ``T⁺``. After a BERT encoder with
mean pooling, ``shuffle`` changes little (position embeddings only, if the caller adds them).

**Type-II/III positives** ``T⁺`` work on padded token ids (B, L) + lengths
(:class:`PositiveGenerator`):

* type II (``concat``): the concatenation of two *distinct* (by content) captions of the same
  image, drawn at random, in random order: ``start + a + b + end``. Candidates are the batch's
  captions with that image id plus, optionally, a ``pool`` of further captions per image id (e.g.
  the dataset's five). **Fallback:** with fewer than two distinct candidates, type III is used and
  reported in ``kinds``.
* type III (``truncate``): the first ⌈n/2⌉ words of the n words between the frame tokens.
  Words are tokens, or, given ``continuation_ids`` (BERT's ``##`` word pieces), a token plus the
  continuation pieces that follow it, so that no word is cut.
* ``mixture``: type II or III uniformly per sample (the paper's "one type per sample").

Frame tokens are recognised by id (``start_id`` / ``end_id``, None when the tokenizer adds
none) and restored on the output; ``max_len`` cuts long concatenations, keeping the end token.
Padding id is 0 (itrlab's convention). All randomness comes from the ``torch.Generator`` passed
in (or the global one), so a seeded generator gives the same samples.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import torch
from torch import Tensor, nn

from itrlab.numbers import check_number

NEGATIVE_GENERATORS = ("gaussian", "shuffle", "token_cutoff", "feature_cutoff", "cutoff", "dropout", "mixture")
MIXTURE_OF = ("gaussian", "shuffle", "token_cutoff", "feature_cutoff", "dropout")
SIGMA_UNITS = ("absolute", "std")
POSITIVE_GENERATORS = ("concat", "truncate", "mixture")
CONCAT, TRUNCATE = 0, 1  # values of PositiveGenerator's ``kinds`` (type II, type III)


def _check_choice(what: str, value: object, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; allowed: {', '.join(allowed)}")
    return value


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _uniform(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    """U[0, 1) draws made on the generator's device, then moved to ``like``'s device and dtype."""
    device = generator.device if generator is not None else like.device
    return torch.rand(shape, generator=generator, device=device).to(like.device, like.dtype)


def _normal(shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor) -> Tensor:
    device = generator.device if generator is not None else like.device
    return torch.randn(shape, generator=generator, device=device).to(like.device, like.dtype)


def _ranks(keys: Tensor) -> Tensor:
    """Rank of each entry along the last dimension (0 = smallest)."""
    return keys.argsort(dim=-1).argsort(dim=-1)


class NegativeGenerator(nn.Module):
    """Type-I negatives: ``forward(embeddings (B, L, E), lengths (B,), generator) -> (B, L, E)``.

    Args:
        kind: one of :data:`NEGATIVE_GENERATORS`.
        sigma: Gaussian noise scale σ >= 0.
        sigma_units: ``absolute`` (noise σ·N(0, 1)) or ``std`` (σ times the std of the perturbed entries).
        p: dropout probability in [0, 1].
        cutoff_rows / cutoff_cols: tokens / features zeroed by the cutoffs (integers >= 0).
        protect_ends: leave the first and last real token (the frame) untouched.
        mixture_of: the perturbations ``mixture`` chooses from (a non-empty subset of :data:`MIXTURE_OF`).
    """

    def __init__(
        self,
        kind: str = "mixture",
        sigma: float = 1.0,
        p: float = 0.5,
        cutoff_rows: int = 1,
        cutoff_cols: int = 1,
        protect_ends: bool = True,
        sigma_units: str = "absolute",
        mixture_of: Sequence[str] = MIXTURE_OF,
    ):
        super().__init__()
        self.kind = _check_choice("negative generator", kind, NEGATIVE_GENERATORS)
        self.sigma = check_number("sigma", sigma, ge=0, meaning="the Gaussian noise scale σ")
        self.sigma_units = _check_choice("sigma unit", sigma_units, SIGMA_UNITS)
        self.mixture_of = tuple(_check_choice("mixture member", m, MIXTURE_OF) for m in mixture_of)
        if not self.mixture_of:
            raise ValueError(f"mixture_of must name at least one of {', '.join(MIXTURE_OF)}")
        self.p = check_number("p", p, ge=0, le=1, meaning="the dropout probability")
        self.cutoff_rows = _check_count("cutoff_rows", cutoff_rows)
        self.cutoff_cols = _check_count("cutoff_cols", cutoff_cols)
        if not isinstance(protect_ends, bool):
            raise ValueError(f"protect_ends must be true or false, got {protect_ends!r}")
        self.protect_ends = protect_ends

    def extra_repr(self) -> str:
        return (
            f"kind={self.kind}, sigma={self.sigma}, sigma_units={self.sigma_units}, p={self.p}, "
            f"cutoff_rows={self.cutoff_rows}, cutoff_cols={self.cutoff_cols}, protect_ends={self.protect_ends}"
            + (f", mixture_of={self.mixture_of}" if self.mixture_of != MIXTURE_OF else "")
        )

    def span(self, lengths: Tensor, max_len: int) -> tuple[Tensor, Tensor, Tensor]:
        """(first (B,), stop (B,), mask (B, L)): the positions each perturbation may touch."""
        lengths = lengths.to(torch.long)
        first = torch.full_like(lengths, 1 if self.protect_ends else 0)
        stop = torch.maximum(lengths - 1 if self.protect_ends else lengths, first)
        positions = torch.arange(max_len, device=lengths.device)
        mask = (positions >= first[:, None]) & (positions < stop[:, None])
        return first, stop, mask

    def forward(self, embeddings: Tensor, lengths: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if embeddings.dim() != 3 or tuple(lengths.shape) != (embeddings.shape[0],):
            raise ValueError(
                f"expected embeddings (B, L, E) and lengths (B,), got {tuple(embeddings.shape)} "
                f"and {tuple(lengths.shape)}"
            )
        lengths = lengths.to(embeddings.device)
        if self.kind in ("mixture", "cutoff"):
            options = self.mixture_of if self.kind == "mixture" else ("token_cutoff", "feature_cutoff")
            choice = (_uniform((embeddings.shape[0],), generator, lengths.float()) * len(options)).long()
            choice = choice.clamp(max=len(options) - 1)
            out = embeddings
            for index, kind in enumerate(options):  # every option draws, so the stream never depends on choices
                perturbed = self.perturb(kind, embeddings, lengths, generator)
                out = torch.where((choice == index)[:, None, None], perturbed, out)
            return out
        return self.perturb(self.kind, embeddings, lengths, generator)

    def noise_scale(self, x: Tensor, span: Tensor) -> Tensor | float:
        """σ in the units of ``sigma_units``: σ, or σ times the std of the entries in the span (detached; one
        figure per batch, so a caption's noise does not depend on its own length)."""
        if self.sigma_units == "absolute":
            return self.sigma
        entries = x.detach()[span]
        if entries.numel() < 2:
            return self.sigma
        return self.sigma * entries.std()

    def perturb(self, kind: str, x: Tensor, lengths: Tensor, generator: torch.Generator | None) -> Tensor:
        """One elementary perturbation of :data:`MIXTURE_OF` on the whole batch."""
        batch, max_len, dim = x.shape
        first, stop, span = self.span(lengths, max_len)
        inside = span[:, :, None]
        if kind == "gaussian":
            return x + self.noise_scale(x, span) * _normal(tuple(x.shape), generator, x) * inside.to(x.dtype)
        if kind == "dropout":
            drop = (_uniform(tuple(x.shape), generator, x) < self.p) & inside
            scale = 0.0 if self.p >= 1 else 1.0 / (1.0 - self.p)
            return torch.where(drop, torch.zeros_like(x), torch.where(inside, x * scale, x))
        if kind == "token_cutoff":
            keys = _uniform((batch, max_len), generator, x).masked_fill(~span, 2.0)
            rows = (_ranks(keys) < self.cutoff_rows) & span
            return x.masked_fill(rows[:, :, None], 0.0)
        if kind == "feature_cutoff":
            cols = _ranks(_uniform((batch, dim), generator, x)) < self.cutoff_cols
            return x.masked_fill(inside & cols[:, None, :], 0.0)
        if kind == "shuffle":
            # Keys: a position outside the span keeps its own index; span positions get random keys
            # inside [first, stop), so sorting permutes the span only (a uniform permutation).
            positions = torch.arange(max_len, device=x.device, dtype=torch.float64).expand(batch, max_len)
            width = (stop - first).to(torch.float64)[:, None]
            random = first.to(torch.float64)[:, None] + _uniform((batch, max_len), generator, positions) * width * 0.999
            order = torch.where(span, random, positions).argsort(dim=1)
            return x.gather(1, order[:, :, None].expand(batch, max_len, dim))
        raise ValueError(f"unknown negative generator {kind!r}; allowed: {', '.join(NEGATIVE_GENERATORS)}")


class PositiveGenerator(nn.Module):
    """Type-II/III positives on token ids (module docstring).

    ``forward(tokens (B, L), lengths (B,), image_ids (B,), generator=None, pool=None)`` returns
    ``(tokens (B, L'), lengths (B,), kinds (B,))``: the generated captions padded with 0 and
    ``kinds[b]`` = :data:`CONCAT` (type II) or :data:`TRUNCATE` (type III, also the fallback).
    ``pool`` maps an image id to further token-id lists of that image (framed or not).
    """

    def __init__(
        self,
        kind: str = "mixture",
        start_id: int | None = 1,
        end_id: int | None = 2,
        max_len: int | None = None,
        continuation_ids: Collection[int] | None = None,
    ):
        super().__init__()
        self.kind = _check_choice("positive generator", kind, POSITIVE_GENERATORS)
        self.start_id = start_id
        self.end_id = end_id
        frame = int(start_id is not None) + int(end_id is not None)
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < frame + 1):
            raise ValueError(
                f"max_len must be an integer >= {frame + 1} (frame tokens + one word) or None, got {max_len!r}"
            )
        self.max_len = max_len
        self.continuation_ids = frozenset(int(i) for i in continuation_ids or ())

    def extra_repr(self) -> str:
        return f"kind={self.kind}, start_id={self.start_id}, end_id={self.end_id}, max_len={self.max_len}"

    def content(self, ids: Sequence[int]) -> list[int]:
        """The tokens between the frame (frame tokens recognised by id)."""
        ids = [int(i) for i in ids]
        if ids and self.start_id is not None and ids[0] == self.start_id:
            ids = ids[1:]
        if ids and self.end_id is not None and ids[-1] == self.end_id:
            ids = ids[:-1]
        return ids

    def truncate(self, content: list[int]) -> list[int]:
        """The first ⌈n/2⌉ of the content's n words (a word = a token and its continuation pieces)."""
        starts = [i for i, token in enumerate(content) if i == 0 or token not in self.continuation_ids]
        keep = math.ceil(len(starts) / 2)
        return content[: starts[keep]] if keep < len(starts) else list(content)

    def frame(self, content: list[int]) -> list[int]:
        if self.max_len is not None:
            content = content[: self.max_len - int(self.start_id is not None) - int(self.end_id is not None)]
        return (
            ([self.start_id] if self.start_id is not None else [])
            + content
            + ([self.end_id] if self.end_id is not None else [])
        )

    def forward(
        self,
        tokens: Tensor,
        lengths: Tensor,
        image_ids: Tensor,
        generator: torch.Generator | None = None,
        pool: Mapping[int, Sequence[Sequence[int]]] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        batch = tokens.shape[0]
        if tokens.dim() != 2 or tuple(lengths.shape) != (batch,) or tuple(image_ids.shape) != (batch,):
            raise ValueError(
                f"expected tokens (B, L), lengths (B,) and image_ids (B,), got {tuple(tokens.shape)}, "
                f"{tuple(lengths.shape)} and {tuple(image_ids.shape)}"
            )
        rows = tokens.detach().cpu().tolist()
        sizes = [int(n) for n in lengths.cpu().tolist()]
        ids = [int(i) for i in image_ids.cpu().tolist()]
        contents = [self.content(row[:n]) for row, n in zip(rows, sizes)]
        draws = (
            torch.rand((batch, 3), generator=generator, device=generator.device if generator is not None else "cpu")
            .cpu()
            .tolist()
        )
        out, kinds = [], []
        for b in range(batch):
            want_concat = self.kind == "concat" or (self.kind == "mixture" and draws[b][0] < 0.5)
            candidates = self.candidates(ids[b], contents, ids, pool)
            if want_concat and len(candidates) >= 2:
                first = min(int(draws[b][1] * len(candidates)), len(candidates) - 1)
                rest = candidates[:first] + candidates[first + 1 :]
                second = min(int(draws[b][2] * len(rest)), len(rest) - 1)
                out.append(self.frame(list(candidates[first]) + list(rest[second])))
                kinds.append(CONCAT)
            else:
                out.append(self.frame(self.truncate(contents[b])))
                kinds.append(TRUNCATE)
        width = max(len(row) for row in out) if out else 0
        padded = torch.zeros((batch, width), dtype=torch.long)
        for b, row in enumerate(out):
            padded[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        device = tokens.device
        return (
            padded.to(device),
            torch.tensor([len(r) for r in out], dtype=torch.long, device=lengths.device),
            torch.tensor(kinds, dtype=torch.long, device=device),
        )

    def candidates(
        self,
        image_id: int,
        contents: list[list[int]],
        ids: list[int],
        pool: Mapping[int, Sequence[Sequence[int]]] | None,
    ) -> list[tuple[int, ...]]:
        """Distinct (by content) captions of ``image_id``: the batch's, then the pool's, in first-seen order."""
        found = [tuple(c) for c, i in zip(contents, ids) if i == image_id]
        if pool is not None:
            found += [tuple(self.content(c)) for c in pool.get(image_id, ())]
        return list(dict.fromkeys(c for c in found if c))


__all__ = [
    "CONCAT",
    "MIXTURE_OF",
    "NEGATIVE_GENERATORS",
    "NegativeGenerator",
    "POSITIVE_GENERATORS",
    "PositiveGenerator",
    "SIGMA_UNITS",
    "TRUNCATE",
]
