"""Cooperative schemes around any single-branch method: DBL's scenarios and the baselines' schemes.

Branches ``B_1 .. B_M`` are copies of one method (any registered method, so DBL boosts CODER or ConVSE++ as it boosts
VSE++); ``B_M`` is the target, the others anchors. The target trains on ``task + weight * cooperative``, the cooperative
term the mean of the cooperative loss against every earlier branch (DBL's M-branch cohorts); with a mutual loss (DML)
every branch learns from all others.

Scenarios (DBL §III-C):

* ``oss``: all branches train together from random initialisation on the same batches; an anchor learns only from
  its own task loss (and from earlier branches when M > 2): the cooperative loss detaches its similarities.
* ``oas``: the anchor is a frozen, trained checkpoint and the target is warm-started from it.
* ``mss``: the anchor is an exponential moving average of the target's parameters, updated after every optimizer
  step with a momentum that follows a cosine schedule from 0.99995 to 1 over all training iterations (eq. 22).

Only the target is evaluated as the model and exported as ``model.pt``; the anchors' recalls are logged beside it
(``anchor_`` metrics).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.errors import UserInputError
from itrlab.eval import ScoreFn
from itrlab.files import load_tensors
from itrlab.losses import LossOutput, Similarities
from itrlab.methods.base import MethodModule, union
from itrlab.methods.dbl.cooperative_loss import CooperativeLoss
from itrlab.models.ema import ema_update_


def ema_momentum(step: int, total_steps: int, start: float = 0.99995, end: float = 1.0) -> float:
    """DBL eq. 22: ``m = end - (end - start) * (cos(π · step / total) + 1) / 2``.

    ``start`` at step 0, ``(start + end) / 2`` half-way, ``end`` at the last step.
    """
    progress = min(max(step / max(total_steps, 1), 0.0), 1.0)
    return end - (end - start) * (math.cos(math.pi * progress) + 1) / 2


class CooperativeMethod(MethodModule):
    """``branches[-1]`` is the target; the scenario decides how the anchors learn."""

    def __init__(
        self,
        branches: list[MethodModule],
        loss: CooperativeLoss,
        scenario: str,
        weight: float = 1.0,
        ema: tuple[float, float] = (0.99995, 1.0),
    ):
        super().__init__()
        if len(branches) < 2:
            raise ValueError("a cooperative scheme needs at least two branches")
        if scenario not in ("oas", "oss", "mss"):
            raise ValueError(f"unknown scenario {scenario!r}; allowed: oas, oss, mss")
        self.branches = nn.ModuleList(branches)
        self.cooperative_loss = loss
        self.scenario = scenario
        self.weight = weight
        self.ema = ema
        self.name = f"{scenario}:{branches[-1].name}"
        self.momentum = ema[0]
        if self.anchors_frozen:
            for anchor in self.anchors:
                anchor.requires_grad_(False)

    @property
    def target(self) -> MethodModule:
        return self.branches[-1]

    @property
    def anchors(self) -> list[MethodModule]:
        return list(self.branches[:-1])

    @property
    def anchors_frozen(self) -> bool:
        return self.scenario in ("oas", "mss")

    @property
    def loss(self) -> nn.Module:  # the target's task loss
        return self.target.loss

    def prepare(self, context) -> None:  # every fresh branch was prepared when it was built
        return None

    def _peers(self, index: int) -> list[int]:
        """The branches whose similarities branch ``index`` learns from: all others for a mutual loss
        (DML), else the earlier ones (boosting and distillation: the target learns from its anchors)."""
        mutual = self.cooperative_loss.mutual
        return [k for k in range(len(self.branches)) if k != index and (mutual or k < index)]

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        return self.target.batch_similarities(batch, needs)

    def step(self, batch: Batch, needs: Iterable[str] = ()) -> tuple[LossOutput, Similarities]:
        """Every trainable branch's own step (its task loss and parts), plus the cooperative terms; frozen anchors (OAS,
        MSS) only score the batch, without gradient. Parts: ``task`` and ``cooperative`` of the target,
        ``branch{m}_task`` / ``branch{m}_cooperative`` of the other trainable branches, and ``task_<part>``, the
        target's own loss's parts beyond i2t/t2i, so that a wrapped method keeps its logging."""
        needs = union(needs, self.cooperative_loss.requires)
        last = len(self.branches) - 1
        sims: list[Similarities] = []
        tasks: dict[int, LossOutput] = {}
        for index, branch in enumerate(self.branches):
            if self.anchors_frozen and index < last:
                with torch.no_grad():
                    sims.append(branch.batch_similarities(batch, needs))
            else:
                tasks[index], branch_sims = branch.step(batch, needs)
                sims.append(branch_sims)
        total = sims[-1].i2t.new_zeros(())
        parts: dict[str, torch.Tensor] = {}
        for index, task in tasks.items():
            total = total + task.loss
            prefix = "" if index == last else f"branch{index + 1}_"
            parts[f"{prefix}task"] = task.loss.detach()
            if index == last:
                parts.update(
                    {f"task_{name}": value for name, value in task.parts.items() if name not in ("i2t", "t2i")}
                )
            peers = self._peers(index)
            if peers:
                coop = torch.stack([self.cooperative_loss(sims[index], sims[k]).loss for k in peers]).mean()
                total = total + self.weight * coop
                parts[f"{prefix}cooperative"] = coop.detach()
        return LossOutput(total, parts), sims[-1]

    def param_groups(self, lr: float) -> list[dict]:
        """Every trainable branch's groups (each keeps its own learning rates); frozen anchors none."""
        groups = []
        for branch in self.branches:
            for group in branch.param_groups(lr):
                params = [p for p in group["params"] if p.requires_grad]
                if params:
                    groups.append({**group, "params": params})
        return groups

    def set_epoch(self, epoch: int) -> None:
        for branch in self.branches:
            branch.set_epoch(epoch)

    @torch.no_grad()
    def after_step(self, step: int, total_steps: int) -> None:
        """Every trainable branch's own after-step (a CODER branch updates its queues); then, under
        MSS, the anchor moves towards the target with the eq. 22 momentum."""
        last = len(self.branches) - 1
        for index, branch in enumerate(self.branches):
            if not (self.anchors_frozen and index < last):
                branch.after_step(step, total_steps)
        if self.scenario != "mss":
            return
        self.momentum = ema_momentum(step, total_steps, *self.ema)
        for anchor in self.anchors:
            ema_update_(anchor, self.target, self.momentum)

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        return self.target.score_fn(split, vocab, batch_size)

    def auxiliary_evaluators(self) -> dict[str, MethodModule]:
        anchors = self.anchors
        if len(anchors) == 1:
            return {"anchor": anchors[0]}
        return {f"anchor{i + 1}": anchor for i, anchor in enumerate(anchors)}

    def exported_model(self) -> nn.Module:
        return self.target

    @classmethod
    def build(
        cls,
        make_branch,
        loss: CooperativeLoss,
        scenario: str,
        *,
        branches: int = 2,
        weight: float = 1.0,
        ema: tuple[float, float] = (0.99995, 1.0),
        anchor_checkpoint: Path | None = None,
    ) -> CooperativeMethod:
        """Branches from ``make_branch()`` (a fresh, randomly initialised method each call).

        OAS loads ``anchor_checkpoint`` (a ``best.pt`` or ``model.pt`` of the plain method) into the
        anchor and warm-starts the target from it; MSS starts the anchor as a copy of the target.
        """
        if scenario == "oas":
            if anchor_checkpoint is None:
                raise ValueError("the oas scenario needs an anchor checkpoint")
            anchor = make_branch()
            try:
                anchor.load_state_dict(load_model_state(anchor_checkpoint))
            except RuntimeError as err:  # another width, another method
                lines = str(err).strip().splitlines()
                detail = next(
                    (
                        line.strip()
                        for line in lines
                        if "size mismatch" in line or "Missing" in line or "Unexpected" in line
                    ),
                    lines[0] if lines else type(err).__name__,
                )
                raise UserInputError(
                    f"cooperative.anchor_checkpoint {anchor_checkpoint} does not fit this method "
                    f"({detail}): train the anchor with the same method and model settings"
                ) from None
            members = [anchor, copy.deepcopy(anchor)]
        elif scenario == "mss":
            target = make_branch()
            members = [copy.deepcopy(target), target]
        else:
            members = [make_branch() for _ in range(branches)]
        return cls(members, loss, scenario, weight, ema)


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a single-branch method from a checkpoint file written by the trainer.

    Loaded weights-only: a file that is not an itrlab checkpoint is refused (UserInputError naming it).
    """
    payload = load_tensors(path, "anchor checkpoint")
    return payload["model"] if isinstance(payload, dict) and "model" in payload else payload
