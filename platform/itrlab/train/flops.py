"""The work of one training step, counted: what a sweep's cost is estimated from where no device of its
kind measured it (:mod:`itrlab.sweep.cost`, docs/speed.md#how-a-sweeps-cost-is-estimated).

:func:`count_step` runs one training step (forward and backward) of a config's method at its batch and the
profile's shapes (region features, embedding, text encoder, captions of ``caption_tokens`` tokens), counting the
operators dispatched and the FLOPs of matrix products, convolutions and attention (the formulas of
``torch.utils.flop_counter``: where these models spend their arithmetic; the optimizer step and evaluation are not
counted). It runs the step as grouped training does (:mod:`itrlab.models.batched`: the GRU as the matmuls of its
gates, xattn padded, every caption of one length): the same matrix products as a run's own step, and the
operators one grouped step dispatches whatever its G (a run's own step launches fewer: its GRU is one fused kernel
on a GPU). On the meta device a step counts from shapes alone, a paper-sized one in well under a second; a step
that reads values (CODER's queues and k-means, AsCL's generators: ``.item()``) is counted on the CPU at three
small batches with random weights and zero inputs, its FLOPs being a polynomial of degree 2 in the batch (the
encoders linear in it, the similarity matrices and pair scoring quadratic), solved at the config's batch. An OAS
config is counted as MSS (a frozen anchor that scores the batch without gradient, no checkpoint to read); what a
step reads beyond its batch (a frozen model's token ids) is made up by the method (``bind_made_up_inputs``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from itrlab.config import ExperimentConfig
from itrlab.data import Batch
from itrlab.files import atomic_write_json
from itrlab.methods import build_method
from itrlab.methods.registry import scheme_structure, with_fresh_branches
from itrlab.models.batched import make_batchable
from itrlab.train.throughput import throughput_file

COUNT_VOCAB = 1000  # the vocabulary of the counted model: an embedding lookup costs no FLOPs
STORED_TEXT_WIDTH = 384  # stored text features (model.text.encoder=precomp): the packaged MiniLM's states
SMALL_BATCHES = (2, 4, 8)  # where a step cannot run on the meta device


@dataclass(frozen=True)
class StepCount:
    """One training step of a config at its batch: FLOPs (forward + backward) and dispatched operators."""

    flops: float
    ops: int


class _StepCounter(TorchDispatchMode):
    """Counts the operators dispatched and, through ``FlopCounterMode``'s formulas (its ``flop_registry``:
    matrix products, convolutions, attention), their FLOPs. One mode in place of ``FlopCounterMode`` and an
    operator counter stacked: no per-module bookkeeping and no decomposition tried for each operator
    without a formula (those reaching a dispatch mode are ATen's own, which have none). The same counts
    (tests/test_gpu_check.py) in less time (docs/speed.md#figures-behind-the-codes-choices)."""

    def __init__(self):
        super().__init__()
        self.flops = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        return out


CACHE_NAME = "step_counts.json"  # beside the throughput record: counts by shape, kept between dry runs
CACHE_ENV = "ITRLAB_STEP_COUNTS"  # or this file: one cache for several throughput records (tests share one)
# the counts of every preset's and profile's steps, shipped with the code so that a fresh clone's dry run counts
# nothing; made again by `python jobs/sweep.py --list --estimate` with $ITRLAB_STEP_COUNTS naming this file
# removed first and no throughput record (docs/speed.md#how-a-sweeps-cost-is-estimated)
SHIPPED_COUNTS = Path(__file__).with_name(CACHE_NAME)
_COUNTED: dict[str, StepCount] = {}


def step_counts_file() -> Path:
    """Where counted steps are kept: ``$ITRLAB_STEP_COUNTS``, else ``step_counts.json`` beside the throughput
    record (:func:`~itrlab.train.throughput.throughput_file`)."""
    return Path(os.environ.get(CACHE_ENV) or throughput_file().parent / CACHE_NAME)


def _read_counts(cache: Path) -> dict[str, StepCount]:
    with contextlib.suppress(Exception):  # absent or damaged: counted again
        return {k: StepCount(*v) for k, v in json.loads(cache.read_text()).items()}
    return {}


def shape_key(config: ExperimentConfig) -> str:
    """What decides a step's count: the method and its settings, the model section, its scheme's
    structure (:func:`~itrlab.methods.registry.scheme_structure`: DBL's scenario and branches, none for
    its row A) and the batch. The loss and its constants do not: losses are element-wise work on B x B
    matrices, which FlopCounterMode does not count (the members of DBL Table IV's rows B-I count once)."""
    dump = config.dump()
    scheme = scheme_structure(config)
    return json.dumps(
        {"method": dump.get("method"), "model": dump.get("model"), "scheme": scheme, "batch": config.train.batch_size},
        sort_keys=True,
        default=str,
    )


def count_step(config: ExperimentConfig, regions: int, feature_dim: int, caption_tokens: int) -> StepCount:
    """FLOPs and operators of one training step of ``config`` at its batch (see the module doc); counted
    once per :func:`shape_key`, data shape and torch version, and kept in :func:`step_counts_file` (a
    paper profile's step takes about a second to count) unless :data:`SHIPPED_COUNTS` holds it."""
    key = hashlib.sha256(
        json.dumps([shape_key(config), regions, feature_dim, caption_tokens, torch.__version__]).encode()
    ).hexdigest()[:20]
    cache, shipped = step_counts_file(), _read_counts(SHIPPED_COUNTS)
    if key not in _COUNTED:
        _COUNTED.update(shipped | _read_counts(cache))  # and what another process counted meanwhile
    if key not in _COUNTED:
        _COUNTED[key] = _count(with_fresh_branches(config), regions, feature_dim, caption_tokens)
        making = cache.resolve() == SHIPPED_COUNTS.resolve()  # the shipped file made again: it keeps every count
        counted = {k: v for k, v in _COUNTED.items() if making or k not in shipped}
        with contextlib.suppress(OSError):  # a read-only folder: counted again next time
            cache.parent.mkdir(parents=True, exist_ok=True)
            merged = _read_counts(cache) | counted  # two processes counting at once lose nothing
            atomic_write_json(cache, {k: [v.flops, v.ops] for k, v in merged.items()})
    return _COUNTED[key]


def _text_input(config: ExperimentConfig) -> int:
    """The text encoder's input size in the counted model: a vocabulary (ids: an embedding lookup costs no
    FLOPs), or the width of stored token states (``precomp``: the packaged MiniLM's hidden size)."""
    return STORED_TEXT_WIDTH if config.model.text.encoder == "precomp" else COUNT_VOCAB


def _batch(config: ExperimentConfig, size: int, regions: int, feature_dim: int, tokens: int) -> Batch:
    if config.model.text.encoder == "precomp":
        text = torch.zeros(size, tokens, STORED_TEXT_WIDTH)
    else:
        text = torch.ones(size, tokens, dtype=torch.long)
    return Batch(
        images=torch.zeros(size, regions, feature_dim),
        tokens=text,
        lengths=torch.full((size,), tokens, dtype=torch.long),
        image_ids=torch.arange(size),
        caption_ids=torch.arange(size),
    )


def _run(method: torch.nn.Module, batch: Batch) -> tuple[float, int]:
    for module in method.modules():  # the method, or a scheme's branches: data beyond the batch, made up
        if hasattr(module, "bind_made_up_inputs"):
            module.bind_made_up_inputs(batch)
    with _StepCounter() as counter:
        method(batch).loss.backward()
    return float(counter.flops), counter.ops


def _count(config: ExperimentConfig, regions: int, feature_dim: int, tokens: int) -> StepCount:
    """On the meta device at the config's batch; a method whose step reads values (CODER's queues, AsCL's
    generators) on the CPU at batches of 2, 4 and 8, the FLOPs' quadratic in the batch solved from them."""
    try:
        with torch.device("meta"), torch.inference_mode(False):
            method = make_batchable(
                build_method(config, vocab_size=_text_input(config), feature_dim=feature_dim)
            ).train()
            return StepCount(*_run(method, _batch(config, config.train.batch_size, regions, feature_dim, tokens)))
    except (RuntimeError, NotImplementedError):  # a value read on the meta device
        pass
    with torch.random.fork_rng(), torch.inference_mode(False):
        torch.manual_seed(0)
        method = build_method(config, vocab_size=_text_input(config), feature_dim=feature_dim).train()
        counts = [_run(method, _batch(config, size, regions, feature_dim, tokens)) for size in SMALL_BATCHES]
    x = torch.tensor(SMALL_BATCHES, dtype=torch.float64)
    solved = torch.linalg.solve(
        torch.stack([torch.ones_like(x), x, x * x], dim=1),
        torch.tensor([flops for flops, _ in counts], dtype=torch.float64),
    )
    size = float(config.train.batch_size)
    return StepCount(float(solved[0] + solved[1] * size + solved[2] * size * size), counts[0][1])
