"""AsCL's model (AsCL §II; ``docs/papers/ascl.md`` §B1, §B3): encoders, the fusion scorer, and the sample generators
with their caption pool.

* :class:`AsclModel`: ``V = FC(regions)`` (K×D, :class:`~itrlab.models.encoders.RegionEncoder`'s projection, no
  pooling), ``G`` = the mean of the raw regions (spec flag: no ResNet-152 feature), ``W`` = the text encoder's
  per-token features, and :class:`~itrlab.methods.ascl.fusion.HierarchicalFusion` scoring pairs. Captions can be
  encoded in two steps (:meth:`AsclModel.input_embeddings`, then :meth:`AsclModel.features_from_embeddings`) so that
  type-I noise lands on the encoder's input.
* :class:`SampleGenerators`: the type-I negative generator, the type-II/III positive generator, and the pool of every
  training caption of an image that type II concatenates from.
* :class:`CaptionPool`: the training split's captions by image id, tokenised on first use; shared, never copied
  (``deepcopy`` returns it): it is data, not state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from itrlab.methods.ascl.fusion import DEFAULT_HEADS, HierarchicalFusion, global_image_feature
from itrlab.methods.ascl.reencode import InputReencoder
from itrlab.methods.ascl.stored_positives import StatePool, layout_states, positive_layout
from itrlab.methods.ascl.text_augment import NegativeGenerator, PositiveGenerator
from itrlab.models.encoders import RegionEncoder
from itrlab.models.interaction import DEFAULT_SHARD_ELEMENTS
from itrlab.models.text_factory import TextEncoderSpec

ENCODER_INPUT = "encoder_input"  # stored states: noise on the frozen text model's input, encoded again
NOISE_SITES = ("input", "features", ENCODER_INPUT)


class AsclModel(nn.Module):
    """Region projection + token-level text encoder + hierarchical fusion scorer (eq. 1-4)."""

    def __init__(self, image_encoder: RegionEncoder, text_encoder: nn.Module, fusion: HierarchicalFusion):
        super().__init__()
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder  # word_features, input_embeddings, features_from_embeddings
        self.fusion = fusion

    @classmethod
    def build(
        cls,
        *,
        feature_dim: int,
        vocab_size: int,
        embed_dim: int,
        heads: int = DEFAULT_HEADS,
        u1: float = 0.6,
        cross_attention: bool = True,
        text: TextEncoderSpec = TextEncoderSpec(),
    ) -> AsclModel:
        return cls(
            RegionEncoder(feature_dim, embed_dim),
            text.build(vocab_size=vocab_size, embed_dim=embed_dim),
            HierarchicalFusion(embed_dim, feature_dim, heads=heads, u1=u1, cross_attention=cross_attention),
        )

    def encode_images(self, raw_regions: Tensor) -> tuple[Tensor, Tensor]:
        """``V`` (B, K, D) projected regions and ``G`` (B, F) the image's global feature."""
        return self.image_encoder.region_features(raw_regions), global_image_feature(raw_regions)

    def encode_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """``W`` (B, L, D) token features, zero at padding."""
        return self.text_encoder.word_features(tokens, lengths)

    def input_embeddings(self, tokens: Tensor) -> Tensor:
        return self.text_encoder.input_embeddings(tokens)

    def features_from_embeddings(self, embeddings: Tensor, lengths: Tensor) -> Tensor:
        return self.text_encoder.features_from_embeddings(embeddings, lengths)

    def pair_scores(
        self,
        regions: Tensor,
        global_feats: Tensor,
        words: Tensor,
        lengths: Tensor,
        max_elements: int | None = DEFAULT_SHARD_ELEMENTS,
    ) -> Tensor:
        """(I, J) scores, every pair from that pair alone (:meth:`HierarchicalFusion.pair_scores`)."""
        return self.fusion.pair_scores(regions, global_feats, words, lengths, max_elements=max_elements)


class CaptionPool:
    """Token ids of every caption of an image of the training split, encoded on first use.

    ``captions_of(image_id)`` -> list of token-id lists (framed as the tokenizer frames them).
    """

    def __init__(self, captions: Sequence[str], captions_per_image: int, tokenizer: Any, max_len: int):
        self.captions, self.cpi, self.tokenizer, self.max_len = captions, captions_per_image, tokenizer, max_len
        self._cache: dict[int, list[list[int]]] = {}

    def __deepcopy__(self, memo: dict) -> CaptionPool:  # shared data: branch copies (DBL) reuse it
        return self

    def captions_of(self, image_id: int) -> list[list[int]]:
        if image_id not in self._cache:
            lines = self.captions[image_id * self.cpi : (image_id + 1) * self.cpi]
            self._cache[image_id] = [self.tokenizer.encode(line, max_len=self.max_len) for line in lines]
        return self._cache[image_id]

    def get(self, image_id: int, default=()) -> list[list[int]]:
        """Mapping-style access, as :class:`~itrlab.methods.ascl.text_augment.PositiveGenerator` reads its pool."""
        return self.captions_of(int(image_id)) if 0 <= image_id * self.cpi < len(self.captions) else list(default)


def frame_ids(tokenizer: Any) -> tuple[int | None, int | None, frozenset[int]]:
    """(start id, end id, word-continuation ids) of a tokenizer's captions.

    itrlab's vocabulary frames with ``<start>`` = 1 and ``<end>`` = 2; a pretrained (BERT)
    tokenizer with its [CLS] / [SEP] (in itrlab's id space: pad id swapped to 0) and WordPiece's
    ``##`` pieces as continuations (so that truncation never cuts a word).
    """
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is None:
        return 1, 2, frozenset()
    pad = int(getattr(tokenizer, "hf_pad_id", 0))

    def mine(token_id: int | None) -> int | None:
        return None if token_id is None else (0 if token_id == pad else pad if token_id == 0 else int(token_id))

    start = hf.cls_token_id if hf.cls_token_id is not None else hf.bos_token_id
    end = hf.sep_token_id if hf.sep_token_id is not None else hf.eos_token_id
    continuation = frozenset(mine(i) for token, i in hf.get_vocab().items() if token.startswith("##"))
    return mine(start), mine(end), continuation


class SampleGenerators(nn.Module):
    """AsCL's generated captions for one batch (docs/papers/ascl.md §B1): ``T⁻``, ``T⁺`` and ``T̃⁻``.

    ``noise_site``: ``input`` perturbs the text encoder's input embeddings and re-encodes (the default: ConSERT
    practice, the paper's "textual embedding layers"); ``features`` perturbs the encoded token features ``W`` (a shuffle
    is then a no-op for the fusion scorer, whose attention and means ignore order, which the method refuses);
    ``encoder_input`` (stored states only) perturbs the frozen text model's input embeddings and encodes them with it
    (``reencoder``, set when the method is prepared). ``stored_stride`` (stored token states: the longest caption's
    states + 1) makes the positives states cut and joined
    (:func:`~itrlab.methods.ascl.stored_positives.stored_positives`) rather than token ids.
    """

    def __init__(
        self,
        negatives: NegativeGenerator,
        positives: PositiveGenerator,
        noise_site: str = "input",
        stored_stride: int | None = None,
    ):
        super().__init__()
        if noise_site not in NOISE_SITES:
            raise ValueError(f"unknown noise site {noise_site!r}; allowed: {', '.join(NOISE_SITES)}")
        self.negatives, self.positives, self.noise_site = negatives, positives, noise_site
        self.stored_stride = stored_stride
        self.pool: CaptionPool | StatePool | None = None
        self.reencoder: InputReencoder | None = None
        self.made_up = False  # the reencoder reads made-up token ids (a step counted on made-up inputs)

    def extra_repr(self) -> str:
        return f"noise_site={self.noise_site}" + (", stored states" if self.stored_stride else "")

    def positive_tokens(
        self, tokens: Tensor, lengths: Tensor, image_ids: Tensor, caption_ids: Tensor, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """``T⁺`` token ids (B, L') (or stored states (B, L', H)) and lengths: type II (two captions of the
        image, from the batch and the pool) or type III (truncation), one type per sample."""
        plus, plus_lengths, _ = self.positive_samples(tokens, lengths, image_ids, caption_ids, generator)
        return plus, plus_lengths

    def positive_samples(
        self, tokens: Tensor, lengths: Tensor, image_ids: Tensor, caption_ids: Tensor, generator: torch.Generator
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """:meth:`positive_tokens` and, on stored states with a ``reencoder``, the token ids (B, L') of ``T⁺``
        (else None): what ``encoder_input`` perturbs for ``T̃⁻``."""
        if self.stored_stride is None:
            tokens_plus, lengths_plus, _ = self.positives(tokens, lengths, image_ids, generator, pool=self.pool)
            return tokens_plus, lengths_plus, None
        layout = positive_layout(
            self.positives, lengths, image_ids, caption_ids, generator, self.pool, self.stored_stride
        )
        plus, plus_lengths = layout_states(layout, tokens, caption_ids, lengths, self.pool)
        ids = self.reencoder.ids_at(layout, tokens.device) if self.reencoder is not None else None
        return plus, plus_lengths, ids

    def caption_ids(self, caption_ids: Tensor, width: int) -> Tensor | None:
        """(B, width) token ids of training captions for ``encoder_input`` (None without a ``reencoder``)."""
        return self.reencoder.ids_of(caption_ids, width) if self.reencoder is not None else None

    def encode(
        self,
        model: AsclModel,
        tokens: Tensor,
        lengths: Tensor,
        negative: bool,
        generator: torch.Generator,
        ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Token features of the captions and, with ``negative``, of their type-I negatives: (B, L, D) each.

        At the ``input`` site both go through the text encoder in one call (2B sequences). At
        ``encoder_input`` the captions read their stored states ``tokens`` and the negatives are the frozen
        text model's states of their perturbed token ids ``ids`` (B, L).
        """
        if not negative:
            return model.encode_captions(tokens, lengths), None
        if self.noise_site == ENCODER_INPUT:
            if self.reencoder is None or ids is None:
                raise RuntimeError(
                    "noise_site encoder_input needs the training captions' token ids and their text model: "
                    "prepare the method with its training data first"
                )
            states = self.reencoder.perturbed_states(ids, lengths, self.negatives, generator)
            return model.encode_captions(tokens, lengths), model.features_from_embeddings(states, lengths)
        if self.noise_site == "features":
            words = model.encode_captions(tokens, lengths)
            return words, self.negatives(words, lengths, generator)
        embeddings = model.input_embeddings(tokens)
        noisy = self.negatives(embeddings, lengths, generator)
        both = model.features_from_embeddings(torch.cat([embeddings, noisy]), torch.cat([lengths, lengths]))
        return both[: len(tokens)], both[len(tokens) :]


def stack_padded(first: Tensor, second: Tensor) -> Tensor:
    """Two padded token batches (B1, L1, ...) and (B2, L2, ...) as one (B1 + B2, max(L1, L2), ...), padded with 0
    (token ids, or stored states in the wider of the two dtypes)."""
    width = max(first.shape[1], second.shape[1])
    dtype = torch.promote_types(first.dtype, second.dtype)

    def pad(t: Tensor) -> Tensor:
        out = t.new_zeros((t.shape[0], width, *t.shape[2:]), dtype=dtype)
        out[:, : t.shape[1]] = t
        return out

    return torch.cat([pad(first), pad(second)])


def length_buckets(lengths: Tensor, saving: float = 0.15) -> list[Tensor]:
    """Indices of captions in at most two runs of sorted lengths, split where padding costs least.

    One run when the best split saves less than ``saving`` of the padded tokens (``n x longest``).
    """
    sorted_lengths, order = torch.sort(lengths.detach().cpu())
    n = len(order)
    if n < 2:
        return [order]
    cuts = torch.arange(1, n)
    costs = cuts * sorted_lengths[:-1] + (n - cuts) * sorted_lengths[-1]
    best = int(torch.argmin(costs))
    if float(costs[best]) > (1 - saving) * n * float(sorted_lengths[-1]):
        return [order]
    return [order[: best + 1], order[best + 1 :]]


__all__ = [
    "AsclModel",
    "CaptionPool",
    "ENCODER_INPUT",
    "NOISE_SITES",
    "SampleGenerators",
    "frame_ids",
    "length_buckets",
    "stack_padded",
]
