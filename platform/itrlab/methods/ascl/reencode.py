"""AsCL's type-I negatives at the frozen text model's input on stored text features (``noise_site: encoder_input``;
``docs/papers/ascl.md#noise-at-the-encoders-input``).

The paper perturbs its text encoder's *input* embeddings and encodes them again, so that attention spreads the noise
over every token; perturbing stored states lands on the encoder's outputs instead, token by token.
:class:`InputReencoder` does what the paper does, with the frozen model that computed the states, inside the step:

* the training captions are tokenised once, when the method is prepared, by that model's tokenizer
  (:func:`~itrlab.data.tokenizers.features_model_dir`) at the extraction's ``max_len``; a caption that gives another
  count of tokens than its stored states means another tokenizer, and the run is refused;
* a batch's negatives: the word embeddings of its captions' ids (before the position embeddings, which the model
  adds: a shuffle changes the output), perturbed by the method's
  :class:`~itrlab.methods.ascl.text_augment.NegativeGenerator`, encoded under ``torch.no_grad`` in eval mode, zero at
  padding and rounded to float16 as the stored states are, so that a negative differs from its caption by the noise
  alone. Gradients reach the projection after the states, never the model; the captions keep their stored states.

The model is held outside the method's modules: in no ``state_dict`` or checkpoint, optimised by nothing, moved to the
batch's device on first use, and shared, never copied (``deepcopy`` returns it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from itrlab.data.text_features import SplitText, TextFeatures
from itrlab.data.tokenizers import PretrainedTokenizer, features_model_dir, require_model_dir, swap_pad_id
from itrlab.errors import DataError
from itrlab.methods.ascl.stored_positives import Layout
from itrlab.models.bert_text import load_pretrained_model
from itrlab.models.pooling import length_mask

DEFAULT_EXTRACTION_MAX_LEN = 64  # jobs/extract_features.py --text-max-len's default, for a text.json without one


class InputReencoder:
    """The frozen text model of stored states and the training split's token ids (module docstring).

    ``ids`` (C, L) int32, 0 at padding, the first ``kept`` tokens of each caption (the stored states a run reads);
    ``model_dir``: the model's folder.
    """

    def __init__(self, model_dir: Path, ids: Tensor, lengths: Tensor):
        self.model_dir = Path(model_dir)
        self.model = load_pretrained_model(self.model_dir).eval().requires_grad_(False)
        self.pad_id = int(PretrainedTokenizer(self.model_dir).hf_pad_id)
        self.ids, self.lengths = ids, lengths

    def __deepcopy__(self, memo: dict) -> InputReencoder:  # shared data and a frozen model: branch copies reuse it
        return self

    def __repr__(self) -> str:
        return f"InputReencoder({self.model_dir}, {len(self.ids)} captions)"

    @classmethod
    def for_split(cls, features: TextFeatures, split: SplitText, captions: Sequence[str]) -> InputReencoder:
        """The model that computed ``features`` and the token ids of ``captions`` (the split whose stored states
        ``split`` reads), checked against the stored lengths; :class:`DataError` at the first caption whose
        tokens and states differ in number."""
        model_dir = features_model_dir(features)
        tokenizer = PretrainedTokenizer(model_dir)
        extraction_len = int(features.manifest.get("max_len") or DEFAULT_EXTRACTION_MAX_LEN)
        if len(captions) != len(split):
            raise ValueError(f"{len(captions)} captions for a split of {len(split)} stored captions")
        kept = [split.kept(c) for c in range(len(split))]
        ids = torch.zeros((len(split), max(kept, default=1)), dtype=torch.int32)
        for caption, text in enumerate(captions):
            tokens = tokenizer.encode(text, max_len=extraction_len)
            if len(tokens) != int(split.lengths[caption]):
                raise DataError(
                    features.folder,
                    f"split {split.split!r}, caption {caption} ({text[:40]!r}): {len(tokens)} tokens by "
                    f"the tokenizer of {model_dir}, {int(split.lengths[caption])} stored states: the features "
                    f"were not tokenised so; extract them again",
                )
            ids[caption, : kept[caption]] = torch.tensor(tokens[: kept[caption]], dtype=torch.int32)
        return cls(model_dir, ids, torch.tensor(kept, dtype=torch.long))

    @classmethod
    def made_up(cls, captions: int, width: int, model_dir: Path | None = None) -> InputReencoder:
        """The packaged MiniLM (or ``model_dir``'s) over ``captions`` made-up captions of ``width`` tokens
        (``[CLS] a a ... [SEP]``): what counting a step's cost on made-up inputs encodes
        (:meth:`~itrlab.methods.base.MethodModule.bind_made_up_inputs`)."""
        folder = require_model_dir(model_dir)
        row = PretrainedTokenizer(folder).encode(" ".join(["a"] * width), max_len=width)
        ids = torch.tensor([row] * captions, dtype=torch.int32)
        return cls(folder, ids, torch.full((captions,), len(row), dtype=torch.long))

    # ------------------------------------------------------------------ token ids

    def ids_of(self, caption_ids: Tensor, width: int) -> Tensor:
        """(B, width) long token ids of training captions ``caption_ids``, 0 at padding, on their device."""
        rows = self.ids[caption_ids.cpu(), :width].long()
        if rows.shape[1] < width:
            rows = torch.nn.functional.pad(rows, (0, width - rows.shape[1]))
        return rows.to(caption_ids.device)

    def ids_at(self, layout: Layout, device: torch.device) -> Tensor:
        """(n, L') long token ids of generated captions: the token at each (caption, position) of ``layout``
        (:func:`~itrlab.methods.ascl.stored_positives.positive_layout`), 0 at padding."""
        out = torch.zeros((len(layout), max((len(row) for row in layout), default=1)), dtype=torch.long)
        for row, places in enumerate(layout):
            captions = torch.tensor([c for c, _ in places], dtype=torch.long)
            positions = torch.tensor([p for _, p in places], dtype=torch.long)
            out[row, : len(places)] = self.ids[captions, positions].long()
        return out.to(device)

    # ------------------------------------------------------------------ encoding

    def _on(self, device: torch.device) -> None:
        if next(self.model.parameters()).device != device:
            self.model.to(device)

    def word_embeddings(self, ids: Tensor) -> Tensor:
        """(B, L, H) the model's input word embeddings of ``ids`` (before its position embeddings)."""
        self._on(ids.device)
        with torch.no_grad():
            return self.model.get_input_embeddings()(swap_pad_id(ids, self.pad_id))

    def encode(self, embeddings: Tensor, lengths: Tensor) -> Tensor:
        """(B, L, H) float32 last hidden states of input ``embeddings`` (B, L, H), zero at padding, rounded to
        float16 as the stored states are; no gradient."""
        self._on(embeddings.device)
        mask = length_mask(lengths.to(embeddings.device), embeddings.shape[1])
        with torch.no_grad():
            hidden = self.model(inputs_embeds=embeddings, attention_mask=mask.long()).last_hidden_state
            return (hidden * mask.unsqueeze(-1).to(hidden.dtype)).half().float()

    def perturbed_states(
        self,
        ids: Tensor,
        lengths: Tensor,
        perturb: Callable[[Tensor, Tensor, torch.Generator | None], Tensor],
        generator: torch.Generator | None,
    ) -> Tensor:
        """(B, L, H) states of the captions ``ids`` (B, L) whose input embeddings ``perturb`` (the negative
        generator: embeddings, lengths, generator -> embeddings) changed."""
        return self.encode(perturb(self.word_embeddings(ids), lengths, generator), lengths)


__all__ = ["InputReencoder"]
