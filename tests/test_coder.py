"""CODER as a method: all four losses train end to end, the queue and prototypes, exact resume,
config-time errors, and CODER inside DBL's cooperative schemes."""

from __future__ import annotations

import pytest
import torch

from itrlab.assembly import check_experiment, load_experiment
from itrlab.errors import ConfigError
from itrlab.methods.coder import CoderMethod
from itrlab.methods.coder.memory import MomentumQueue
from itrlab.methods.dbl import CooperativeMethod
from itrlab.train import run_experiment
from itrlab.train.checkpoint import LAST, load_checkpoint


def coder(root, *overrides):
    return load_experiment("coder_synthetic_tiny", [f"dataset.root={root}", "tracking.enabled=false", *overrides])


class Parts:
    def __init__(self):
        self.epochs = []

    def on_epoch_end(self, report):
        self.epochs.append(report.parts)


COLLAPSE_FIGURES = {
    f"{name}_{side}"
    for name in ("attention_top", "attention_entropy", "concept_cosine")
    for side in ("image", "caption")
}


def test_full_coder_trains_with_all_four_losses(tmp_path, tiny_root):
    parts = Parts()
    result = run_experiment(coder(tiny_root, "train.epochs=2"), tmp_path / "run", callbacks=[parts])
    assert {"instance", "mdcl", "concept", "pgc", "pgc_image", "pgc_caption", "pgc_prototype_cosine"} <= set(
        parts.epochs[0]
    )
    assert parts.epochs[0]["pgc_labelled"] == 0 and parts.epochs[1]["pgc_labelled"] == 1  # clustered before epoch 2
    # the concept branch did not collapse (docs/papers/coder.md#collapse): logged every epoch
    last = parts.epochs[-1]
    assert COLLAPSE_FIGURES <= set(last)
    assert (
        last["attention_top_image"] < 0.9
        and last["concept_cosine_image"] < 0.9
        and last["concept_cosine_caption"] < 0.9
    )
    assert last["pgc_prototype_cosine"] < 0.9  # the prototypes can be told apart after the reset
    assert result.test.rsum > 0
    state = load_checkpoint(tmp_path / "run" / LAST)["model"]
    assert (state["queue.image_ids"] >= 0).all() and int(state["prototypes.clustered_epoch"]) == 2
    assert (tmp_path / "run" / "concepts.json").is_file()


def test_the_collapse_check_fails_on_eq_2_as_written(tmp_path, tiny_root):
    """Eq. 2's plain product with unstandardised queries collapses on the tiny data: every image on one
    concept, every image concept embedding alike; the figures the test above bounds say so."""
    parts = Parts()
    run_experiment(
        coder(
            tiny_root,
            "train.epochs=2",
            "method.pgc=false",
            "method.concept_attention_normalise=false",
            "method.concept_query_norm=none",
        ),
        tmp_path / "run",
        callbacks=[parts],
    )
    last = parts.epochs[-1]
    assert last["attention_top_image"] > 0.9 and last["concept_cosine_image"] > 0.9


def test_resume_restores_queue_momentum_encoder_and_prototypes_exactly(tmp_path, tiny_root):
    straight = run_experiment(coder(tiny_root, "train.epochs=3"), tmp_path / "straight")
    interrupted = tmp_path / "interrupted"
    run_experiment(coder(tiny_root, "train.epochs=2"), interrupted)
    resumed = run_experiment(coder(tiny_root, "train.epochs=3"), interrupted)
    a, b = load_checkpoint(tmp_path / "straight" / LAST), load_checkpoint(interrupted / LAST)
    assert b["state"].history == a["state"].history  # epoch 3's loss equals the uninterrupted run's
    for name in (
        "queue.captions",
        "queue.image_ids",
        "queue.pointer",
        "prototypes.labels",
        "prototypes.prototypes.weight",
        "momentum_model.image_encoder.fc.weight",
    ):
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert resumed.test == straight.test


def test_queue_is_fifo_and_tracks_image_ids():
    queue = MomentumQueue(4, 3)
    queue.enqueue(torch.ones(2, 3), torch.ones(2, 3), torch.tensor([5, 6]))
    assert queue.image_ids.tolist() == [5, 6, -1, -1] and queue.filled == 2
    queue.enqueue(2 * torch.ones(2, 3), torch.ones(2, 3), torch.tensor([7, 8]))
    queue.enqueue(3 * torch.ones(2, 3), torch.ones(2, 3), torch.tensor([9, 9]))
    assert queue.image_ids.tolist() == [9, 9, 7, 8] and int(queue.pointer) == 2
    assert queue.images[0].tolist() == [3.0] * 3
    with pytest.raises(ValueError, match="multiple"):
        queue.enqueue(torch.ones(3, 3), torch.ones(3, 3), torch.arange(3))


def test_a_same_image_queue_entry_is_never_a_negative(tmp_path, tiny_root):
    config = coder(tiny_root, "method.concepts=false", "method.pgc=false")
    method = CoderMethod.from_config(config, _context(tiny_root, config))
    batch = _batch(tiny_root, config)
    method.train()
    method.queue.image_ids[:] = batch.image_ids[0]  # every slot: the first pair's image
    method.queue.captions.normal_()
    before = method.step(batch)[0].parts["mdcl"]
    method.queue.captions.normal_()  # other scores for those same-image entries
    after = method.step(batch)[0].parts["mdcl"]
    # only anchors of other images see them as negatives; the first image's anchors never do
    sims = method.step(batch)[1]
    ids = sims.extras["memory_image_ids"]
    assert (ids[len(batch) :] == batch.image_ids[0]).all() and not torch.equal(before, after)


def _context(root, config):
    from itrlab.methods import BuildContext
    from itrlab.train import prepare_data

    (root.parent / "ctx").mkdir(exist_ok=True)
    data = prepare_data(config, root.parent / "ctx")
    return BuildContext.of(vocab=data.vocab, splits={"train": data.train, "val": data.val, "test": data.test})


def _batch(root, config):
    from itrlab.data import CaptionDataset, collate
    from itrlab.train import prepare_data

    (root.parent / "ctx").mkdir(exist_ok=True)
    data = prepare_data(config, root.parent / "ctx")
    dataset = CaptionDataset(data.train, data.vocab)
    return collate([dataset[i] for i in range(32)])


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["method.K=100000"], "method.K"),
        (["method.queue_size=70"], "method.queue_size"),
        (["loss.eps=0"], "loss.eps"),
        (["loss.mu=-1"], "loss.mu"),
        (["loss.div=var"], "loss.div"),
        (["method.concept_size=1000"], "method.concept_size"),
        (["method.graph_eps=2"], "method.graph_eps"),
        (["method.pgc=true", "method.concepts=false"], "method.pgc"),
        (["method.mdcl_mu=0"], "method.mdcl_mu"),
        (["method.concept_eps=-1"], "method.concept_eps"),
        (["method.mdcl_div=var"], "method.mdcl_div"),
        (["method.mdcl_memory_div=1"], "method.mdcl_memory_div"),
        (["method.lambda=0"], "method.lambda"),
        (["method.pgc_temperature=0"], "method.pgc_temperature"),
        (["loss={name: vsepp, margin: 0.2}", "method.concepts=false", "method.pgc=false"], "method.mdcl_mu"),
        (["loss={name: vsepp, margin: 0.2}", "method.mdcl=false", "method.pgc=false"], "method.concept_mu"),
        (["method.typo=1"], "method.typo"),
        (["loss.reading=moco"], "loss.reading"),
        (["loss.alpha=3"], "loss.alpha"),  # α is read by the multi-similarity reading only
        (["loss.reading=infonce", "loss.alpha=0.5"], "loss.alpha"),
        (["loss.reading=multi_similarity", "loss.alpha=0"], "loss.alpha"),
    ],
)
def test_bad_settings_fail_before_anything_starts(tiny_root, overrides, field):
    from itrlab.data.synthetic import generate_synthetic, synthetic_spec

    generate_synthetic(tiny_root, synthetic_spec("tiny"))  # the caption vocabulary is read from the data
    with pytest.raises(ConfigError) as err:
        check_experiment(coder(tiny_root, *overrides))
    assert err.value.field == field, str(err.value)


def test_coder_inside_dbl_keeps_its_queues_and_parts(tmp_path, tiny_root):
    config = coder(tiny_root, "cooperative={scenario: oss, strategy: F, gamma: 0.2}", "train.epochs=1")
    parts = Parts()
    run_experiment(config, tmp_path / "dbl", callbacks=[parts])
    assert {"task", "cooperative", "task_mdcl", "task_concept", "branch1_task"} <= set(parts.epochs[0])
    state = load_checkpoint(tmp_path / "dbl" / LAST)["model"]
    assert (state["branches.0.queue.image_ids"] >= 0).all() and (state["branches.1.queue.image_ids"] >= 0).all()
    assert isinstance(CooperativeMethod, type)


BTR = ("loss={name: vsepp, margin: 0.2}", "method.mdcl=false", "method.concepts=false", "method.pgc=false")


def test_the_btr_row_is_plain_vsepp(tiny_root):
    """coder-table2's BTR row: the step's loss is VSE++'s alone, not λ times it (eq. 8's λ weights L^I_DCL)."""
    config = coder(tiny_root, *BTR)
    method = CoderMethod.from_config(config, _context(tiny_root, config))
    output, sims = method.step(_batch(tiny_root, config))
    assert method.instance_weight == 1.0 and set(output.parts) == {"instance"}
    assert torch.equal(output.loss, method.loss(sims).loss)
    assert (
        CoderMethod.from_config(coder(tiny_root, *BTR, "method.lambda=2"), _context(tiny_root, config)).instance_weight
        == 2
    )
    full = coder(tiny_root)
    assert CoderMethod.from_config(full, _context(tiny_root, full)).instance_weight == 3.0  # the paper's λ with DCL


def test_mdcl_and_the_concept_dcl_take_their_own_keys_and_null_the_instance_dcls(tiny_root):
    config = coder(
        tiny_root,
        "loss.mu=0.2",
        "loss.gamma=0.1",
        "loss.eps=0.05",
        "loss.div=ent",
        "loss.memory_div=false",
        "method.mdcl_gamma=0.4",
        "method.concept_mu=0.07",
    )
    method = CoderMethod.from_config(config, _context(tiny_root, config))
    m, c = method.mdcl_loss, method.concept_loss
    assert (m.mu, m.gamma, m.eps, m.div, m.memory_div) == (0.2, 0.4, 0.05, "ent", False)
    assert (c.mu, c.gamma, c.eps, c.div) == (0.07, 0.1, 0.05, "std")  # the concept diversity is method.concept_div
    given = (
        "method.mdcl_mu=0.3",
        "method.mdcl_gamma=0.2",
        "method.mdcl_eps=0.4",
        "method.mdcl_div=none",
        "method.mdcl_memory_div=false",
        "method.concept_mu=0.5",
        "method.concept_gamma=-0.1",
        "method.concept_eps=0.6",
    )
    btr = coder(
        tiny_root, "loss={name: vsepp, margin: 0.2}", *given
    )  # the BTR loss with M-DCL and concepts: no DCL to copy
    check_experiment(btr)
    method = CoderMethod.from_config(btr, _context(tiny_root, btr))
    m, c = method.mdcl_loss, method.concept_loss
    assert (m.mu, m.gamma, m.eps, m.div, m.memory_div) == (0.3, 0.2, 0.4, "none", False)
    assert (c.mu, c.gamma, c.eps) == (0.5, -0.1, 0.6) and method.instance_weight == 1.0


@pytest.mark.parametrize("reading", ["infonce", "multi_similarity"])
def test_every_dcl_term_reads_the_equation_as_the_instance_loss(tiny_root, reading):
    """``loss.reading`` (and α) reach the M-DCL and concept-level terms (one L_DCL); a step trains all of them.
    Without an instance DCL (BTR) those terms read the equation as printed."""
    alpha = ["loss.alpha=3"] if reading == "multi_similarity" else []
    config = coder(tiny_root, f"loss.reading={reading}", *alpha, "method.pgc=false")
    check_experiment(config)
    method = CoderMethod.from_config(config, _context(tiny_root, config))
    want = (reading, 3.0 if alpha else 2.0)
    for loss in (method.loss, method.mdcl_loss, method.concept_loss):
        assert (loss.reading, loss.alpha) == want, loss
    assert method.instance_weight == 3.0  # λ of a DCL instance loss, whichever its reading
    method.train()
    output, _ = method.step(_batch(tiny_root, config))
    output.loss.backward()
    assert torch.isfinite(output.loss) and {"instance", "mdcl", "concept"} <= set(output.parts)
    grads = [p.grad for p in method.model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    given = ("method.mdcl_mu=0.3", "method.mdcl_gamma=0.2", "method.mdcl_eps=0.4", "method.mdcl_div=none")
    btr = coder(
        tiny_root,
        "loss={name: vsepp, margin: 0.2}",
        *given,
        "method.mdcl_memory_div=false",
        "method.concepts=false",
        "method.pgc=false",
    )
    method = CoderMethod.from_config(btr, _context(tiny_root, btr))
    assert (method.mdcl_loss.reading, method.mdcl_loss.alpha) == ("printed", 2.0)
