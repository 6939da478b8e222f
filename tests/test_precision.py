"""Mixed precision (train.precision): bf16 autocast on CPU trains dense and interaction models, losses
see float32 similarities, evaluation scores come back float32, fp16 is refused on a CPU, fp32 is
unchanged; the xattn scorer under autocast; device-aware shard budgets; deferred loss reading."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import tiny_config
from itrlab.assembly import load_experiment
from itrlab.errors import ConfigError
from itrlab.losses import LossOutput, Similarities
from itrlab.methods.xattn.method import InteractionMethod
from itrlab.models.interaction import MAX_SHARD_ELEMENTS, MIN_SHARD_ELEMENTS, InteractionModel, shard_budget
from itrlab.models.text_factory import TextEncoderSpec
from itrlab.train import NonFiniteLossError, run_experiment
from itrlab.train.checkpoint import LAST, load_checkpoint
from itrlab.train.loop import _StepLog
from itrlab.train.precision import MixedPrecision, float32_similarities, loss_modules

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def history(run_dir):
    return load_checkpoint(run_dir / LAST)["state"].history


@pytest.mark.parametrize("experiment", ["vsepp_synthetic_tiny", "xattn_synthetic_tiny"])
def test_bf16_autocast_trains_one_epoch(tmp_path, tiny_root, experiment, monkeypatch):
    """bf16 on CPU: the method's similarities are bf16, its losses get them as float32, the loss is finite."""
    from itrlab.methods.base import MethodModule

    seen: dict[str, set] = {"method": set(), "loss": set()}
    original = MethodModule.step

    def spying_step(self, batch, needs=()):
        output, sims = original(self, batch, needs)
        seen["method"].add(sims.i2t.dtype)
        seen["loss"].add(output.loss.dtype)
        return output, sims

    monkeypatch.setattr(MethodModule, "step", spying_step)
    config = load_experiment(
        experiment, [f"dataset.root={tiny_root}", "tracking.enabled=false", "train.epochs=1", "train.precision=bf16"]
    )
    result = run_experiment(config, tmp_path / "run")
    (epoch,) = history(tmp_path / "run")
    assert math.isfinite(epoch["loss"]) and epoch["rsum"] > 0
    assert result.test.rsum > 0 and result.test.n_images == 50
    assert seen["method"] == {torch.bfloat16}  # autocast was on
    assert seen["loss"] == {torch.float32}  # losses computed from float32 similarities


def test_fp32_is_the_default_and_unchanged(tmp_path, tiny_root):
    """The default config and explicit fp32 + loader give bit-identical losses and tables; fp32 hooks nothing."""
    default = run_experiment(tiny_config(tiny_root, "train.epochs=1"), tmp_path / "a")
    explicit = run_experiment(
        tiny_config(tiny_root, "train.epochs=1", "train.precision=fp32", "train.data_path=loader"), tmp_path / "b"
    )
    assert history(tmp_path / "a") == history(tmp_path / "b")
    assert default.test == explicit.test
    precision = MixedPrecision("fp32", CPU)
    assert not precision.enabled and precision.scaler is None
    built = []
    assert precision.score_fn(lambda: built.append(1) or "the score fn") == "the score fn"


def test_fp16_on_cpu_is_a_config_error(tmp_path, tiny_root):
    with pytest.raises(ConfigError, match="train.precision.*fp16 needs a CUDA GPU"):
        run_experiment(tiny_config(tiny_root, "train.precision=fp16", "train.device=cpu"), tmp_path / "run")
    with pytest.raises(Exception, match="precision"):
        tiny_config(tiny_root, "train.precision=fp8")


def test_float32_cast_reaches_every_loss_module():
    from itrlab.losses import build_loss
    from itrlab.losses.warmup import WarmupLoss

    sims = Similarities(
        torch.ones(3, 3, dtype=torch.bfloat16),
        torch.arange(3),
        extras={"queue": torch.ones(3, 5, dtype=torch.float16), "labels": torch.arange(3)},
    )
    cast = float32_similarities(sims)
    assert cast.i2t.dtype == torch.float32 and cast.extras["queue"].dtype == torch.float32
    assert cast.extras["labels"].dtype == torch.long
    assert float32_similarities(cast) is cast

    seen = []
    warmup = WarmupLoss(build_loss("vsepp"), build_loss("vse"), 1)
    method = torch.nn.ModuleDict({"loss": warmup, "head": torch.nn.Linear(2, 2)})
    assert {id(m) for m in loss_modules(method)} == {id(warmup), id(warmup.main), id(warmup.warmup)}
    MixedPrecision("bf16", CPU).attach(method)
    MixedPrecision("bf16", CPU).attach(method)  # once per module, however often attached
    warmup.warmup.register_forward_pre_hook(lambda module, args: seen.append(args[0].i2t.dtype))
    output = method["loss"](sims)
    assert output.loss.dtype == torch.float32 and seen == [torch.float32]
    assert len(warmup._forward_pre_hooks) == 1


def test_scores_under_autocast_come_back_float32():
    precision = MixedPrecision("bf16", CPU)
    weights = torch.randn(4, 8)

    def build():
        embedded = torch.nn.functional.linear(torch.randn(6, 8), weights)  # bf16 under autocast
        assert embedded.dtype == torch.bfloat16
        return lambda images, captions: embedded[images] @ embedded[captions].T

    score = precision.score_fn(build)
    assert score(slice(0, 2), slice(0, 6)).dtype == torch.float32


def test_grad_scaler_step_matches_the_plain_step():
    """The fp16 path's scaler (here a CPU scaler) unscales before clipping: the same update as without it."""
    torch.manual_seed(0)
    plain, scaled = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    scaled.load_state_dict(plain.state_dict())
    x = torch.randn(8, 4)
    for model, scaler in ((plain, None), (scaled, torch.amp.GradScaler("cpu"))):
        precision = MixedPrecision("fp32", CPU)
        precision.scaler = scaler
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        precision.backward_step(model(x).square().sum(), optimizer, 0.5, model.parameters())
    for a, b in zip(plain.parameters(), scaled.parameters()):
        assert torch.equal(a, b)


def test_xattn_scores_under_bf16_autocast_and_shards_agree():
    torch.manual_seed(0)
    model = InteractionModel.build(
        feature_dim=12, vocab_size=30, embed_dim=16, sim_dim=8, text=TextEncoderSpec(word_dim=8)
    )
    images, tokens = torch.randn(5, 4, 12), torch.randint(4, 30, (10, 7))
    lengths = torch.tensor([7, 5, 3, 2, 7, 6, 4, 1, 7, 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = model(images[:4], tokens[:4], lengths[:4])
        scores.float().sum().backward()
        with torch.no_grad():
            regions, words = model.encode_images(images), model.encode_captions(tokens, lengths)
            whole = model.pair_scores(regions, words, lengths, max_elements=None)
            sharded = model.pair_scores(regions, words, lengths, max_elements=64)
    assert scores.shape == (4, 4) and torch.isfinite(scores).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.similarity.parameters())
    assert torch.allclose(whole.float(), sharded.float(), atol=2e-2)
    with torch.no_grad():
        exact = model.pair_scores(model.encode_images(images), model.encode_captions(tokens, lengths), lengths)
    assert torch.allclose(whole.float(), exact, atol=5e-2)


def test_shard_budget_follows_the_device_unless_configured(tiny_root):
    budget = shard_budget(CPU)
    assert MIN_SHARD_ELEMENTS <= budget <= MAX_SHARD_ELEMENTS and budget & (budget - 1) == 0
    from itrlab.config.checks import synthetic_spec_of
    from itrlab.data import generate_synthetic, open_precomp
    from itrlab.data.tokenizers import build_text_tokenizer
    from itrlab.methods import BuildContext, build_method

    def method(*overrides):
        config = load_experiment("xattn_synthetic_tiny", [f"dataset.root={tiny_root}", *overrides])
        generate_synthetic(tiny_root, synthetic_spec_of(config))
        train = open_precomp(tiny_root, "train")
        vocab = build_text_tokenizer("bigru", train.captions)
        return build_method(config, BuildContext.of(vocab=vocab, splits={"train": train}))

    assert method().shard_elements == "device"
    assert method("method.shard_elements=4096").shard_elements == 4096
    captured = {}
    xattn = method()
    xattn.model.pair_scores = lambda *a, max_elements: captured.setdefault("budget", max_elements) or torch.zeros(1, 1)
    xattn.split_score_fn(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), torch.ones(2, dtype=torch.long))(
        slice(0, 1), slice(0, 1)
    )
    assert captured["budget"] == shard_budget(CPU)
    assert isinstance(xattn, InteractionMethod)


def test_step_log_reads_in_groups_with_the_same_sums_and_names_the_bad_step():
    outputs = [LossOutput(torch.tensor(v), {"i2t": torch.tensor(v / 3), "n": 2.0}) for v in (0.1, 0.7, 1.3, 2.9, 0.31)]
    every_step, grouped = _StepLog(1, every=1), _StepLog(1, every=3)
    for step, output in enumerate(outputs):
        every_step.add(step, output)
        grouped.add(step, output)
    assert every_step.means() == grouped.means()
    plain_total = 0.0
    for output in outputs:
        plain_total += output.loss.item()
    assert grouped.means()[0] == plain_total / len(outputs)
    bad = _StepLog(2, every=4)
    with pytest.raises(NonFiniteLossError, match="loss became nan at epoch 2, step 11"):
        for step, value in enumerate((1.0, 2.0, float("nan"), 3.0), start=9):
            bad.add(step, LossOutput(torch.tensor(value), {}))


def test_losses_of_every_papers_package_are_cast_to_float32():
    from itrlab.methods.coder import DCLLoss
    from itrlab.methods.convse import ContrastiveSumOfNegativesLoss
    from itrlab.methods.dbl import RelativeMaxLoss

    holder = torch.nn.ModuleList([ContrastiveSumOfNegativesLoss(), DCLLoss(), RelativeMaxLoss(), torch.nn.Linear(2, 2)])
    assert [type(m).__name__ for m in loss_modules(holder)] == [
        "ContrastiveSumOfNegativesLoss",
        "DCLLoss",
        "RelativeMaxLoss",
    ]
