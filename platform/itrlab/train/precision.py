"""Mixed precision of a run (``train.precision``, docs/training.md#precision): autocast, fp16's gradient
scaler, float32 losses.

``fp32`` changes nothing: no autocast, no hook, the same operations in the same order, so results stay
bit-identical to a run without this module. ``bf16`` and ``fp16`` run the method's step (its encoders and
similarity matrices) and the evaluation's encoding and scoring under ``torch.autocast(device_type, dtype)``;
``fp16`` (CUDA only) also scales the loss with a ``torch.amp.GradScaler`` so that small gradients do not
underflow. Every loss runs in float32: :meth:`MixedPrecision.attach` gives each loss module of the method (nested
ones such as a warm-up's two losses included) a forward pre-hook that casts the floating tensors of its
:class:`~itrlab.losses.Similarities` arguments (the extras too: memory-bank similarities, cluster logits ...) to
float32, and the losses themselves are element-wise and reductions (no matmuls), which autocast leaves in their
inputs' dtype. Evaluation scores come back as float32 whatever the autocast dtype.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import replace

import torch
from torch import Tensor, nn

from itrlab.eval import ScoreFn
from itrlab.losses import Similarities, registered_loss_classes
from itrlab.train.device import resolve_precision

_HOOKED = "_itrlab_float32_loss_hook"


def _float32(tensor: Tensor | None) -> Tensor | None:
    return tensor.float() if tensor is not None and tensor.is_floating_point() else tensor


def float32_similarities(sims: Similarities) -> Similarities:
    """``sims`` with every floating tensor (extras included) in float32; the same object when already so."""
    tensors = [sims.i2t, sims.i2i, sims.t2t, *sims.extras.values()]
    if all(t is None or not t.is_floating_point() or t.dtype == torch.float32 for t in tensors):
        return sims
    return replace(
        sims,
        i2t=_float32(sims.i2t),
        i2i=_float32(sims.i2i),
        t2t=_float32(sims.t2t),
        extras={name: _float32(value) for name, value in sims.extras.items()},
    )


def _cast_loss_inputs(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def cast(value):
        return float32_similarities(value) if isinstance(value, Similarities) else value

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def loss_modules(method: nn.Module) -> list[nn.Module]:
    """The method's loss modules: those of a registered loss class (any paper's package), and the
    shared ones defined under :mod:`itrlab.losses` (the warm-up wrapper)."""
    registered = registered_loss_classes()
    return [m for m in method.modules() if type(m) in registered or type(m).__module__.startswith("itrlab.losses")]


class MixedPrecision:
    """The precision a run trains and evaluates in on ``device`` (``train.precision``).

    Raises :class:`~itrlab.errors.ConfigError` for a precision the device cannot run (fp16 on a CPU).
    """

    def __init__(self, spec: str, device: torch.device):
        self.spec = spec
        self.device = device
        self.dtype = resolve_precision(spec, device)
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype is torch.float16 else None

    @property
    def enabled(self) -> bool:
        return self.dtype is not None

    def autocast(self):
        """``torch.autocast`` in the run's dtype, or a no-op context for fp32."""
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def attach(self, method: nn.Module) -> None:
        """Give the method's loss modules the float32 cast of their inputs (once each; none for fp32)."""
        if not self.enabled:
            return
        for module in loss_modules(method):
            if not getattr(module, _HOOKED, False):
                module.register_forward_pre_hook(_cast_loss_inputs, with_kwargs=True)
                setattr(module, _HOOKED, True)

    def backward_step(
        self, loss: Tensor, optimizer: torch.optim.Optimizer, grad_clip: float, params: Iterable[Tensor]
    ) -> None:
        """``loss.backward()``, gradient clipping (``grad_clip`` > 0) and the optimizer step; under fp16
        through the gradient scaler (gradients unscaled before clipping; a step with inf/NaN gradients
        is skipped and the scale lowered)."""
        if self.scaler is None:
            loss.backward()
            if grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(list(params), grad_clip)
            optimizer.step()
            return
        self.scaler.scale(loss).backward()
        if grad_clip > 0:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(list(params), grad_clip)
        self.scaler.step(optimizer)
        self.scaler.update()

    def score_fn(self, build) -> ScoreFn:
        """``build()`` (a method's ``score_fn``: it encodes the split) and the blocks it scores, under
        autocast; blocks returned as float32. For fp32, exactly ``build()``."""
        if not self.enabled:
            return build()
        with self.autocast():
            inner = build()

        def score(image_slice: slice, caption_slice: slice) -> Tensor:
            with self.autocast():
                return inner(image_slice, caption_slice).float()

        return score
