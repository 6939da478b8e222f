"""What every training method provides to the trainer and the evaluator.

A method owns its encoders and losses. The trainer calls ``method(batch)`` for a
:class:`~itrlab.losses.LossOutput`, steps the optimizer over ``method.parameters()``, and asks
``method.score_fn(split, vocab)`` for a :data:`~itrlab.eval.ScoreFn` over a whole split; the
evaluator ranks with it block by block. Dense methods embed once and score by matrix products;
interaction methods (later) score image-caption blocks in shards.
"""

from __future__ import annotations

from typing import Protocol

from torch import nn

from itrlab.config.schema import LossConfig
from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.eval import ScoreFn
from itrlab.losses import LOSSES, LossOutput, Similarities, WarmupLoss, build_loss


class Method(Protocol):
    name: str

    def __call__(self, batch: Batch) -> LossOutput: ...

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn: ...

    def parameters(self): ...


def build_task_loss(config: LossConfig) -> nn.Module:
    """The ``loss`` section's task loss, behind a :class:`WarmupLoss` when ``warmup_epochs`` > 0.

    The warm-up loss gets those of the main loss's parameters that it takes (``margin`` for ``vse``).
    """
    loss = build_loss(config.name, **config.params())
    if config.warmup_epochs == 0:
        return loss
    accepted = LOSSES.param_names(config.warmup_loss)
    warmup = build_loss(config.warmup_loss, **{k: v for k, v in config.params().items() if k in accepted})
    return WarmupLoss(loss, warmup, config.warmup_epochs)


class MethodModule(nn.Module):
    """Base class of methods implemented as one torch module.

    Hooks the trainer calls, with defaults that fit a single-branch method:
    ``param_groups(lr)`` (what the optimizer updates, and with which learning rate),
    ``set_epoch(epoch)`` (before every epoch: epoch-scheduled losses),
    ``after_step(step, total_steps)`` (after every optimizer step: EMA anchors),
    ``auxiliary_evaluators()`` (other branches to evaluate beside the model: anchors).
    """

    name = "method"
    loss: nn.Module  # the single-branch task loss, forward(Similarities) -> LossOutput
    text_lr: float | None = None  # learning rate of a pretrained text backbone (None: the main lr)

    def batch_similarities(self, batch: Batch, same_modality: bool = False) -> Similarities:
        """The batch's similarity matrices (``i2i``/``t2t`` too when ``same_modality``)."""
        raise NotImplementedError

    def forward(self, batch: Batch) -> LossOutput:
        """The task loss of one batch."""
        return self.loss(self.batch_similarities(batch, getattr(self.loss, "needs_same_modality", False)))

    def exported_model(self) -> nn.Module:
        """What is checkpointed as "the model" (a cooperative scheme's target branch)."""
        return self

    def param_groups(self, lr: float) -> list[dict]:
        """Trainable parameters at ``lr``; a pretrained text backbone's (BERT) at ``text_lr`` when set.

        Frozen parameters (``requires_grad=False``) are in no group.
        """
        trainable = [p for p in self.parameters() if p.requires_grad]
        backbone = [p for m in self.modules() if hasattr(m, "backbone_parameters")
                    for p in m.backbone_parameters() if p.requires_grad]
        if not backbone or self.text_lr is None:
            return [{"params": trainable, "lr": lr}]
        ids = {id(p) for p in backbone}
        return [{"params": [p for p in trainable if id(p) not in ids], "lr": lr},
                {"params": backbone, "lr": self.text_lr}]

    def set_epoch(self, epoch: int) -> None:
        """Called before epoch ``epoch`` (1-based) trains: tells epoch-scheduled losses."""
        for module in self.modules():
            if isinstance(module, WarmupLoss):
                module.set_epoch(epoch)

    def after_step(self, step: int, total_steps: int) -> None:
        """Called after optimizer step ``step`` (1-based) of ``total_steps``."""

    def auxiliary_evaluators(self) -> dict[str, "MethodModule"]:
        """Branches evaluated and logged beside the model, by name (prefix of their metrics)."""
        return {}
