"""Grouped training's step: the members' parameters stacked and stepped as one ``torch.func.vmap``-ed model
(docs/training.md#grouped-training: the stacking, step classes, one Adam equal to G, clipping per member).

Each member is a whole run of its own: its :class:`~itrlab.train.loop.Trainer` (built as a run builds it,
:func:`itrlab.train.experiment.start_run`) keeps its method, data order, checkpoints, validation, callbacks and
MLflow run; its own parameters are views of its rows of the stacked tensors, so its evaluation, checkpoints and
after-step hooks (CLIP's clamp) read and write its slice in place. Members are built after seeding with their own
seed, so their initial weights are their solo runs'. The methods that can be grouped draw no random numbers after
initialisation; a step that did would fail under vmap (``randomness="error"``) rather than draw one stream for
all. A member whose loss turns NaN or infinite, or whose own epoch end fails (its validation, its checkpoint),
stops with its reason while the others go on; a failure of the joint step itself (out of memory, say) stops the
group.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from itrlab.data import Batch
from itrlab.errors import StorageError
from itrlab.losses import LossOutput
from itrlab.models.batched import make_batchable
from itrlab.train.loop import CUDA_READ_EVERY, NonFiniteLossError, StepLogger, Trainer, _StepLog, step_progress_interval

_log = logging.getLogger(__name__)

NOT_IN_STEP_KEY = ("seed", "name", "output", "tracking")  # config sections members of one step class may differ in


def step_class_key(config) -> str:
    """What a vmapped step shares: the config but its seed, name, output and tracking."""
    dump = {k: v for k, v in config.dump().items() if k not in NOT_IN_STEP_KEY}
    return json.dumps(dump, sort_keys=True, default=str)


@dataclass
class Member:
    """One run of a group: its trainer, its place in the stacked tensors, and how it ended."""

    trainer: Trainer
    row: int  # its row in the stacked tensors
    failure: BaseException | None = None
    log: _StepLog | None = None

    @property
    def active(self) -> bool:
        return self.failure is None


@dataclass
class StepClass:
    """Members that share one vmapped step: a copy of their method made vmap-able, and their rows."""

    template: torch.nn.Module
    members: list[Member] = field(default_factory=list)

    def rows(self) -> list[int]:
        return [m.row for m in self.members if m.active]


def stack_batches(batches: list[Batch]) -> tuple[Tensor, ...]:
    """The members' batches as ``(G, B, ...)`` tensors; captions padded to the longest (a padded
    position is masked by its length, so it changes no result)."""
    width = max(b.tokens.shape[1] for b in batches)
    tokens = [torch.nn.functional.pad(b.tokens, (0, width - b.tokens.shape[1])) for b in batches]
    return (
        torch.stack([b.images for b in batches]),
        torch.stack(tokens),
        torch.stack([b.lengths for b in batches]),
        torch.stack([b.image_ids for b in batches]),
        torch.stack([b.caption_ids for b in batches]),
    )


def rows_index(rows: list[int], device: torch.device) -> slice | Tensor:
    """A slice when the rows are consecutive (a view, no copy), else an index tensor."""
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return torch.tensor(rows, device=device)


class GroupedTrainer:
    """Trains ``trainers`` (built for one model shape, one ``train`` section but the seed) together.

    ``on_epoch_end(epoch)`` runs after every member ended its epoch (a sweep's group trial reports
    there). :meth:`fit` returns when every member finished or failed; ``member.failure`` says which.
    """

    def __init__(self, trainers: list[Trainer], on_epoch_end: Callable[[int], None] | None = None):
        if not trainers:
            raise ValueError("a group needs at least one member")
        first = trainers[0]
        for trainer in trainers[1:]:
            for what in ("device", "steps_per_epoch", "total_steps"):
                if getattr(trainer, what) != getattr(first, what):
                    raise ValueError(
                        f"group members differ in {what}: {getattr(trainer, what)} vs {getattr(first, what)}"
                    )
            if trainer.state.step != first.state.step:
                raise ValueError(
                    f"group members were checkpointed at different steps ({trainer.state.step} vs "
                    f"{first.state.step}): resume them from one group checkpoint"
                )
        self.device, self.precision = first.device, first.precision
        self.config = first.config
        self.on_epoch_end = on_epoch_end
        classes: dict[str, StepClass] = {}
        order = sorted(
            range(len(trainers)),
            key=lambda i: list(dict.fromkeys(step_class_key(t.config) for t in trainers)).index(
                step_class_key(trainers[i].config)
            ),
        )
        self.members = [Member(trainers[i], row) for row, i in enumerate(order)]
        self.by_input = [self.members[order.index(i)] for i in range(len(trainers))]  # in the caller's order
        for member in self.members:
            key = step_class_key(member.trainer.config)
            if key not in classes:
                classes[key] = StepClass(make_batchable(copy.deepcopy(member.trainer.method)).train())
            classes[key].members.append(member)
        self.classes = list(classes.values())
        every = 1 if self.device.type != "cuda" else CUDA_READ_EVERY
        for member in self.members:  # train_epoch starts a fresh one per epoch
            member.log = _StepLog(0, every)
        self._stack()

    # ------------------------------------------------------------------ stacking

    def _stack(self) -> None:
        """Stack the members' parameters and buffers, make each member's own a view of its row, and build
        the one Adam (its state stacked from the members' restored ones) and the schedule."""
        methods = [m.trainer.method for m in self.members]
        shapes = [[(n, tuple(p.shape)) for n, p in method.named_parameters()] for method in methods]
        if any(shape != shapes[0] for shape in shapes[1:]):
            raise ValueError("group members have different model shapes: only trials of one shape train together")
        self.params: dict[str, Tensor] = {}
        for name, parameter in methods[0].named_parameters():
            stacked = torch.stack([method.get_parameter(name).detach() for method in methods])
            self.params[name] = stacked.requires_grad_(parameter.requires_grad)
            for row, method in enumerate(methods):
                method.get_parameter(name).data = stacked.data[row]
        self.buffers = {
            name: torch.stack([method.get_buffer(name) for method in methods]) for name, _ in methods[0].named_buffers()
        }
        first = self.members[0].trainer.optimizer
        names = {id(p): n for n, p in methods[0].named_parameters()}
        groups = []
        for group in first.param_groups:
            options = {k: v for k, v in group.items() if k not in ("params", "initial_lr", "lr")}
            groups.append(
                {
                    **options,
                    "lr": group.get("initial_lr", group["lr"]),
                    "params": [self.params[names[id(p)]] for p in group["params"]],
                }
            )
        self.optimizer = torch.optim.Adam(groups)
        self._stack_optimizer_state()
        trainer = self.members[0].trainer
        self.scheduler = trainer.schedule.scheduler(self.optimizer, last_step=trainer.state.step)
        self.member_params = [[(n, m.get_parameter(n)) for n in names.values()] for m in methods]

    def _stack_optimizer_state(self) -> None:
        """Adam's moments of a resumed group: each member's restored ones (from its ``last.pt``), stacked."""
        states = [m.trainer.optimizer.state for m in self.members]
        for name, stacked in self.params.items():
            own = [state.get(m.trainer.method.get_parameter(name)) for m, state in zip(self.members, states)]
            if all(entry is None for entry in own):
                continue
            if any(entry is None for entry in own):
                raise ValueError(f"only some members have optimizer state for {name}: resume from one group checkpoint")
            self.optimizer.state[stacked] = {
                key: own[0][key].clone()
                if key == "step"
                else torch.stack([entry[key] for entry in own]).to(stacked.device)
                for key in own[0]
            }

    def _share_optimizer_state(self, member: Member) -> None:
        """The member's own optimizer holds its rows of the stacked moments (views) and the schedule's
        learning rate, so that its ``last.pt`` is the checkpoint its solo run would write (and resumes
        alone or in a group)."""
        trainer = member.trainer
        own = trainer.optimizer
        trainer.scheduler = trainer.schedule.scheduler(own, last_step=trainer.state.step)  # its learning rate now
        for name, parameter in self.member_params[member.row]:
            state = self.optimizer.state.get(self.params[name])
            if state:
                own.state[parameter] = {
                    key: value if key == "step" else value[member.row] for key, value in state.items()
                }

    # ------------------------------------------------------------------ training

    @property
    def active(self) -> list[Member]:
        return [m for m in self.members if m.active]

    def fail(self, member: Member, error: BaseException) -> None:
        member.failure = error
        _log.info(f"group member {member.trainer.run_dir.name} stopped: {error}")

    def fit(self) -> list[Member]:
        """Train every member's remaining epochs; the members in the caller's order, each with its failure."""
        start = self.members[0].trainer.state.epoch
        for epoch in range(start + 1, self.config.train.epochs + 1):
            if not self.active:
                break
            started = time.perf_counter()
            means = self.train_epoch(epoch)
            for member in self.active:
                self._share_optimizer_state(member)
                try:
                    member.trainer.finish_epoch(epoch, *means[member.row], started)
                except StorageError:
                    raise  # the sweep's storage, not this member, is broken
                except Exception as err:  # noqa: BLE001 - this member stops, the others go on
                    self.fail(member, err)
            if self.on_epoch_end is not None:
                self.on_epoch_end(epoch)
        return self.by_input

    def train_epoch(self, epoch: int) -> dict[int, tuple[float, dict[str, float]]]:
        """One epoch of every active member, step by step together; each member's mean loss and parts."""
        every = 1 if self.device.type != "cuda" else CUDA_READ_EVERY
        iterators = {}
        for member in self.active:
            member.trainer.method.train()
            member.trainer.method.set_epoch(epoch)
            member.log = _StepLog(epoch, every)
            iterators[member.row] = iter(member.trainer.epoch_batches(epoch))
        for step_class in self.classes:
            step_class.template.set_epoch(epoch)
        trainer = self.members[0].trainer
        counter = StepLogger(epoch, self.config.train.epochs, trainer.steps_per_epoch, step_progress_interval())
        for done in range(1, trainer.steps_per_epoch + 1):
            members = self.active
            if not members:
                break
            batches = {m.row: next(iterators[m.row]).to(self.device, non_blocking=True) for m in members}
            self.train_step(batches, epoch)
            counter.step(done)
        means = {}
        for member in self.active:
            try:
                means[member.row] = member.log.means()
            except NonFiniteLossError as err:
                self.fail(member, err)
        return means

    def _class_outputs(self, step_class: StepClass, rows: list[int], batches: dict[int, Batch]):
        index = rows_index(rows, self.device)
        params = {name: value[index] for name, value in self.params.items()}
        buffers = {name: value[index] for name, value in self.buffers.items()}
        inputs = stack_batches([batches[row] for row in rows])
        template = step_class.template

        def member_step(params, buffers, images, tokens, lengths, image_ids, caption_ids):
            output = functional_call(
                template, (params, buffers), (Batch(images, tokens, lengths, image_ids, caption_ids),)
            )
            return output.loss, dict(output.parts)

        return vmap(member_step, randomness="error")(params, buffers, *inputs)

    def train_step(self, batches: dict[int, Batch], epoch: int) -> None:
        """One optimizer step of every active member on its own batch."""
        outputs: list[tuple[Member, Tensor, dict[str, Tensor]]] = []
        with self.precision.autocast():
            for step_class in self.classes:
                rows = step_class.rows()
                if not rows:
                    continue
                losses, parts = self._class_outputs(step_class, rows, batches)
                members = [m for m in step_class.members if m.active]
                for i, (member, loss) in enumerate(zip(members, losses.unbind(0))):
                    outputs.append((member, loss, {name: value[i] for name, value in parts.items()}))
        step = self.members[0].trainer.state.step
        if self.device.type != "cuda":  # on a CPU a non-finite loss stops its member before the update
            finite = torch.isfinite(torch.stack([loss for _, loss, _ in outputs])).tolist()
            for ok, (member, loss, _) in zip(finite, outputs):
                if not ok:
                    self.fail(member, NonFiniteLossError(f"loss became {loss.item()} at epoch {epoch}, step {step}"))
            outputs = [entry for entry in outputs if entry[0].active]
            if not outputs:
                return
        self.optimizer.zero_grad(set_to_none=True)
        torch.stack([loss for _, loss, _ in outputs]).sum().backward()
        self._clip(self.config.train.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        for member, loss, parts in outputs:
            trainer = member.trainer
            trainer.state.step += 1
            trainer.method.after_step(trainer.state.step, trainer.total_steps)
            try:
                member.log.add(step, LossOutput(loss, parts))
            except NonFiniteLossError as err:  # read on a GPU every CUDA_READ_EVERY steps
                self.fail(member, err)

    @torch.no_grad()
    def _clip(self, max_norm: float) -> None:
        """Each member's gradients scaled as ``clip_grad_norm_(its parameters, max_norm)`` scales them."""
        if max_norm <= 0:
            return
        grads = [p.grad for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return
        norms = torch.stack(
            [torch.linalg.vector_norm(g.reshape(g.shape[0], -1), 2, dim=1) for g in grads], dim=1
        )  # (G, params)
        total = torch.linalg.vector_norm(norms, 2, dim=1)
        scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(scale.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))
