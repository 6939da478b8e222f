"""A trained model opened for use (issue 43): it embeds image features, embeds raw captions (tokenized as in
training) and scores pairs, for every method; a model that scores pairs jointly (cross-attention) says that it
has no separate embeddings. :func:`open_bundle` reads a model folder (:mod:`itrlab.trained.bundle`) safely."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from itrlab.assembly import load_experiment
from itrlab.config import ExperimentConfig
from itrlab.data import PrecompSplit
from itrlab.data.dataset import eval_loaders
from itrlab.data.text_features import TextFeatures
from itrlab.data.tokenizers import load_text_tokenizer
from itrlab.errors import UserInputError
from itrlab.eval import RecallTable, ScoreFn
from itrlab.files import load_tensors, read_json
from itrlab.methods import METHODS
from itrlab.methods.base import MethodModule
from itrlab.methods.context import BuildContext
from itrlab.methods.registry import scheme_of
from itrlab.trained.bundle import CONFIG, INFO, TEST, TOKENIZER, WEIGHTS, ModelInfo


def plain_config(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` without its scheme's section: the model a scheme exports (its target) is the plain method's."""
    scheme = scheme_of(config)
    return config if scheme is None else config.model_copy(update={scheme.section: None})


class TrainedModel:
    """A trained model: ``embed_images``, ``embed_captions``, ``score``, and ``score_fn`` over a whole split
    (what ``itrlab evaluate`` ranks with, the same function the run's test table was computed with)."""

    def __init__(
        self,
        method: MethodModule,
        config: ExperimentConfig,
        tokenizer,
        info: ModelInfo,
        test: RecallTable | None,
        source: str,
    ):
        self.method, self.config, self.tokenizer, self.info, self.test, self.source = (
            method,
            config,
            tokenizer,
            info,
            test,
            source,
        )
        self.method.eval()

    def __repr__(self) -> str:
        return f"TrainedModel({self.info.method} from {self.source}, expects {self.info.layout()})"

    @property
    def embeds_apart(self) -> bool:
        return self.info.embeds_apart

    @property
    def batch_size(self) -> int:
        return self.config.eval.batch_size

    def _require_embeddings(self, what: str) -> None:
        if not self.embeds_apart:
            raise UserInputError(
                f"method '{self.info.method}' scores image-caption pairs jointly (cross-attention): "
                f"it has no separate {what} embeddings; use score(features, captions)"
            )

    def check_features(self, features: np.ndarray | Tensor, where: str = "features") -> None:
        """UserInputError unless ``features`` is (N, R, D) in the layout this model trained on."""
        shape = tuple(features.shape)
        if len(shape) != 3 or shape[1:] != (self.info.n_regions, self.info.feature_dim):
            raise UserInputError(
                f"{where}: image features of shape {shape}; this model expects (N, "
                f"{self.info.n_regions}, {self.info.feature_dim}) ({self.info.layout()}, "
                f"trained on {self.info.dataset})"
            )

    def check_split(self, split: PrecompSplit, where: str) -> None:
        """UserInputError when ``split`` does not fit: another feature layout, or (stored text features) other
        captions than the model's text features hold."""
        self.check_features(split.features, where)
        if isinstance(self.tokenizer, TextFeatures):
            self.tokenizer.check_split(split.split, split.captions)

    def check_new_text(self) -> None:
        """Ready to embed new text: a model that reads stored text features gets their text model (checked: there,
        and the one that computed them; else UserInputError, :mod:`itrlab.trained.new_text`)."""
        from itrlab.trained.new_text import NewTextFeatures

        if isinstance(self.tokenizer, TextFeatures) and not isinstance(self.tokenizer, NewTextFeatures):
            self.tokenizer = NewTextFeatures.of(self.tokenizer, self.batch_size)

    def _query(self, features: np.ndarray | None, captions: Sequence[str]) -> PrecompSplit:
        if features is None:
            features = np.zeros((0, self.info.n_regions, self.info.feature_dim), dtype=np.float32)
        return PrecompSplit(Path("."), "query", np.asarray(features, dtype=np.float32), list(captions), 1)

    @torch.no_grad()
    def embed_images(self, features: np.ndarray | Tensor) -> Tensor:
        """The embeddings (N, d) of ``features`` (N, R, D) region features."""
        self._require_embeddings("image")
        self.check_features(features)
        features = torch.as_tensor(np.asarray(features, dtype=np.float32))
        return (
            torch.cat([self.method.embed_images(chunk) for chunk in features.split(self.batch_size)])
            if len(features)
            else features.new_zeros((0, 0))
        )

    @torch.no_grad()
    def embed_captions(self, captions: Sequence[str]) -> Tensor:
        """The embeddings (M, d) of raw ``captions``, tokenized as the model's training captions were."""
        self._require_embeddings("caption")
        self.check_new_text()
        _, texts = eval_loaders(
            self._query(None, captions), self.tokenizer, self.batch_size, self.config.model.text.max_len
        )
        return torch.cat([self.method.embed_captions(batch.tokens, batch.lengths) for batch in texts])

    def score(self, features: np.ndarray | Tensor, captions: Sequence[str]) -> Tensor:
        """Scores (N, M) of every image of ``features`` (N, R, D) against every caption, for any method."""
        self.check_features(features)
        self.check_new_text()
        split = self._query(np.asarray(features, dtype=np.float32), captions)
        return self.method.score_fn(split, self.tokenizer, self.batch_size)(
            slice(0, split.n_images), slice(0, len(captions))
        )

    def score_fn(self, split: PrecompSplit) -> ScoreFn:
        """The scores of ``split``'s images against its captions, block by block (as the run's test)."""
        return self.method.score_fn(split, self.tokenizer, self.batch_size)


def open_bundle(folder: str | Path, source: str | None = None) -> TrainedModel:
    """The model in ``folder`` (written by :func:`itrlab.trained.bundle.write_bundle`), built and loaded."""
    folder = Path(folder)
    info = ModelInfo.read(folder / INFO)
    config = load_experiment(folder / CONFIG)
    tokenizer = load_text_tokenizer(folder / TOKENIZER)
    state = load_tensors(folder / WEIGHTS, "model weights")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserInputError(f"{folder / WEIGHTS} is not a state dict of tensors")
    plain = plain_config(config)
    context = BuildContext(
        feature_dim=info.feature_dim,
        vocab_size=len(tokenizer),
        vocab_words=getattr(tokenizer, "words", None),
        vocab=tokenizer,
        train_size=info.n_train_captions,
    )
    method = METHODS[plain.method.name].from_config(plain, context)
    try:
        method.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise UserInputError(
            f"{folder / WEIGHTS} does not fit method '{plain.method.name}' as its config builds it "
            f"({first[1].strip() if len(first) > 1 else first[0]})"
        ) from None
    test = RecallTable.from_dict(read_json(folder / TEST, "test table")) if (folder / TEST).is_file() else None
    return TrainedModel(method, config, tokenizer, info, test, source or str(folder))
