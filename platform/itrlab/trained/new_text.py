"""New captions for a model that reads stored text features (``itrlab retrieve --caption``, a served model): a typed
caption gets its token states from the text model named in the features' ``text.json``, with its tokenizer and
``max_len``, through the extraction's encoder (:class:`~itrlab.extract.text.CaptionEncoder`), provided that model is
still there and the same (its identity digest); otherwise one line says so before anything is scored. A split whose
captions are the stored ones reads the stored states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from itrlab.data.text_features import TextFeatures
from itrlab.errors import UserInputError


class TypedStates:
    """Captions' token states held in memory, indexed as a stored split's
    (:class:`~itrlab.data.text_features.SplitText`)."""

    def __init__(self, states: list[np.ndarray], max_len: int | None):
        self.states, self.max_len = states, max_len

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.states[index][: self.max_len], dtype=np.float32))


class NewTextFeatures(TextFeatures):
    """Stored text features that also encode new captions with the text model that computed them."""

    def __init__(self, stored: TextFeatures, batch_size: int = 64):
        self.__dict__.update(stored.__dict__)
        self.batch_size = batch_size
        self._encoder = None

    @classmethod
    def of(cls, stored: TextFeatures, batch_size: int = 64) -> NewTextFeatures:
        """``stored`` with its text model checked: there, and the one that computed the features."""
        from itrlab.data.tokenizers import model_identity

        model = stored.model
        folder = Path(str(model.get("dir", "")))
        if not model.get("dir") or not folder.is_dir():
            raise UserInputError(
                f"this model reads text features computed by the text model {model.get('name')} at "
                f"{folder}, which is not there: it embeds its data set's captions only (install that "
                f"model to embed new text)"
            )
        found = model_identity(folder).get("sha256")
        if found != model.get("sha256"):
            raise UserInputError(
                f"the text model at {folder} (digest {found}) is not the one that computed this "
                f"model's text features (digest {model.get('sha256')}); new text would be embedded "
                f"unlike its training captions"
            )
        return cls(stored, batch_size)

    def open_split(self, split: str, captions, max_len: int | None = None):
        if self.holds(split, captions):
            return super().open_split(split, captions, max_len)
        if self._encoder is None:
            from itrlab.extract.text import CaptionEncoder

            self._encoder = CaptionEncoder(Path(self.model["dir"]), "cpu", int(self.manifest.get("max_len", 64)))
        states, _ = self._encoder.encode(list(captions), self.batch_size)
        return TypedStates(states, max_len)
