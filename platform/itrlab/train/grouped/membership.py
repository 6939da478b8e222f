"""Which runs can train together as one group (:mod:`itrlab.train.grouped`), decided from their configs
before anything starts (a sweep checks its groups before Ray does).

A run can be a member when its method's step is a plain function of its parameters and its batch
(:func:`group_refusal` says on one line why a run cannot). Members of one group share a **model shape** (the
names and shapes of their parameters) and the same data, ``train`` and ``eval`` sections (one batch, schedule,
epoch count and precision drive the group's step); they may differ in anything that leaves the parameters'
shapes alone: the seed, the loss and its constants, the cooperative strategy. The packing and what is refused,
with examples: docs/sweeps.md#grouped-trials-a-tables-seeds-as-one-batched-model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import torch

from itrlab.config import ExperimentConfig
from itrlab.errors import ConfigError, UserInputError
from itrlab.methods import METHODS, build_method
from itrlab.methods.registry import scheme_labels, with_fresh_branches

# placeholders for the data's sizes in a shape signature: every member reads the same data, so only the
# config's part of the shapes tells members apart
_SIGNATURE_VOCAB, _SIGNATURE_FEATURES = 97, 89


def group_refusal(config: ExperimentConfig) -> str | None:
    """Why a run of ``config`` cannot be a member of a group, on one line; None when it can."""
    reason = getattr(METHODS.get(config.method.name), "group_refusal", None)
    if reason:
        return f"method {config.method.name} cannot train in a group: {reason}"
    text, image = config.model.text, config.model.image
    if text.encoder != "bigru":
        what = (
            "its stored token states are not padded across the members' batches here"
            if text.encoder == "precomp"
            else "the pretrained transformer is not run under torch.func.vmap here"
        )
        return f"model.text.encoder={text.encoder} cannot train in a group: {what} (bigru is)"
    for where, pooling in (("model.text.pooling", text.pooling), ("model.image.pooling", image.pooling)):
        if pooling != "mean":
            return f"{where}={pooling} cannot train in a group: GPO's weights come from a GRU over packed sequences"
    if config.train.lr_decay_choices:
        return (
            "train.lr_decay_choices cannot train in a group: each run trains one schedule after another from its "
            "own checkpoints, where a group's members share one schedule; use group: 1"
        )
    if config.train.precision == "fp16":
        return (
            "train.precision=fp16 cannot train in a group: one gradient scaler would skip every member's step "
            "when one member's gradients overflow; use bf16"
        )
    return None


def group_key(config: ExperimentConfig) -> str:
    """What the members of one group must share besides the model shape: the data, the ``train`` and
    ``eval`` sections and the captions' length (one batch, schedule and precision drive the step)."""
    dump = config.dump()
    shared = {
        "dataset": dump.get("dataset"),
        "train": dump.get("train"),
        "eval": dump.get("eval"),
        "max_len": config.model.text.max_len,
    }
    return json.dumps(shared, sort_keys=True, default=str)


def model_signature(config: ExperimentConfig) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The names and shapes of the parameters of ``config``'s method (built on the meta device: no memory,
    no data; the data's sizes are placeholders, the same for every member). An OAS anchor is a branch like
    OSS's: its checkpoint is not read here."""
    config = with_fresh_branches(config)
    with torch.device("meta"):
        method = build_method(config, vocab_size=_SIGNATURE_VOCAB, feature_dim=_SIGNATURE_FEATURES)
    return tuple((name, tuple(parameter.shape)) for name, parameter in method.named_parameters())


def describe_shape(config: ExperimentConfig) -> str:
    """A model shape in words, for messages: ``vsepp (2 branches, oss) embed 1024``."""
    branches = "".join(f" ({label})" for label in scheme_labels(config).values() if label != "none")
    return f"{config.method.name}{branches} embed {config.model.embed_dim}"


def shared_step(config: ExperimentConfig) -> tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]:
    """What two runs must have in common to train in one group: :func:`group_key` and :func:`model_signature`."""
    return group_key(config), model_signature(config)


def pack_groups(configs: Sequence[ExperimentConfig], size: int, label: Callable[[int], str] = str) -> list[list[int]]:
    """The runs ``configs`` packed into groups of at most ``size``: in the order given (a sweep's grid order, so
    a row's seeds are neighbours) among those that share a step (:func:`shared_step`), each such set cut into
    groups of ``size``, its last possibly smaller. Lists of their indices, each group in the order given and the
    groups by their first member.

    One line for bad input, naming the setting ``group`` (a sweep's) and each run by ``label(index)``:
    UserInputError for a run that cannot be a member (:func:`group_refusal`), ConfigError for ``size``
    larger than the largest set of runs that share a step (a group would mix model shapes).
    """
    for index, config in enumerate(configs):
        reason = group_refusal(config)
        if reason:
            raise UserInputError(f"group {size}: trial {label(index)}: {reason}")
    sets: dict[tuple, list[int]] = {}
    for index, config in enumerate(configs):
        sets.setdefault(shared_step(config), []).append(index)
    largest = max((len(indices) for indices in sets.values()), default=0)
    if size > largest:
        kinds = "; ".join(
            f"{len(indices)} x {describe_shape(configs[indices[0]])} (from {label(indices[0])})"
            for indices in sets.values()
        )
        raise ConfigError(
            "group",
            size,
            f"a group holds trials of one model shape and one train section, and "
            f"the sweep's {len(configs)} trials fall in {len(sets)} such sets ({kinds}): at most {largest}",
        )
    groups = [indices[start : start + size] for indices in sets.values() for start in range(0, len(indices), size)]
    return sorted(groups, key=lambda indices: indices[0])
