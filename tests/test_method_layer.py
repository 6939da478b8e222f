"""The method layer: registry, build context, step/prepare hooks, extras, mutual DML, OAS with GloVe,
config-time checks, safe checkpoint loading, and the sharded batch order of data-parallel workers."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

from conftest import REPO, tiny_config
from itrlab.assembly import load_experiment
from itrlab.data import Batch, CaptionDataset, collate, make_loader
from itrlab.data.dataset import ShardedBatchSampler
from itrlab.errors import ConfigError, UserInputError
from itrlab.losses import Similarities
from itrlab.methods import METHODS, BuildContext, MethodModule, build_method
from itrlab.methods.dbl.cooperative import load_model_state
from itrlab.models.glove import GloveEmbedding
from itrlab.train import prepare_data, run_experiment
from itrlab.train.checkpoint import LAST, MODEL, load_checkpoint
from itrlab.train.experiment import build_run_method


def random_batch(size=8, regions=6, dim=32, vocab=40, length=7, seed=0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    image_ids = torch.tensor([0, 0, 1, 2, 3, 4, 5, 6])[:size]  # two captions of image 0
    return Batch(
        images=torch.randn(size, regions, dim, generator=gen),
        tokens=torch.randint(4, vocab, (size, length), generator=gen),
        lengths=torch.full((size,), length),
        image_ids=image_ids,
        caption_ids=torch.arange(size),
    )


@pytest.mark.e2e
def test_import_config_does_not_import_the_method_layer():
    code = (
        "import sys, itrlab.config\n"
        "print(sorted(m for m in sys.modules if m.startswith(('itrlab.methods', 'itrlab.losses', 'torch'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_registry_names_and_register_method():
    assert {"vse", "vsepp", "mvn", "convse", "convsepp", "xattn"} <= set(METHODS)
    with pytest.raises(ValueError, match="registered twice"):
        METHODS.register("vsepp")(MethodModule)


def test_similarities_extras_are_detached_and_checked():
    i2t = torch.randn(3, 3, requires_grad=True)
    queue = torch.randn(3, 5, requires_grad=True)
    sims = Similarities(i2t, torch.arange(3)).with_extras(i2t_queue=queue)
    assert sims.has("i2t_queue") and not sims.has("i2i") and sims.get("i2t_queue") is queue
    detached = sims.detached()
    assert not detached.i2t.requires_grad and not detached.extras["i2t_queue"].requires_grad
    with pytest.raises(ValueError, match="no 'i2i'"):
        sims.get("i2i")


# ----------------------------------------------------------------------------- DML is mutual


def test_dml_is_mutual_and_both_branches_learn_from_the_kl_terms(tmp_path):
    config = load_experiment(
        "dbl_synthetic_tiny",
        [f"dataset.root={tmp_path}", "tracking.enabled=false", "cooperative={scenario: oss, loss: dml}"],
    )
    torch.manual_seed(0)
    method = build_method(config, vocab_size=40, feature_dim=32)
    assert method.cooperative_loss.mutual and method._peers(0) == [1] and method._peers(1) == [0]
    batch = random_batch()
    output = method(batch)
    assert {"task", "cooperative", "branch1_task", "branch1_cooperative"} <= set(output.parts)
    output.loss.backward()
    total = [p.grad.clone() for p in method.anchors[0].parameters()]
    method.zero_grad()
    method.anchors[0].step(batch)[0].loss.backward()  # the anchor's task loss alone
    own = [p.grad for p in method.anchors[0].parameters()]
    assert any(not torch.allclose(a, b) for a, b in zip(total, own)), "the anchor got no gradient from its KL term"


def test_boosting_stays_one_way(tmp_path):
    config = load_experiment(
        "dbl_synthetic_tiny", [f"dataset.root={tmp_path}", "tracking.enabled=false", "cooperative.strategy=F"]
    )
    method = build_method(config, vocab_size=40, feature_dim=32)
    assert not method.cooperative_loss.mutual and method._peers(0) == [] and method._peers(1) == [0]


class _CountingBranch:
    """Wraps a branch's hooks to record what a cooperative scheme forwards to it."""

    def __init__(self, branch: MethodModule):
        self.steps, self.epochs = [], []
        branch.after_step = lambda step, total: self.steps.append(step)
        branch.set_epoch = lambda epoch: self.epochs.append(epoch)


def test_cooperative_scheme_forwards_hooks_to_trainable_branches(tmp_path):
    oss = build_method(
        load_experiment(
            "dbl_synthetic_tiny", [f"dataset.root={tmp_path}", "tracking.enabled=false", "cooperative.strategy=F"]
        ),
        vocab_size=40,
        feature_dim=32,
    )
    counters = [_CountingBranch(b) for b in oss.branches]
    oss.set_epoch(3)
    oss.after_step(5, 10)
    assert [c.epochs for c in counters] == [[3], [3]] and [c.steps for c in counters] == [[5], [5]]


# ----------------------------------------------------------------------------- OAS + GloVe


def test_oas_with_glove_keeps_the_trained_anchor(tmp_path, tiny_root):
    overrides = ["model.text.glove=true", "model.text.word_dim=50", "train.epochs=1"]
    anchor_run = run_experiment(tiny_config(tiny_root, *overrides), tmp_path / "anchor")
    trained = load_model_state(anchor_run.run_dir / MODEL)
    key = next(k for k in trained if k.endswith("table.weight"))
    config = load_experiment(
        "dbl_synthetic_tiny",
        [
            f"dataset.root={tiny_root}",
            "tracking.enabled=false",
            *overrides,
            "cooperative.scenario=oas",
            "cooperative.strategy=F",
            f"cooperative.anchor_checkpoint={anchor_run.run_dir / MODEL}",
        ],
    )
    data = prepare_data(config, anchor_run.run_dir)  # the anchor's vocabulary
    method, notes = build_run_method(config, data)
    assert notes.get("glove") is not None  # GloVe was loaded into the fresh branch...
    for branch in method.branches:  # ...then the anchor's trained weights replaced it in both
        assert torch.equal(branch.state_dict()[key], trained[key])
    fresh = [
        m
        for m in build_method(
            config.model_copy(update={"cooperative": None}),
            BuildContext.of(vocab=data.vocab, splits={"train": data.train}),
        ).modules()
        if isinstance(m, GloveEmbedding)
    ][0]
    assert not torch.equal(fresh.table.weight, trained[key])  # training moved it away from raw GloVe


# ----------------------------------------------------------------------------- config-time checks


@pytest.mark.parametrize(
    "experiment, overrides, field",
    [
        ("vsepp_synthetic_tiny", ["loss.name=mpl", "loss.pos_coeffs=foo"], "loss.pos_coeffs"),
        ("dbl_synthetic_tiny", ["cooperative={scenario: oas, loss: dr, list_len: 9}"], "cooperative.list_len"),
        ("xattn_synthetic_tiny", ["model.projection_hidden=64"], "model.projection_hidden"),
        ("vsepp_synthetic_tiny", ["loss.margin=1e39"], "loss.margin"),
        ("vsepp_synthetic_tiny", ["loss={name: cmpm, eps: -1}"], "loss.eps"),
        ("dbl_synthetic_tiny", ["cooperative.gamma=inf"], "cooperative.gamma"),
        ("vsepp_synthetic_tiny", ["method.queue=5"], "method.queue"),
    ],
)
def test_settings_a_trial_would_reject_fail_at_config_time(tmp_path, experiment, overrides, field):
    with pytest.raises(ConfigError) as err:
        load_experiment(experiment, [f"dataset.root={tmp_path}", *overrides])
    assert err.value.field == field, str(err.value)


@pytest.mark.e2e
def test_check_config_exits_2_for_a_loss_it_cannot_build(tmp_path):
    env = {**os.environ, "ITRLAB_CONFIG_DIR": str(REPO / "configs")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "itrlab.cli",
            "check-config",
            "-c",
            "vsepp_synthetic_tiny",
            "loss.name=mpl",
            "loss.pos_coeffs=foo",
            f"dataset.root={tmp_path}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "loss.pos_coeffs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- checkpoints never run code


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_whose_pickle_runs_code_is_refused(tmp_path, tiny_root):
    marker = tmp_path / "pwned"
    _Exploit.marker = marker
    bad = tmp_path / "last.pt"
    torch.save({"model": {}, "state": {}, "rng": _Exploit()}, bad)
    with pytest.raises(UserInputError, match="not an itrlab checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(UserInputError, match="not an itrlab checkpoint"):
        load_model_state(bad)
    assert not marker.exists()
    (tmp_path / "notes.pt").write_bytes(pickle.dumps({"hello": "world"}) + b"junk")
    with pytest.raises(UserInputError, match="notes.pt"):
        load_checkpoint(tmp_path / "notes.pt")


def test_checkpoints_round_trip_the_generators_weights_only(tmp_path, tiny_root):
    run_experiment(tiny_config(tiny_root, "train.epochs=1"), tmp_path / "run")
    payload = torch.load(tmp_path / "run" / LAST, weights_only=True)  # plain torch, no allow-list
    assert payload["rng"]["numpy"]["keys"].dtype == torch.int64


# ----------------------------------------------------------------------------- batches


def test_sharded_batches_cover_the_epoch_once_and_keep_the_global_order():
    n, size = 103, 8
    plain = list(
        torch.utils.data.DataLoader(
            range(n), batch_size=size, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(11)
        )
    )
    assert [b.tolist() for b in plain] == list(ShardedBatchSampler(n, size, 11))  # one worker: as before
    for world in (2, 3):
        shards = [list(ShardedBatchSampler(n, size, 11, rank, world)) for rank in range(world)]
        assert len({len(s) for s in shards}) == 1
        seen = [i for shard in shards for batch in shard for i in batch]
        assert len(seen) == len(set(seen)) == (n // size // world) * world * size
        interleaved = [shards[step % world][step // world] for step in range(len(shards[0]) * world)]
        assert interleaved == [b.tolist() for b in plain[: len(interleaved)]]


def test_batch_extras_reach_the_batch(tiny_root):
    from itrlab.data import open_precomp
    from itrlab.data.synthetic import generate_synthetic, synthetic_spec

    generate_synthetic(tiny_root, synthetic_spec("tiny"))
    split = open_precomp(tiny_root, "train", 5)
    from itrlab.data import Vocabulary

    dataset = CaptionDataset(
        split,
        Vocabulary.build(split.captions),
        extra_fields={"twice": lambda i: torch.tensor([i, i]), "ragged": lambda i: torch.ones(i % 3)},
    )
    batch = collate([dataset[i] for i in (0, 1, 2, 5)])
    assert batch.extras["twice"].tolist() == [[0, 0], [1, 1], [2, 2], [5, 5]]
    assert batch.extras["ragged"].tolist() == [[0, 0], [1, 0], [1, 1], [1, 1]]
    assert batch.to("cpu").extras["twice"].shape == (4, 2)
    loader = make_loader(dataset, 4, shuffle=True, seed=0, drop_last=True)
    assert set(next(iter(loader)).extras) == {"twice", "ragged"}
