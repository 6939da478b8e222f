"""Every registered loss's plain float64 loop, by its registered name: what the method contract suite
(tests/test_method_contract.py) checks each loss against, with its declared default settings, on a batch
that holds two captions of one image (so that a caption of the same image counted as a negative shows).

The loops and the inputs are those of each loss's own tests, written from its paper's equation (which
also test the other settings and the gradient); an entry says how to make the loss's inputs for a seed
and how its loop reads them. A loss registered without an entry here fails the suite, which names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import test_ascl as ascl
import test_baseline_losses as baseline
import test_boosting_losses as boosting
import test_clip as clip
import test_dcl_losses as dcl
import test_losses as shared

TWO_CAPTIONS = [0, 1, 0, 2, 3, 4, 5]  # pairs 0 and 2: two captions of image 0


@dataclass(frozen=True)
class Reference:
    """``inputs(seed)``: the loss's arguments, float64; ``loop(*inputs, **settings)``: the loss by the plain loop."""

    inputs: Callable[[int], tuple]
    loop: Callable[..., float]


def one_batch(seed: int) -> tuple:
    return (shared.make_sims(TWO_CAPTIONS, seed),)


def two_branches(seed: int) -> tuple:
    """(target, anchor): two branches' similarities of one batch, i2i and t2t included."""
    return baseline.make_sims(TWO_CAPTIONS, seed), baseline.make_sims(TWO_CAPTIONS, seed + 1000)


def boosting_pair(seed: int) -> tuple:
    return boosting.make_pair(TWO_CAPTIONS, seed)


def memory_batch(seed: int) -> tuple:
    return (dcl.make_sims(dcl.ID_LAYOUTS["two_captions"], seed),)


def generated_batch(seed: int) -> tuple:
    return (ascl.make_sims(ascl.LAYOUTS["two_captions_of_one_image"], seed=seed, above=True),)


def scaled_batch(seed: int) -> tuple:
    return (clip.make_sims(TWO_CAPTIONS, seed, logit_scale=math.log(1 / 0.07)),)


def total(parts) -> float:
    """The loss of a loop's parts: the (i2t, t2i, ...) numbers it returns, or its dict of parts."""
    values = parts.values() if isinstance(parts, dict) else [p for p in parts if not isinstance(p, str)]
    return float(sum(float(v) for v in values))


REFERENCES: dict[str, Reference] = {
    # the shared losses and ConVSE's (tests/test_losses.py)
    "vse": Reference(one_batch, lambda s, margin: total(shared.ref_vse(s, margin))),
    "vsepp": Reference(one_batch, lambda s, margin: total(shared.ref_vsepp(s, margin))),
    "mvn": Reference(one_batch, lambda s, tau: total(shared.ref_mvn(s, tau))),
    "convse": Reference(one_batch, lambda s, tau: total(shared.ref_convse(s, tau))),
    "convsepp": Reference(one_batch, lambda s, margin, tau: total(shared.ref_convsepp(s, margin, tau))),
    # DBL's task-loss baselines (tests/test_baseline_losses.py)
    "cmpm": Reference(one_batch, lambda s, tau, eps: total(baseline.ref_cmpm(s, tau, eps))),
    "mpl": Reference(
        one_batch, lambda s, margin, pos_coeffs, neg_coeffs: total(baseline.ref_mpl(s, margin, pos_coeffs, neg_coeffs))
    ),
    # DBL's boosting losses (tests/test_boosting_losses.py)
    "rs": Reference(boosting_pair, lambda t, a, **p: total(boosting.ref_rs(t, a, **p))),
    "rm": Reference(boosting_pair, lambda t, a, **p: total(boosting.ref_rm(t, a, **p))),
    "as": Reference(boosting_pair, lambda t, a, **p: total(boosting.ref_as(t, a, **p))),
    "am": Reference(boosting_pair, lambda t, a, **p: total(boosting.ref_am(t, a, **p))),
    "dbl": Reference(
        boosting_pair,
        lambda t, a, relative, absolute, **p: total(
            boosting.ref_mix(
                {"rs": boosting.ref_rs, "rm": boosting.ref_rm}[relative],
                {"as": boosting.ref_as, "am": boosting.ref_am}[absolute],
            )(t, a, **p)
        ),
    ),
    # the distillation and mutual-learning baselines (tests/test_baseline_losses.py)
    "dr": Reference(two_branches, lambda t, a, **p: total(baseline.ref_dr(t, a, **p))),
    "rkd": Reference(two_branches, lambda t, a, **p: total(baseline.ref_rkd(t, a, **p))),
    "dml": Reference(two_branches, lambda t, a, **p: total(baseline.ref_dml(t, a, **p))),
    "dino": Reference(two_branches, lambda t, a, **p: total(baseline.ref_dino(t, a, star=False, **p))),
    "dino_star": Reference(two_branches, lambda t, a, **p: total(baseline.ref_dino(t, a, star=True, **p))),
    # CODER's (tests/test_dcl_losses.py)
    "dcl": Reference(memory_batch, lambda s, **p: total(dcl.ref_dcl(s, **p))),
    "dcl_i": Reference(memory_batch, lambda s, **p: total(dcl.ref_dcl(s, div="none", **p))),
    "mdcl": Reference(memory_batch, lambda s, **p: total(dcl.ref_mdcl(s, **p))),
    "pgc": Reference(memory_batch, lambda s: total(dcl.ref_pgc(s))),
    # AsCL's (tests/test_ascl.py)
    "ascl": Reference(generated_batch, lambda s, **p: ascl.ref_loss(s, **p)),
    "ascl_triplet": Reference(
        generated_batch, lambda s, margin, **p: ascl.ref_loss(s, triplet=True, margin=margin, **p)
    ),
    # CLIP's (tests/test_clip.py): the loss is the mean of its two directions, its first number
    "clip": Reference(scaled_batch, lambda s: clip.ref_clip(s)[0]),
}
