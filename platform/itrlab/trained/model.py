"""A trained model opened for use: it embeds image features and raw captions (tokenized as in training) and scores
pairs, for every method; a model whose data came from photos also embeds photos (:mod:`itrlab.trained.new_images`); a
model that scores pairs jointly (cross-attention) says that it has no separate embeddings.

:func:`open_bundle` reads a model folder (:mod:`itrlab.trained.bundle`) and checks, before anything is scored,
that the model is what ``model.json`` says: every file regular and of its recorded sha256 (the arrays of stored
text features too; a model without digests opens with one warning), its identity that of its ``config.yaml`` and,
named by its run, of that run, and its weights of the method's dtypes and finite. docs/models.md ("What is checked
when a model opens") gives each check.
"""

from __future__ import annotations

import logging
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
from itrlab.errors import ConfigError, DataError, UserInputError
from itrlab.eval import RecallTable, ScoreFn
from itrlab.files import load_tensors, read_json, regular_file, sha256_file
from itrlab.methods import METHODS
from itrlab.methods.base import MethodModule
from itrlab.methods.context import BuildContext
from itrlab.methods.registry import scheme_of
from itrlab.trained.bundle import CONFIG, INFO, TEST, TOKENIZER, WEIGHTS, ModelInfo
from itrlab.trained.new_images import PhotoFeatures

_log = logging.getLogger(__name__)


def plain_config(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` without its scheme's section: the model a scheme exports (its target) is the plain method's."""
    scheme = scheme_of(config)
    return config if scheme is None else config.model_copy(update={scheme.section: None})


class TrainedModel:
    """A trained model: ``embed_images``, ``embed_photos``, ``embed_captions``, ``score``, and ``score_fn`` over a
    whole split (what ``itrlab evaluate`` ranks with, the same function the run's test table was computed with)."""

    def __init__(
        self,
        method: MethodModule,
        config: ExperimentConfig,
        tokenizer,
        info: ModelInfo,
        test: RecallTable | None,
        source: str,
        weights_sha256: str = "",
        from_run: str | None = None,
    ):
        self.method, self.config, self.tokenizer, self.info, self.test, self.source = (
            method,
            config,
            tokenizer,
            info,
            test,
            source,
        )
        self.weights_sha256 = weights_sha256  # what names the model whatever it is called (ensembles)
        self.from_run = from_run  # the run it was read from (runs:/<id>/..., a run folder), None: not known
        self.photo_features: PhotoFeatures | None = None  # built with the first photo
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
    def embed_photos(self, photos: Sequence[bytes | str | Path]) -> Tensor:
        """The embeddings (N, d) of ``photos`` (JPEG or PNG bytes or files), through the features the extraction of
        the model's data would have stored for them (:mod:`itrlab.trained.new_images`). UserInputError (one line) for
        a model whose features did not come from photos through that extraction, or a photo that is no JPEG or PNG
        image."""
        self._require_embeddings("image")
        if self.photo_features is None:
            self.photo_features = PhotoFeatures.of(self.info.extraction, self.info.dataset, self.info.layout())
        return self.embed_images(self.photo_features(photos))

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


def open_bundle(
    folder: str | Path, source: str | None = None, from_run: str | None = None, embedding: str | None = None
) -> TrainedModel:
    """The model in ``folder`` (:func:`itrlab.trained.bundle.write_bundle`), checked, built and loaded; ``from_run``:
    the run it was read from, which ``model.json`` must name; ``embedding``: the embedding its scores read (None: its
    config's ``eval.embedding``)."""
    folder = Path(folder)
    source = source or str(folder)
    info = ModelInfo.read(folder / INFO)
    if from_run is not None and info.run_id != from_run:
        raise UserInputError(
            f"{source}: its model.json names run {info.run_id}, but the model is run {from_run}'s; refused"
        )
    weights_sha256 = check_files(folder, info, source)
    config = read_config(folder / CONFIG, source, embedding)
    plain = plain_config(config)
    check_identity(folder / INFO, info, plain)
    tokenizer = load_text_tokenizer(folder / TOKENIZER)
    if isinstance(tokenizer, TextFeatures) and info.text_features_sha256 is not None:
        tokenizer.check_digests(info.text_features_sha256, folder / INFO, "the model")
    state = load_tensors(folder / WEIGHTS, "model weights")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserInputError(f"{folder / WEIGHTS} is not a state dict of tensors")
    context = BuildContext(
        feature_dim=info.feature_dim,
        vocab_size=len(tokenizer),
        vocab_words=getattr(tokenizer, "words", None),
        vocab=tokenizer,
        train_size=info.n_train_captions,
    )
    method = METHODS[plain.method.name].from_config(plain, context)
    check_weights(folder / WEIGHTS, state, method, plain.method.name)
    try:
        method.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise UserInputError(
            f"{folder / WEIGHTS} does not fit method '{plain.method.name}' as its config builds it "
            f"({first[1].strip() if len(first) > 1 else first[0]})"
        ) from None
    test = read_test_table(folder / TEST) if (folder / TEST).exists() else None
    return TrainedModel(method, config, tokenizer, info, test, source, weights_sha256, from_run)


def read_config(path: Path, source: str, embedding: str | None) -> ExperimentConfig:
    """The model's ``config.yaml``, read at ``embedding`` (``eval.embedding``; None: as it is). A reading the model
    has not (before the projection head of a model without one) is a UserInputError naming the model."""
    if embedding is None:
        return load_experiment(path)
    try:  # the run's own second reading is a training's: a stored model is read one way
        return load_experiment(path, [f"eval.embedding={embedding}", "eval.log_prehead=false"])
    except ConfigError as err:  # what the model is, without the config's fix (its settings are trained)
        why = err.allowed.split(";")[0]
        raise UserInputError(f"{source}: no reading at eval.embedding={embedding}: {why}") from None


def check_files(folder: Path, info: ModelInfo, source: str) -> str:
    """Every file of the model folder regular and (a model bundled with digests) of the digest ``model.json``
    records, else UserInputError; one warning for a model bundled before the digests. The weights' sha256."""
    for name in (CONFIG, TOKENIZER, WEIGHTS, TEST):
        if name != TEST or (folder / name).exists():
            regular_file(folder / name, f"model's {name}")
    recorded = info.files_sha256
    if recorded is None:
        unchecked = "weights, config, tokenizer, test table" + (
            " and text features" if info.text_encoder == "precomp" else ""
        )
        _log.warning(
            "model %s: its model.json records no digests (bundled before itrlab recorded them): its %s are not "
            "checked against it",
            source,
            unchecked,
        )
        return sha256_file(folder / WEIGHTS)
    for name in (WEIGHTS, CONFIG, TOKENIZER):
        if name not in recorded:
            raise DataError(folder / INFO, f"'files_sha256' records no digest of {name}; refused")
    for name, digest in recorded.items():
        found = sha256_file(folder / name) if (folder / name).exists() else "no file"
        if found != digest:
            raise UserInputError(
                f"{folder / name}: sha256 {found[:12]}, not the {digest[:12]} its model.json records: changed "
                f"since the model was bundled; refused"
            )
    return recorded[WEIGHTS]


def check_identity(info_path: Path, info: ModelInfo, plain: ExperimentConfig) -> None:
    """UserInputError unless ``model.json`` says what its ``config.yaml`` builds: the method, text encoder, data
    set and test protocol, and whether the method embeds images and captions apart."""
    built = {
        "method": plain.method.name,
        "text_encoder": plain.model.text.encoder,
        "dataset": plain.dataset.name,
        "test_protocol": plain.eval.test_protocol,
        "embeds_apart": METHODS[plain.method.name].embeds_apart,
    }
    for key, value in built.items():
        if getattr(info, key) != value:
            raise UserInputError(
                f"{info_path}: '{key}' is {getattr(info, key)!r}, but its config.yaml builds {value!r}; refused"
            )


def check_weights(path: Path, state: dict[str, torch.Tensor], method: MethodModule, name: str) -> None:
    """UserInputError unless each tensor of ``state`` has the dtype the method holds at its name and every value
    of a floating-point tensor is finite (before they are loaded: loading casts a tensor silently)."""
    own = method.state_dict()
    for key, tensor in state.items():
        if key in own and tensor.dtype != own[key].dtype:
            raise UserInputError(f"{path}: '{key}' is {tensor.dtype}, method '{name}' holds {own[key].dtype} there")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserInputError(f"{path}: '{key}' holds NaN or infinite values; refused")


def read_test_table(path: Path) -> RecallTable:
    """The test table a model folder holds; DataError (one line) for one that is not a recall table."""
    data = read_json(path, "test table", 1 << 20)
    try:
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        return RecallTable.from_dict(data)
    except (ValueError, TypeError, KeyError) as err:
        raise DataError(path, f"not a recall table ({str(err)[:200]})") from None
