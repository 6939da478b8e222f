"""CLIP (itrlab.methods.clip): the symmetric InfoNCE loss against a plain float64 loop written from its
equation, the learnable temperature, config checks, and a tiny end-to-end run of jobs/train.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO
from itrlab.assembly import load_experiment
from itrlab.data import Batch
from itrlab.errors import ConfigError
from itrlab.losses import LOSSES, Similarities, build_loss, loss_param_names
from itrlab.methods import METHODS, build_method
from itrlab.methods.clip import LOGIT_SCALE, ClipMethod, ClipSettings, SymmetricInfoNCELoss
from itrlab.train import run_experiment
from itrlab.train.checkpoint import MODEL

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ID_LAYOUTS = {
    "distinct": [0, 1, 2, 3, 4, 5, 6],
    "one_duplicate": [0, 1, 0, 2, 3, 4, 5],  # two captions of image 0 in one batch
    "triple_and_pair": [3, 1, 3, 2, 1, 3, 4],
}


def make_sims(image_ids: list[int], seed: int, logit_scale: float, dim: int = 5) -> Similarities:
    """Cosine similarities of random unit embeddings (same-id pairs share one image), float64."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.tensor(image_ids, dtype=torch.long)
    unit = torch.nn.functional.normalize
    per_image = unit(torch.randn(int(ids.max()) + 1, dim, generator=gen, dtype=torch.float64), dim=1)
    captions = unit(torch.randn(len(image_ids), dim, generator=gen, dtype=torch.float64), dim=1)
    return Similarities(
        i2t=per_image[ids] @ captions.T,
        image_ids=ids,
        extras={LOGIT_SCALE: torch.tensor(logit_scale, dtype=torch.float64)},
    )


def ref_clip(sims: Similarities) -> tuple[float, float, float]:
    """L = (mean_i l^I_i + mean_i l^C_i) / 2 with the candidates K(i) = {i} ∪ {j : id_j != id_i}."""
    S, ids = sims.i2t.tolist(), sims.image_ids.tolist()
    s = math.exp(float(sims.extras[LOGIT_SCALE]))
    n = len(ids)
    i2t = t2i = 0.0
    for i in range(n):
        candidates = [j for j in range(n) if j == i or ids[j] != ids[i]]
        num = math.exp(s * S[i][i])
        i2t += -math.log(num / sum(math.exp(s * S[i][j]) for j in candidates))  # image i: its captions
        t2i += -math.log(num / sum(math.exp(s * S[j][i]) for j in candidates))  # caption i: the images
    i2t, t2i = i2t / n, t2i / n
    return (i2t + t2i) / 2, i2t, t2i


# ----------------------------------------------------------------------------- the loss


@pytest.mark.parametrize("layout", list(ID_LAYOUTS))
@pytest.mark.parametrize("seed, logit_scale", [(0, math.log(1 / 0.07)), (1, 0.0), (2, math.log(100.0)), (3, -1.3)])
def test_clip_loss_matches_the_plain_loop(layout, seed, logit_scale):
    sims = make_sims(ID_LAYOUTS[layout], seed, logit_scale)
    out = build_loss("clip")(sims)
    loss, i2t, t2i = ref_clip(sims)
    assert out.loss.dtype == torch.float64
    assert out.loss.item() == pytest.approx(loss, rel=1e-12, abs=1e-12)
    assert out.parts["i2t"].item() == pytest.approx(i2t, rel=1e-12, abs=1e-12)
    assert out.parts["t2i"].item() == pytest.approx(t2i, rel=1e-12, abs=1e-12)
    assert out.parts["tau"].item() == pytest.approx(math.exp(-logit_scale), rel=1e-12)


def test_distinct_ids_give_clips_symmetric_cross_entropy():
    sims = make_sims(ID_LAYOUTS["distinct"], 5, math.log(1 / 0.07))
    logits = sims.extras[LOGIT_SCALE].exp() * sims.i2t
    labels = torch.arange(len(logits))
    cross_entropy = torch.nn.functional.cross_entropy
    expected = (cross_entropy(logits, labels) + cross_entropy(logits.T, labels)) / 2
    assert build_loss("clip")(sims).loss.item() == pytest.approx(expected.item(), rel=1e-12)


def test_a_caption_of_the_same_image_is_never_a_negative():
    """Two captions of image 0 (pairs 0 and 2): the off-diagonal same-id entries are out of the loss."""
    sims = make_sims(ID_LAYOUTS["one_duplicate"], 7, 2.0)
    loss = build_loss("clip")
    base = loss(sims).loss
    for i, j in [(0, 2), (2, 0)]:
        moved = sims.i2t.clone()
        moved[i, j] += 5.0  # a "negative" made very hard: no effect, it is not a negative
        moved_sims = Similarities(i2t=moved, image_ids=sims.image_ids, extras=sims.extras)
        assert loss(moved_sims).loss.item() == pytest.approx(base.item(), rel=1e-14)
    moved = sims.i2t.clone()
    moved[0, 1] += 5.0  # a true negative: the loss grows
    assert loss(Similarities(i2t=moved, image_ids=sims.image_ids, extras=sims.extras)).loss > base
    # what treating the same-image caption as a negative would give is different (so the test can tell)
    distinct = Similarities(i2t=sims.i2t, image_ids=torch.arange(7), extras=sims.extras)
    assert loss(distinct).loss.item() != pytest.approx(base.item(), rel=1e-6)


def test_the_gradient_reaches_logit_scale_and_matches_finite_differences():
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], 11, 1.5)
    t = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    i2t = sims.i2t.clone().requires_grad_(True)
    build_loss("clip")(Similarities(i2t=i2t, image_ids=sims.image_ids, extras={LOGIT_SCALE: t})).loss.backward()
    assert t.grad is not None and i2t.grad is not None and t.grad.abs() > 0
    h = 1e-6

    def at(value: float) -> float:
        scale = torch.tensor(value, dtype=torch.float64)
        return ref_clip(Similarities(i2t=sims.i2t, image_ids=sims.image_ids, extras={LOGIT_SCALE: scale}))[0]

    up, down = at(1.5 + h), at(1.5 - h)
    assert t.grad.item() == pytest.approx((up - down) / (2 * h), rel=1e-6)


def test_the_loss_is_registered_needs_logit_scale_and_takes_no_parameter():
    assert LOSSES["clip"] is SymmetricInfoNCELoss and loss_param_names("clip") == ()
    assert SymmetricInfoNCELoss.requires == (LOGIT_SCALE,)
    sims = make_sims(ID_LAYOUTS["distinct"], 0, 0.0)
    with pytest.raises(ValueError, match="logit_scale"):
        build_loss("clip")(Similarities(i2t=sims.i2t, image_ids=sims.image_ids))
    with pytest.raises(ValueError, match="logit_scale"):
        build_loss("clip")(sims.with_extras(logit_scale=torch.zeros(2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="tau"):
        build_loss("clip", tau=0.1)


def test_half_precision_inputs_are_computed_in_float32():
    sims = make_sims(ID_LAYOUTS["one_duplicate"], 3, math.log(1 / 0.07))
    half = Similarities(
        i2t=sims.i2t.to(torch.bfloat16),
        image_ids=sims.image_ids,
        extras={LOGIT_SCALE: sims.extras[LOGIT_SCALE].float()},
    )
    out = build_loss("clip")(half)
    assert out.loss.dtype == torch.float32
    assert out.loss.item() == pytest.approx(
        ref_clip(Similarities(i2t=half.i2t.double(), image_ids=sims.image_ids, extras=sims.extras))[0], rel=1e-5
    )


# ----------------------------------------------------------------------------- the method


def random_batch(size=8, regions=6, dim=32, vocab=40, length=7, seed=0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return Batch(
        images=torch.randn(size, regions, dim, generator=gen),
        tokens=torch.randint(4, vocab, (size, length), generator=gen),
        lengths=torch.full((size,), length),
        image_ids=torch.tensor([0, 0, 1, 2, 3, 4, 5, 6])[:size],
        caption_ids=torch.arange(size),
    )


def clip_method(tmp_path, *overrides: str, seed: int = 0) -> ClipMethod:
    config = load_experiment("clip_synthetic_tiny", [f"dataset.root={tmp_path}", "tracking.enabled=false", *overrides])
    torch.manual_seed(seed)
    return build_method(config, vocab_size=40, feature_dim=32)


def test_the_method_is_registered_with_its_settings_and_provides_logit_scale():
    assert METHODS["clip"] is ClipMethod and ClipMethod.settings is ClipSettings
    assert ClipMethod.provides == frozenset({"i2t", "image_ids", "i2i", "t2t", LOGIT_SCALE})
    assert ClipSettings(name="clip").init_tau == 0.07 and ClipSettings(name="clip").max_scale == 100.0


def test_logit_scale_starts_at_log_inverse_tau_and_the_gradient_reaches_it(tmp_path):
    method = clip_method(tmp_path, "method.init_tau=0.05")
    assert method.logit_scale.item() == pytest.approx(math.log(20.0), rel=1e-6)
    assert method.temperature() == pytest.approx(0.05, rel=1e-6)
    assert any(p is method.logit_scale for group in method.param_groups(1e-3) for p in group["params"])
    output = method(random_batch())
    assert set(output.parts) == {"i2t", "t2i", "tau"} and output.parts["tau"].item() == pytest.approx(0.05, rel=1e-6)
    output.loss.backward()
    assert method.logit_scale.grad is not None and method.logit_scale.grad.abs() > 0


def test_the_scale_is_clamped_at_max_scale(tmp_path):
    method = clip_method(tmp_path, "method.max_scale=50")
    with torch.no_grad():
        method.logit_scale.fill_(10.0)  # an optimizer step past the cap
    sims = method.batch_similarities(random_batch())
    assert sims.extras[LOGIT_SCALE].exp().item() == pytest.approx(50.0, rel=1e-6)  # read clamped
    method.after_step(1, 10)
    assert method.logit_scale.item() == pytest.approx(math.log(50.0), rel=1e-6)  # the parameter too (CLIP's)


def test_same_seed_same_method_and_loss(tmp_path):
    a, b = clip_method(tmp_path, seed=3), clip_method(tmp_path, seed=3)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
    assert torch.equal(a(random_batch()).loss, b(random_batch()).loss)
    assert not torch.equal(a(random_batch()).loss, clip_method(tmp_path, seed=4)(random_batch()).loss)


def test_with_another_loss_the_scale_is_frozen(tmp_path):
    method = clip_method(tmp_path, "loss={name: vsepp, margin: 0.2}")
    assert not method.logit_scale.requires_grad
    assert all(p is not method.logit_scale for group in method.param_groups(1e-3) for p in group["params"])
    method(random_batch()).loss.backward()


def test_evaluation_scores_are_plain_cosines(tmp_path):
    method = clip_method(tmp_path)
    images = torch.nn.functional.normalize(torch.randn(3, 32), dim=1)
    sims = method.similarities(images, images, torch.arange(3))
    assert torch.allclose(sims.i2t.diagonal(), torch.ones(3))


# ----------------------------------------------------------------------------- config checks


@pytest.mark.parametrize("value", ["0", "-1", "inf", "true", "0.001"])
def test_bad_init_tau_is_a_config_error_on_method_init_tau(tmp_path, value):
    with pytest.raises(ConfigError) as err:
        load_experiment("clip_synthetic_tiny", [f"dataset.root={tmp_path}", f"method.init_tau={value}"])
    assert err.value.field == "method.init_tau", str(err.value)


@pytest.mark.parametrize("value", ["0", "-5", "inf"])
def test_bad_max_scale_is_a_config_error_on_method_max_scale(tmp_path, value):
    with pytest.raises(ConfigError) as err:
        load_experiment("clip_synthetic_tiny", [f"dataset.root={tmp_path}", f"method.max_scale={value}"])
    assert err.value.field == "method.max_scale", str(err.value)


def test_unknown_method_key_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_experiment("clip_synthetic_tiny", [f"dataset.root={tmp_path}", "method.tau=0.1"])
    assert err.value.field == "method.tau", str(err.value)


@pytest.mark.parametrize("experiment", ["vsepp_synthetic_tiny", "xattn_synthetic_tiny"])
def test_loss_clip_with_a_method_without_logit_scale_is_a_config_error_on_loss_name(tmp_path, experiment):
    with pytest.raises(ConfigError) as err:
        load_experiment(experiment, [f"dataset.root={tmp_path}", "loss={name: clip}"])
    assert err.value.field == "loss.name" and "logit_scale" in str(err.value), str(err.value)


@pytest.mark.e2e
def test_check_config_exits_2_with_one_line_for_loss_clip_with_vsepp(tmp_path):
    env = {**os.environ, "ITRLAB_CONFIG_DIR": str(REPO / "configs"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "itrlab.cli",
            "check-config",
            "-c",
            "vsepp_synthetic_tiny",
            "loss={name: clip}",
            f"dataset.root={tmp_path}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "loss.name" in lines[0] and "logit_scale" in lines[0]


# ----------------------------------------------------------------------------- training


def test_training_is_deterministic_and_learns_the_temperature(tmp_path, tiny_root):
    config = load_experiment(
        "clip_synthetic_tiny", [f"dataset.root={tiny_root}", "tracking.enabled=false", "train.epochs=1"]
    )
    first = run_experiment(config, tmp_path / "a")
    second = run_experiment(config, tmp_path / "b")
    assert first.test.rsum == second.test.rsum
    a = torch.load(first.run_dir / MODEL, weights_only=True)
    b = torch.load(second.run_dir / MODEL, weights_only=True)
    a, b = a.get("model", a), b.get("model", b)
    assert torch.equal(a["logit_scale"], b["logit_scale"])
    assert a["logit_scale"].item() != pytest.approx(math.log(1 / 0.07), abs=1e-6)  # it trained


@pytest.mark.e2e
def test_train_job_runs_clip_end_to_end(tmp_path, tiny_root):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    env.update(ITRLAB_CONFIG_DIR=str(REPO / "configs"), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "train.py"),
            "-c",
            "clip_synthetic_tiny",
            "tracking.enabled=false",
            f"dataset.root={tiny_root}",
            f"output.dir={tmp_path / 'runs'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = (tmp_path / "runs" / "clip_synthetic_tiny").glob("*/test_recall.json")
    table = json.loads(result.read_text())
    assert math.isfinite(table["rsum"]) and table["rsum"] > 0
