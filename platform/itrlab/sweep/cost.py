"""What a sweep costs before it runs: its training time and device-hours, one trial at a time and with its trials
grouped (:mod:`itrlab.sweep.groups`), for ``--dry-run`` and ``--list``.

A step's time is **measured** where ``benchmarks/train.py`` or ``benchmarks/gpu.py`` recorded this device's pairs
per second for the trial's shape (:mod:`itrlab.train.throughput`), else **estimated** as a roofline from the
step's FLOPs and operators counted on the meta device (:mod:`itrlab.train.flops`) and the device's nominal
throughput (:data:`NOMINAL`): the longer of ``G x FLOPs / (peak x efficiency)`` and the operators' launch time (a
grouped step launches each operator once). A trial's time is epochs x steps x a step's time (every schedule of a
trial that chooses its decay: ``train.trained_epochs``); evaluation is not counted. The device is a GPU when a
trial asks for one, else the CPUs it reserves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from itrlab.config import ExperimentConfig
from itrlab.train.flops import count_step
from itrlab.train.throughput import lookup, training_shape

log = logging.getLogger(__name__)
CAPTION_TOKENS = 14  # a caption of Flickr30K's mean length (12.3 words; COCO 10.5) with its start and end tokens


@dataclass(frozen=True)
class Nominal:
    """A device's nominal throughput: what an estimate assumes where nothing was measured."""

    name: str
    peak: dict[str, float]  # FLOP/s by train.precision, for one device (a GPU) or one CPU thread
    efficiency: float  # the share of the peak that these models' matmuls reach
    op_seconds: float  # host time to dispatch one operator (eager PyTorch)

    def step_seconds(self, flops: float, ops: int, precision: str, group: int = 1, threads: float = 1) -> float:
        compute = group * flops / (self.peak[precision] * threads * self.efficiency)
        return max(compute, ops * self.op_seconds)


NOMINAL = {
    # NVIDIA H100 SXM: 989 TFLOP/s dense bf16/fp16 on tensor cores, 67 TFLOP/s fp32 (PyTorch's default fp32
    # matmuls do not use TF32); 35% of it for these mid-sized matmuls; 20 µs of host time per operator
    "cuda": Nominal(
        "a nominal H100-class GPU (989 TFLOP/s bf16, 67 TFLOP/s fp32, at 35%; 20 µs per operator)",
        {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
        0.35,
        20e-6,
    ),
    # one x86 core with AVX2: 2.5 GHz x 32 fp32 FLOP per cycle (two 8-wide FMAs), at 25%; bf16 no faster
    "cpu": Nominal(
        "a nominal x86 core per thread (80 GFLOP/s fp32 with AVX2, at 25%; 5 µs per operator)",
        {"bf16": 80e9, "fp16": 80e9, "fp32": 80e9},
        0.25,
        5e-6,
    ),
}


def group_shape(shape: str, group: int) -> str:
    """The throughput record's key of a grouped measurement (pairs/s per member at group size G)."""
    return shape if group == 1 else f"{shape} group{group}"


@dataclass
class Cost:
    """Training seconds of a set of groups on one device kind, and where each figure came from."""

    device: str
    seconds: float = 0.0  # every group's training time, summed (device time of one trial's devices)
    measured: set[str] = field(default_factory=set)  # what measured it: "cuda:0 (NVIDIA H100 ...), 2026-12-01"
    estimated: int = 0  # how many groups were estimated from counted FLOPs
    # which shapes each figure covers (training shape: its trainings), measured and estimated
    measured_shapes: dict[str, int] = field(default_factory=dict)
    estimated_shapes: dict[str, int] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # why a part could not be estimated: clauses of a sentence

    @property
    def complete(self) -> bool:
        return not self.unknown


def group_seconds(
    config: ExperimentConfig,
    size: int,
    device: str,
    threads: float,
    pairs: int | None,
    features: tuple[int, int] | None,
    where: str,
    cost: Cost,
    classes: int = 1,
) -> None:
    """Add the training time of a group of ``size`` members of ``config``'s shape (``size`` 1: one run) whose
    members fall in ``classes`` step classes (each launches its own operators: :mod:`itrlab.train.grouped`)."""
    if not pairs or features is None:
        cost.unknown.append(where)
        return
    shape = training_shape(config, *features)
    measured = lookup(device, group_shape(shape, size))
    if measured is not None:
        cost.seconds += measured.seconds(pairs * config.train.trained_epochs)
        cost.measured.add(f"{measured.device}, {measured.measured}")
        cost.measured_shapes[shape] = cost.measured_shapes.get(shape, 0) + 1
        return
    try:
        counted = count_step(config, features[0], features[1], CAPTION_TOKENS)
    except Exception:  # noqa: BLE001 - a step that cannot run on made-up inputs: no estimate, said why
        log.warning("counting one step of %s failed", shape, exc_info=True)
        cost.unknown.append(
            f"one training step of {shape} could not be counted on made-up inputs of its shape "
            f"(the error is in the log)"
        )
        return
    step = NOMINAL[device].step_seconds(
        counted.flops, counted.ops * classes, config.train.precision, size, threads if device == "cpu" else 1
    )
    cost.seconds += step * (pairs // config.train.batch_size) * config.train.trained_epochs
    cost.estimated += 1
    cost.estimated_shapes[shape] = cost.estimated_shapes.get(shape, 0) + 1


def source_line(cost: Cost) -> str:
    """Where a cost came from: measured, estimated, or both."""
    parts = []
    if cost.measured:
        parts.append(f"measured on {'; '.join(sorted(cost.measured))}: {_shapes(cost.measured_shapes)}")
    if cost.estimated:
        parts.append(
            f"estimated, not measured: {_shapes(cost.estimated_shapes)}, from the FLOPs counted in one step "
            f"(torch.utils.flop_counter) on {NOMINAL[cost.device].name}"
        )
    return "; ".join(parts)


def _shapes(counts: dict[str, int]) -> str:
    """``vsepp 1x1280 ... fp32 (x5), convse ... (x10)``: which training shapes, and how many trainings each."""
    return ", ".join(f"{shape} (x{count})" for shape, count in counts.items())
