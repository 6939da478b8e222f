"""What ConVSE's heads cost (docs/papers/convse.md#what-the-heads-cost): its losses on the base network's own
embedding, no layer added (``model.projection_hidden=null``), and a model with heads read before them
(``eval.embedding=prehead``, ``eval.log_prehead``, ``itrlab evaluate --embedding prehead``), on the tiny data."""

from __future__ import annotations

import json

import pytest
import torch

import test_losses as shared
from conftest import tiny_config, write_precomp, write_text_features
from itrlab.assembly import stage_configs
from itrlab.data import Batch
from itrlab.errors import ConfigError
from itrlab.methods import build_method
from itrlab.tracking.chart_names import flat_metrics
from itrlab.train.experiment import prepare_data
from itrlab.train.stages import TrainedStage, start_from
from trained_runs import itrlab, train, work_in

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BASE = (
    "[{name: base, copy: [model.image_encoder, model.text_encoder], overrides: [method.name=vsepp, "
    "'loss={name: vsepp, margin: 0.2}', model.projection_hidden=null]}]"
)
LOSSES = {"convse": "loss={name: convse, tau: 0.1}", "convsepp": "loss={name: convsepp, margin: 0.2, tau: 0.1}"}


def convse(root, method="convse", heads="16", *overrides):
    """ConVSE (or ConVSE++) on the tiny data, with heads of hidden ``heads`` ("null": none), from a VSE++ base."""
    return tiny_config(
        root, f"method.name={method}", LOSSES[method], f"model.projection_hidden={heads}", f"stages={BASE}", *overrides
    )


def plain(config):
    return config.model_copy(update={"stages": []})


def batch(feature_dim: int, vocab_size: int, seed: int = 0) -> Batch:
    """Seven pairs, two of them captions of image 0 (never each other's negatives)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 4, 5, 6, 3, 6, 5])
    return Batch(
        images=torch.randn(7, 3, feature_dim, generator=generator),
        tokens=torch.randint(1, vocab_size, (7, 6), generator=generator),
        lengths=lengths,
        image_ids=torch.tensor([0, 1, 0, 2, 3, 4, 5]),
        caption_ids=torch.arange(7),
    )


@pytest.mark.parametrize("method", list(LOSSES))
def test_without_heads_the_losses_add_no_parameter_to_the_base(tmp_path, method):
    """The no-head rows train the base network's own weights and nothing else: every weight comes from the
    base stage, none is new; the head rows add the two heads' (about 8.4 M on Flickr8K's 1,024-d base)."""
    config = convse(tmp_path, method, "null")
    (base,) = stage_configs(config)
    stage_model = build_method(base, vocab_size=30, feature_dim=32)
    folder = tmp_path / "base"
    folder.mkdir()
    torch.save({"model": stage_model.state_dict(), "state": {}, "rng": {}}, folder / "model.pt")
    method_model = build_method(plain(config), vocab_size=30, feature_dim=32)
    assert method_model.state_dict().keys() == stage_model.state_dict().keys()
    counts = start_from(method_model, TrainedStage("base", folder, None, 1.0), config.stages[0])
    assert counts == {"copied": len(stage_model.state_dict()), "fresh": 0}
    assert not method_model.model.has_head
    headed = build_method(plain(convse(tmp_path, method)), vocab_size=30, feature_dim=32)
    new = set(headed.state_dict()) - set(stage_model.state_dict())
    assert new and all(".head.net." in key for key in new) and headed.model.has_head


@pytest.mark.parametrize("method", list(LOSSES))
def test_without_heads_the_loss_is_the_head_rows_formula_on_the_base_embeddings(tmp_path, method):
    """One batch: the no-head model's loss equals the head model's loss function (eq. 6-8, or 12-14) applied to
    that model's embeddings before its heads, where both hold the same base weights, and equals the equation's
    float64 loop on those embeddings."""
    torch.manual_seed(0)
    headed = build_method(plain(convse(tmp_path, method)), vocab_size=30, feature_dim=32).double()
    bare = build_method(plain(convse(tmp_path, method, "null")), vocab_size=30, feature_dim=32).double()
    bare.load_state_dict({k: v for k, v in headed.state_dict().items() if ".head." not in k})
    data = batch(32, 30)
    data.images = data.images.double()
    images = headed.model.encode_images(data.images, head=False)
    captions = headed.model.encode_captions(data.tokens, data.lengths, head=False)
    sims = headed.similarities(images, captions, data.image_ids, same_modality=True)
    loss = bare(data).loss
    torch.testing.assert_close(loss, headed.loss(sims).loss, rtol=0, atol=1e-12)
    loop = shared.ref_convse(sims, 0.1) if method == "convse" else shared.ref_convsepp(sims, 0.2, 0.1)
    assert loss.item() == pytest.approx(loop[0] + loop[1], abs=1e-12)
    through = headed(data).loss  # the head rows' loss reads the embeddings through the heads: another number
    assert abs(through.item() - loss.item()) > 1e-6


def stored_text_config(root, *overrides):
    return convse(root, "convse", "16", "dataset.kind=precomp", "model.text.encoder=precomp", *overrides)


@pytest.mark.parametrize("text", ["bigru", "precomp"])
def test_the_reading_before_the_heads_is_the_base_networks(tmp_path, text):
    """A model with heads read before them (eval.embedding=prehead, and the reading eval.log_prehead logs) scores
    a split exactly as the base network with its weights, and otherwise than through the heads."""
    root = tmp_path / "data"
    if text == "precomp":
        write_text_features(write_precomp(root, {"train": 20, "dev": 10, "test": 10}, regions=3, dim=32))
        config = stored_text_config(root)
    else:
        config = convse(root)
    data = prepare_data(config, tmp_path / "run")
    context_args = {"vocab_size": len(data.vocab), "feature_dim": data.test.features.shape[-1]}
    torch.manual_seed(0)
    headed = build_method(plain(config), **context_args)
    base = build_method(stage_configs(config)[0], **context_args)
    base.load_state_dict({k: v for k, v in headed.state_dict().items() if ".head." not in k})
    prehead_config = plain(config).model_copy(update={"eval": config.eval.model_copy(update={"embedding": "prehead"})})
    prehead = build_method(prehead_config, **context_args)
    prehead.load_state_dict(headed.state_dict())
    n, m = data.test.n_images, data.test.n_captions

    def scores(scorer):
        return scorer.score_fn(data.test, data.vocab, 8)(slice(0, n), slice(0, m))

    expected = scores(base)
    torch.testing.assert_close(scores(prehead), expected, rtol=0, atol=0)
    torch.testing.assert_close(scores(headed.prehead_reading()), expected, rtol=0, atol=0)
    assert not torch.allclose(scores(headed), expected)


@pytest.mark.parametrize(
    "experiment, overrides, field, says",
    [
        (None, ["eval.embedding=prehead", "model.projection_hidden=null"], "eval.embedding", "has no projection head"),
        (None, ["eval.embedding=prehead", "eval.log_prehead=true"], "eval.log_prehead", "set one of them"),
        (None, ["eval.embedding=head"], "eval.embedding", "'output' or 'prehead'"),
        ("coder_synthetic_tiny", ["eval.log_prehead=true"], "eval.log_prehead", "method 'coder'"),
        ("xattn_synthetic_tiny", ["eval.embedding=prehead"], "eval.embedding", "method 'xattn'"),
    ],
)
def test_a_reading_the_model_has_not_is_one_line_before_anything_runs(tmp_path, experiment, overrides, field, says):
    from itrlab.assembly import load_experiment

    with pytest.raises(ConfigError) as caught:
        if experiment is None:
            convse(tmp_path, "convse", "16", *overrides)
        else:
            load_experiment(experiment, [f"dataset.root={tmp_path}", *overrides])
    assert caught.value.field == field and says in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A ConVSE run with heads and a VSE++ run, each logging its reading before the head, in one MLflow store."""
    folder = tmp_path_factory.mktemp("prehead")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, folder)
        data = f"dataset.root={folder / 'tiny'}"
        runs = {
            "convse": train(
                "vsepp_synthetic_tiny",
                folder / "runs" / "convse",
                data,
                "method.name=convse",
                LOSSES["convse"],
                "model.projection_hidden=16",
                "eval.log_prehead=true",
            ),
            "vsepp": train("vsepp_synthetic_tiny", folder / "runs" / "vsepp", data, "eval.log_prehead=true"),
        }
        yield folder, runs


def read(path):
    return json.loads(path.read_text())


def test_a_run_logs_its_best_checkpoint_read_before_its_heads(trained, monkeypatch):
    from mlflow import MlflowClient

    folder, runs = trained
    work_in(monkeypatch, folder)
    run_dir = folder / "runs" / "convse"
    prehead, test = read(run_dir / "prehead_test_recall.json"), read(run_dir / "test_recall.json")
    assert prehead != test and (run_dir / "prehead_test_ranks.npz").is_file()
    logged = flat_metrics(MlflowClient().get_run(runs["convse"]).data.metrics)
    assert logged["prehead_test_rsum"] == pytest.approx(prehead["rsum"]) and "prehead_rsum" in logged
    assert logged["test_rsum"] == pytest.approx(test["rsum"])  # the run's own reading stays its test table
    # a model without a head: its reading before the head is its embedding
    vsepp = folder / "runs" / "vsepp"
    assert read(vsepp / "prehead_test_recall.json") == read(vsepp / "test_recall.json")


def test_evaluate_reads_a_stored_model_before_its_heads(trained, monkeypatch, tmp_path):
    folder, runs = trained
    work_in(monkeypatch, folder)
    run_dir = folder / "runs" / "convse"
    for source in (run_dir, f"runs:/{runs['convse']}/model"):
        out = tmp_path / "prehead.json"
        assert itrlab("evaluate", source, "--embedding", "prehead", "--no-tracking", "--out", out) == 0
        written = read(out)
        assert written["members"][str(source)] == read(run_dir / "prehead_test_recall.json")  # to the digit
        assert written["embeddings"] == {str(source): "prehead"}
    assert itrlab("evaluate", run_dir, "--no-tracking", "--out", tmp_path / "own.json") == 0
    assert read(tmp_path / "own.json")["members"][str(run_dir)] == read(run_dir / "test_recall.json")


def test_evaluate_refuses_the_reading_before_a_head_a_model_has_not(trained, monkeypatch, capsys):
    folder, _ = trained
    work_in(monkeypatch, folder)
    run_dir = folder / "runs" / "vsepp"
    assert itrlab("evaluate", run_dir, "--embedding", "prehead", "--no-tracking") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run_dir) in err and "no projection head" in err, err


def test_the_presets_table_shows_the_reading_before_the_heads_beside_each_row():
    """convse-heads-flickr8k's pivot: the reading before the heads as a column of every row, its difference to
    VSE++ paired over seeds, and in the report a column of its own whose chance cell is rsum's band."""
    from itrlab.config.sweep import load_sweep
    from itrlab.data.shape import DataShape
    from itrlab.report.chance import chance_level
    from itrlab.report.headline import headline, row_marks
    from itrlab.report.paper_report import ReportInputs, build_report
    from itrlab.report.pivot import pivot, trial_cost_unit
    from itrlab.report.summary import TrialRow

    spec = load_sweep("convse_heads_flickr8k")
    own = {"VSE++": 287.0, "ConVSE": 273.0, "ConVSE++": 267.0, "ConVSE (no heads)": 280.0, "ConVSE++ (no heads)": 284.0}
    before = {**own, "ConVSE": 283.0, "ConVSE++": 281.0}  # the head rows' bases; the others read themselves
    rows = []
    for label, rsum in own.items():
        for seed in spec.seeds:
            metrics = {"test_rsum": rsum + seed, "prehead_test_rsum": before[label] + seed, "run_seconds": 60.0}
            metrics |= {f"{prefix}test_{k}": 10.0 for prefix in ("", "prehead_") for k in ("i2t_R1", "t2i_R1")}
            rows.append(TrialRow(f"{label}{seed}", {"variant": {"name": label}, "seed": seed}, metrics, "finished"))
    table = pivot(rows, spec, DataShape(6000, 1000, 1000, 5, 1, 1280, synthetic=False), "f8k_1k")
    labels = list(own)
    assert table["prehead_test_rsum_mean"] == [before[label] + 2 for label in labels]
    assert table["prehead_test_rsum_diff_paired"][labels.index("ConVSE")] == pytest.approx(-4.0)
    assert table["prehead_test_rsum_diff_paired"][labels.index("ConVSE (no heads)")] == pytest.approx(-7.0)
    level = chance_level(1000, 5, "f8k_1k")
    top = headline(table, spec, level)
    cost_column, devices = trial_cost_unit(spec)
    inputs = ReportInputs(top, row_marks(table, spec, level), level, None, "", cost_column, devices, [])
    report = build_report(table, spec, inputs)
    column = report.header.index("rsum before the head")
    assert report.rows[labels.index("ConVSE")][column].startswith("285.0 ± ")
    low, high = level.rsum_band
    assert report.rows[-1][0] == "chance" and report.rows[-1][column] == f"{low:.1f}-{high:.1f}"
