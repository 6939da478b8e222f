"""What every training method provides to the trainer and the evaluator: the method layer's base, as
:mod:`itrlab.losses.base` is the loss layer's.

A method owns its encoders, losses and state (momentum encoders, queues, prototypes: module buffers, so that
checkpoints, resume, retries and DDP carry them). The trainer calls ``method(batch)`` for a
:class:`~itrlab.losses.LossOutput` and steps the optimizer over ``param_groups``; ``score_fn(split, vocab)`` gives the
evaluator a :data:`~itrlab.eval.ScoreFn` over a whole split (dense methods embed once, interaction methods score blocks
in shards). Its life cycle, ``validate_config``, ``from_config``, ``prepare`` (a fresh method only, never one loaded
from a checkpoint), ``set_epoch``, ``step`` and ``after_step``, is docs/architecture.md's ("Contracts", Methods).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, Protocol

import torch
from pydantic import ConfigDict, ValidationError
from torch import Tensor, nn

from itrlab.config.loader import config_error_from_validation
from itrlab.config.schema import PREHEAD, ExperimentConfig, LossConfig, MethodSection
from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.errors import ConfigError
from itrlab.eval import ScoreFn
from itrlab.losses import LOSSES, LossOutput, Similarities, WarmupLoss
from itrlab.losses.parts import PartBound
from itrlab.methods.context import BuildContext
from itrlab.methods.loss_section import loss_settings
from itrlab.models.glove import init_glove_embeddings


class Method(Protocol):
    name: str

    def __call__(self, batch: Batch) -> LossOutput: ...

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn: ...

    def parameters(self): ...


class Scorer(Protocol):
    """What the trainer evaluates: a method, one of its branches, or one of its readings (the embedding before
    its projection head)."""

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn: ...


def build_task_loss(config: LossConfig) -> nn.Module:
    """The ``loss`` section's task loss, built from its typed settings, behind a :class:`WarmupLoss` when
    ``warmup_epochs`` > 0 (the warm-up loss gets those of the main loss's settings that it takes: ``margin``
    for ``vse``)."""
    main, warmup = loss_settings(config)
    loss = LOSSES.build(config.name, main)
    return loss if warmup is None else WarmupLoss(loss, LOSSES.build(config.warmup_loss, warmup), config.warmup_epochs)


def task_loss_requires(config: LossConfig) -> tuple[str, ...]:
    """What the ``loss`` section's task loss reads (its ``requires``; with a warm-up, the warm-up loss's
    too), known from its typed settings without building it."""
    main, warmup = loss_settings(config)
    reads = LOSSES[config.name].reads(main)
    return reads if warmup is None else tuple(dict.fromkeys((*reads, *LOSSES[config.warmup_loss].reads(warmup))))


class MethodSettings(MethodSection):
    """Base of a method package's settings: ``name: Literal[...]`` plus its own keys (no others)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


def union(*names: Iterable[str]) -> tuple[str, ...]:
    """The names of all arguments, in first-seen order, once each."""
    return tuple(dict.fromkeys(n for group in names for n in group))


REINITIALISED = "_itrlab_reinitialised"


def mark_reinitialised(*parameters: nn.Parameter) -> None:
    """Say that ``parameters`` were re-initialised (CODER's prototypes after reclustering): the trainer
    drops their optimizer state (Adam's step and moments) before the next step, so that moments
    gathered for the old values do not drive the new ones."""
    for parameter in parameters:
        setattr(parameter, REINITIALISED, True)


def drop_reinitialised_state(optimizer: torch.optim.Optimizer) -> int:
    """Forget the optimizer state of every parameter marked by :func:`mark_reinitialised`; how many."""
    dropped = 0
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if getattr(parameter, REINITIALISED, False):
                optimizer.state.pop(parameter, None)
                setattr(parameter, REINITIALISED, False)
                dropped += 1
    return dropped


class MethodModule(nn.Module):
    """Base class of methods implemented as one torch module, with hooks whose defaults fit a single-branch method:
    ``param_groups(lr)``, ``set_epoch(epoch)``, ``after_step(step, total_steps)``, ``auxiliary_evaluators()`` (other
    branches evaluated beside the model), ``batch_extras()``; and for a step's cost estimate, ``cost_note(config)``
    (work its training shape does not show) and ``bind_made_up_inputs(batch)`` (data a step reads beyond its batch)."""

    name = "method"
    settings: ClassVar[type[MethodSettings]]  # the method section: name (a Literal) and the method's own keys
    # what batch_similarities can hand a loss (Similarities field and extra names)
    provides: ClassVar[frozenset[str]] = frozenset({"i2t", "image_ids", "i2i", "t2t"})
    loss: nn.Module  # the single-branch task loss, forward(Similarities) -> LossOutput
    text_lr: float | None = None  # learning rate of a pretrained text backbone (None: the main lr)
    # why runs of this method cannot train as members of one batched model (itrlab.train.grouped), on one
    # line; None: its step is a plain function of its parameters and batch, and it groups
    group_refusal: ClassVar[str | None] = None
    # what is known of the parts of the loss it logs (loss_<part>), by part name: a floor, a plateau, a
    # statistic beside the loss (itrlab.losses.parts); the report reads each part against them
    part_bounds: ClassVar[Mapping[str, PartBound]] = {}
    # whether it embeds images and captions apart (``embed_images(features)``, ``embed_captions(tokens,
    # lengths)``) and scores them by a product; False: it scores image-caption pairs jointly
    embeds_apart: ClassVar[bool] = False
    # whether its evaluation reads the embedding before the projection head too (``eval.embedding=prehead``,
    # ``eval.log_prehead``; ``prehead_reading()``): a dual encoder whose scores are its encoders' embeddings
    reads_prehead: ClassVar[bool] = False

    # ------------------------------------------------------------------ building

    @classmethod
    def validate_config(cls, config: ExperimentConfig) -> None:
        """Raise ConfigError for a config this method cannot train (its sections are typed already). The base checks
        that the task loss reads only similarities this method ``provides`` and that a reading before the projection
        head is asked of a method that has one (:meth:`check_reading`)."""
        missing = [name for name in task_loss_requires(config.loss) if name not in cls.provides]
        if missing:
            raise ConfigError(
                "loss.name",
                config.loss.name,
                f"method '{config.method.name}' gives its losses {', '.join(sorted(cls.provides))}; "
                f"loss '{config.loss.name}' also needs {', '.join(missing)}",
            )
        cls.check_reading(config)

    @classmethod
    def check_reading(cls, config: ExperimentConfig) -> None:
        """ConfigError when the ``eval`` section asks for the reading before the projection head of a method
        whose evaluation has no such reading, or (``eval.embedding=prehead``) of a model without a head, whose
        one embedding is its output. ``eval.log_prehead`` on a model without a head logs that embedding again,
        so that every row of a sweep carries the reading."""
        settings = config.eval
        if settings.embedding != PREHEAD and not settings.log_prehead:
            return
        field, value = ("eval.embedding", PREHEAD) if settings.embedding == PREHEAD else ("eval.log_prehead", True)
        if not cls.reads_prehead:
            raise ConfigError(
                field,
                value,
                f"method '{config.method.name}' scores with no embedding before a projection head; it takes "
                f"eval.embedding=output and eval.log_prehead=false (the defaults)",
            )
        if settings.embedding == PREHEAD and config.model.projection_hidden is None:
            raise ConfigError(
                field,
                value,
                "model.projection_hidden is null: the model has no projection head, so its one embedding is "
                "its output; set model.projection_hidden, or keep eval.embedding=output",
            )

    @classmethod
    def method_settings(cls, config: ExperimentConfig) -> MethodSettings:
        """The ``method`` section typed by ``settings`` (already so in an assembled config)."""
        if isinstance(config.method, cls.settings):
            return config.method
        try:
            return cls.settings.model_validate(config.method.model_dump(by_alias=True))
        except ValidationError as err:
            raise config_error_from_validation(err, cls.settings, prefix="method.") from None

    @classmethod
    def check_data(cls, config: ExperimentConfig, summary) -> None:
        """Raise ConfigError for settings that do not fit the data's sizes (a DataSummary: split sizes)."""

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> MethodModule:
        raise NotImplementedError

    def prepare(self, context: BuildContext) -> None:
        """Initialise a fresh method from the data: GloVe rows of every GloVe word embedding. Overrides call
        ``super().prepare(context)``."""
        if context.vocab_words is None:
            return
        train = context.train
        coverage = init_glove_embeddings(self, context.vocab_words, train.captions if train is not None else None)
        if coverage is not None:
            context.notes["glove"] = coverage

    @classmethod
    def cost_note(cls, config: ExperimentConfig) -> str:
        """A word for work of a step of ``config`` that its training shape (data, model, batch:
        :func:`itrlab.train.throughput.training_shape`) does not show, such as a frozen model run in the step;
        "" (the default) where there is none. The shape carries it, so that a throughput measured without that
        work is never read for a step with it."""
        return ""

    def bind_made_up_inputs(self, batch: Batch) -> None:
        """Before a step on made-up inputs of ``batch``'s shape (counting its cost, :mod:`itrlab.train.flops`),
        bind what the step reads beyond its batch and ``prepare`` would take from the training data, made up
        as well. Nothing by default."""

    def batch_extras(self) -> dict[str, Callable[[int], Tensor]]:
        """Extra per-sample fields of training batches: name -> function of the training caption's index giving a tensor
        (stacked, or zero-padded along the first axis, into ``Batch.extras``). A method that needs data for them keeps
        it from ``prepare``."""
        return {}

    # ------------------------------------------------------------------ training

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        """The batch's similarity matrices, with every input in ``needs`` (``i2i``, ``t2t`` ...)."""
        raise NotImplementedError

    def step(self, batch: Batch, needs: Iterable[str] = ()) -> tuple[LossOutput, Similarities]:
        """The task loss of one batch and the similarities it was computed from (with ``needs`` too): what a cooperative
        scheme composes branches through."""
        sims = self.batch_similarities(batch, union(needs, getattr(self.loss, "requires", ())))
        return self.loss(sims), sims

    def forward(self, batch: Batch) -> LossOutput:
        return self.step(batch)[0]

    def exported_model(self) -> nn.Module:
        """What is checkpointed as "the model" (a cooperative scheme's target branch)."""
        return self

    def param_groups(self, lr: float) -> list[dict]:
        """Trainable parameters at ``lr``, a pretrained text backbone's at ``text_lr`` when set; frozen parameters are
        in no group."""
        trainable = [p for p in self.parameters() if p.requires_grad]
        backbone = [
            p
            for m in self.modules()
            if hasattr(m, "backbone_parameters")
            for p in m.backbone_parameters()
            if p.requires_grad
        ]
        if not backbone or self.text_lr is None:
            return [{"params": trainable, "lr": lr}]
        ids = {id(p) for p in backbone}
        return [
            {"params": [p for p in trainable if id(p) not in ids], "lr": lr},
            {"params": backbone, "lr": self.text_lr},
        ]

    def set_epoch(self, epoch: int) -> None:
        """Called before epoch ``epoch`` (1-based) trains: tells epoch-scheduled losses."""
        for module in self.modules():
            if isinstance(module, WarmupLoss):
                module.set_epoch(epoch)

    def after_step(self, step: int, total_steps: int) -> None:
        """Called after optimizer step ``step`` (1-based) of ``total_steps``."""

    def auxiliary_evaluators(self) -> dict[str, MethodModule]:
        """Branches evaluated and logged beside the model, by name (prefix of their metrics)."""
        return {}
