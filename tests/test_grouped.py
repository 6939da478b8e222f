"""Grouped training: several runs of one model shape trained in one process as one batched
model, each member equal to its run alone; the vmap-able model parts; how a sweep packs and refuses groups."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from itrlab.assembly import load_experiment
from itrlab.config.sweep import load_sweep
from itrlab.errors import UserInputError
from itrlab.models.batched import MaskedGRU
from itrlab.models.interaction import padded_pair_scores, pair_scores
from itrlab.train import NonFiniteLossError, run_experiment
from itrlab.train.checkpoint import load_checkpoint
from itrlab.train.experiment import start_run
from itrlab.train.grouped.run import run_group
from itrlab.train.grouped.trainer import GroupedTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# tiny data: 200 training images x 5 captions; batch 50 makes an epoch of 20 steps
STEPS_20 = ["train.batch_size=50", "train.epochs=1", "train.device=cpu", "train.threads=1", "tracking.enabled=false"]


def configs(root: Path, experiment: str, seeds=(0, 1), *overrides: str):
    return [
        load_experiment(experiment, [f"dataset.root={root}", *STEPS_20, f"seed={seed}", *overrides]) for seed in seeds
    ]


def relative_difference(a: dict, b: dict) -> float:
    """The largest, over the tensors of two state dicts, of max |a - b| / max |a|."""
    return max(float((a[name] - b[name]).abs().max() / a[name].abs().max().clamp(min=1e-12)) for name in a)


# ---------------------------------------------------------------------- vmap-able model parts


@pytest.mark.parametrize("layers", [1, 2])
def test_masked_gru_equals_nn_gru_on_packed_captions(layers):
    torch.manual_seed(0)
    gru = nn.GRU(16, 24, num_layers=layers, batch_first=True, bidirectional=True)
    x, lengths = torch.randn(5, 7, 16), torch.tensor([7, 3, 1, 5, 7])
    packed = gru(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))[0]
    expected, _ = pad_packed_sequence(packed, batch_first=True, total_length=7)
    masked = MaskedGRU(gru)
    assert dict(masked.named_parameters()).keys() == dict(gru.named_parameters()).keys()
    torch.testing.assert_close(masked(x, lengths), expected, atol=1e-6, rtol=1e-5)


def test_nn_gru_does_not_vmap_and_the_masked_gru_does():
    from torch.func import functional_call, stack_module_state, vmap

    torch.manual_seed(0)
    grus = [nn.GRU(8, 6, batch_first=True, bidirectional=True) for _ in range(3)]
    params, _ = stack_module_state(grus)
    xs, lengths = torch.randn(3, 4, 5, 8), torch.tensor([[5, 2, 1, 4]] * 3)
    with pytest.raises(RuntimeError, match="Batching rule not implemented for aten::gru"):
        vmap(lambda p, x: functional_call(grus[0], p, (x,))[0])(params, xs)
    out = vmap(lambda p, x, n: functional_call(MaskedGRU(grus[0]), p, (x, n)))(params, xs, lengths)
    for k, gru in enumerate(grus):
        packed = gru(pack_padded_sequence(xs[k], lengths[k], batch_first=True, enforce_sorted=False))[0]
        torch.testing.assert_close(
            out[k], pad_packed_sequence(packed, batch_first=True, total_length=5)[0], atol=1e-6, rtol=1e-5
        )


def test_padded_xattn_scores_and_gradients_equal_the_packed_ones():
    torch.manual_seed(0)
    regions = nn.functional.normalize(torch.randn(4, 5, 8), dim=-1).requires_grad_()
    lengths = torch.tensor([6, 3, 1, 5])
    mask = (torch.arange(6)[None] < lengths[:, None])[..., None]
    words = nn.functional.normalize(torch.randn(4, 6, 8) * mask, dim=-1).detach().requires_grad_()
    weights = dict(
        sim_weight=torch.randn(7, 8), sim_bias=torch.zeros(7), score_weight=torch.randn(1, 7), score_bias=torch.zeros(1)
    )
    results = []
    for scores in (pair_scores, padded_pair_scores):
        out = scores(regions, words, lengths, lambda_=9.0, **weights)
        out.sum().backward()
        results.append((out.detach(), regions.grad, words.grad))
        regions.grad = words.grad = None
    for packed, padded in zip(*results):  # some regions match no word: the packed form's clamp gives 0, not 0/0
        assert torch.isfinite(padded).all()
        torch.testing.assert_close(padded, packed, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------- a member equals its run alone


@pytest.mark.parametrize(
    "experiment, overrides",
    [("vsepp_synthetic_tiny", []), ("dbl_synthetic_tiny", ["cooperative.scenario=oss", "cooperative.strategy=F"])],
    ids=["vsepp", "dbl-F-oss"],
)
def test_a_grouped_member_equals_its_run_alone(experiment, overrides, tiny_root, tmp_path):
    """Same seed, same result: after 20 steps every parameter within 1e-5 of its solo run's (relative to the
    tensor's largest entry) and the same test table at 2 decimals."""
    members = configs(tiny_root, experiment, (0, 1), *overrides)
    alone = [run_experiment(config, tmp_path / f"alone{k}") for k, config in enumerate(members)]
    grouped = run_group(members, [tmp_path / f"member{k}" for k in range(2)])
    for k in range(2):
        assert grouped[k].failure is None
        solo, member = (load_checkpoint(tmp_path / f"{kind}{k}" / "last.pt") for kind in ("alone", "member"))
        assert member["state"].step == solo["state"].step == 20
        assert relative_difference(solo["model"], member["model"]) < 1e-5
        assert grouped[k].result.test.to_markdown() == alone[k].test.to_markdown()
    # the two seeds are two different runs, not one run twice
    assert (
        relative_difference(*(load_checkpoint(tmp_path / f"member{k}" / "last.pt")["model"] for k in range(2))) > 0.01
    )


def test_a_member_that_diverges_stops_and_the_others_go_on(tiny_root, tmp_path):
    members = configs(tiny_root, "vsepp_synthetic_tiny", (0, 1, 2))
    runs = [start_run(config, tmp_path / f"member{k}") for k, config in enumerate(members)]
    group = GroupedTrainer([run.trainer for run in runs])
    with torch.no_grad():  # member 1's weights turn NaN: its first loss is NaN
        runs[1].trainer.method.model.image_encoder.fc.weight.fill_(float("nan"))
    ended = group.fit()
    assert isinstance(ended[1].failure, NonFiniteLossError) and "epoch 1, step 0" in str(ended[1].failure)
    assert ended[0].failure is None and ended[2].failure is None
    alone = run_experiment(members[2], tmp_path / "alone2")
    assert (
        relative_difference(
            load_checkpoint(tmp_path / "alone2" / "last.pt")["model"],
            load_checkpoint(tmp_path / "member2" / "last.pt")["model"],
        )
        < 1e-5
    )
    assert alone.best_epoch == 1


def test_a_group_resumes_from_its_members_checkpoints(tiny_root, tmp_path):
    """One epoch, then a second from each member's last.pt, ends where two epochs straight end; a member's
    last.pt is a run's own checkpoint (its optimizer's moments are its rows of the group's)."""
    two = configs(tiny_root, "vsepp_synthetic_tiny", (0, 1), "train.epochs=2")
    one = configs(tiny_root, "vsepp_synthetic_tiny", (0, 1), "train.epochs=1")
    run_group(two, [tmp_path / f"straight{k}" for k in range(2)])
    run_group(one, [tmp_path / f"resumed{k}" for k in range(2)])
    run_group(two, [tmp_path / f"resumed{k}" for k in range(2)])
    for k in range(2):
        straight, resumed = (load_checkpoint(tmp_path / f"{kind}{k}" / "last.pt") for kind in ("straight", "resumed"))
        assert resumed["state"].epoch == 2 and resumed["state"].step == 40
        assert relative_difference(straight["model"], resumed["model"]) < 1e-6
        moments = resumed["optimizer"]["state"][0]["exp_avg"]
        assert moments.shape == resumed["model"]["model.image_encoder.fc.weight"].shape


def test_members_of_different_shapes_are_refused(tiny_root, tmp_path):
    plain = configs(tiny_root, "vsepp_synthetic_tiny", (0,))[0]
    wider = configs(tiny_root, "vsepp_synthetic_tiny", (1,), "model.embed_dim=48")[0]
    runs = [start_run(config, tmp_path / f"member{k}") for k, config in enumerate((plain, wider))]
    with pytest.raises(ValueError, match="different model shapes"):
        GroupedTrainer([run.trainer for run in runs])


# ---------------------------------------------------------------------- how a sweep packs its groups


def plan(preset: str, profile: str | None, group: int):
    from itrlab.sweep.dry_run import trial_configs
    from itrlab.sweep.groups import plan_groups

    spec = load_sweep(preset, profile).with_settings({"group": group})
    points, trial = trial_configs(spec, ["dataset.root=/data/nowhere"])
    return plan_groups(spec, points, trial)


def test_dbl_table4_packs_each_rows_seeds_and_keeps_row_a_apart():
    groups = plan("dbl_table4", "paper", 3)
    assert len(groups) == 9 and all(len({p["cooperative.strategy"] for p in g.points}) == 1 for g in groups)
    eight = plan("dbl_table4", "budget", 8)  # B-I have two branches, A one: A's 3 seeds stay a group of 3
    assert sorted(len(g.points) for g in eight) == [3, 8, 8, 8]
    assert {p["cooperative.strategy"] for p in eight[0].points} == {"A"}


@pytest.mark.parametrize(
    "preset, group, says",
    [
        ("dbl_table4", 28, "at most the sweep's 27 trials"),
        ("dbl_table4", 27, "fall in 2 such sets"),
        ("coder_table2", 3, "method coder cannot train in a group: it keeps state outside its parameters"),
        ("dbl_optuna", 2, "an Optuna search proposes one trial at a time"),
    ],
)
def test_a_bad_group_is_one_line(preset, group, says):
    with pytest.raises(UserInputError) as refused:
        plan(preset, "budget" if preset == "dbl_table4" else None, group)  # Table IV's synthetic miniature
    assert says in str(refused.value) and len(str(refused.value).splitlines()) == 1, str(refused.value)
