"""Profiles of a sweep (paper, budget) and --dry-run: the paper's recipe in one command, checked without
Ray, MLflow or the data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from itrlab.config.loader import config_dir, read_yaml
from itrlab.config.profiles import apply_profile
from itrlab.config.sweep import label, load_sweep
from itrlab.errors import ConfigError
from itrlab.sweep.runner import base_tree, profile_tags
from itrlab.sweep.trial import trial_config


def dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "HOME": str(tmp_path),
        "ITRLAB_CONFIG_DIR": str(REPO / "configs"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "ITRLAB_THROUGHPUT": str(tmp_path / "throughput.jsonl"),
        "ITRLAB_STEP_COUNTS": os.environ["ITRLAB_STEP_COUNTS"],
        "ITRLAB_ESTIMATES": str(tmp_path / ".estimates.json"),
    }  # the estimates' cache: a dot file
    return subprocess.run(
        [sys.executable, str(REPO / "jobs" / "sweep.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )


def test_values_fill_the_file_and_every_profile_must_define_them():
    data = {
        "name": "s",
        "overrides": ["train.lr=${lr}"],
        "grid": {"variant": [{"name": "a", "train.epochs": "${n}"}]},
        "profiles": {
            "budget": {"values": {"lr": 0.001, "n": 3}},
            "paper": {"values": {"lr": 2e-4, "n": 30}, "overrides": ["train.batch_size=256"], "deviations": ["no GPU"]},
        },
    }
    budget = apply_profile(data, None)
    assert budget["overrides"] == ["train.lr=0.001"] and budget["grid"]["variant"][0]["train.epochs"] == 3
    assert budget["profile"] == "budget" and "profiles" not in budget
    paper = apply_profile(data, "paper")
    assert paper["overrides"] == ["train.lr=0.0002", "train.batch_size=256"] and paper["deviations"] == ["no GPU"]
    with pytest.raises(ConfigError, match="profiles of this sweep: budget, paper"):
        apply_profile(data, "papr")
    del data["profiles"]["paper"]["values"]["n"]
    with pytest.raises(ConfigError, match="the profile defines no value 'n'"):
        apply_profile(data, "budget")  # every profile is checked, not only the one asked for
    with pytest.raises(ConfigError, match="defines no profiles"):
        apply_profile({"name": "s", "grid": {"a": [1]}}, "paper")
    for bad in ("../up", ".hidden", "a b", 7):  # a profile names a results page and tags runs
        with pytest.raises(ConfigError, match="a profile's name is letters, digits"):
            apply_profile({"name": "s", "profiles": {bad: {}}}, None)


def test_a_profile_replaces_grid_axes_and_a_file_names_its_default_profile():
    data = {
        "name": "s",
        "default_profile": "real",
        "grid": {"cooperative.strategy": ["A", "B", "D"], "loss.margin": [0.2]},
        "profiles": {"budget": {}, "real": {"grid": {"cooperative.strategy": ["A", "B"]}}},
    }
    real = apply_profile(data, None)  # no --profile: the file's default
    assert real["profile"] == "real" and "default_profile" not in real
    assert real["grid"] == {"cooperative.strategy": ["A", "B"], "loss.margin": [0.2]}
    assert apply_profile(data, "budget")["grid"]["cooperative.strategy"] == ["A", "B", "D"]
    with pytest.raises(ConfigError, match="it adds none"):
        apply_profile({**data, "profiles": {"real": {"grid": {"loss.margn": [0.1]}}}}, None)
    with pytest.raises(ConfigError, match="profiles of this sweep: budget, real"):
        apply_profile({**data, "default_profile": "reel"}, None)


def test_a_profile_extends_another_with_only_what_it_changes():
    data = {
        "name": "s",
        "overrides": ["train.lr=${lr}"],
        "grid": {"variant": [{"name": "a"}, {"name": "b"}], "loss.margin": [0.2]},
        "profiles": {
            "budget": {"values": {"lr": 0.001}},
            "real": {
                "experiment": "vsepp_flickr8k",
                "values": {"lr": 2e-4},
                "overrides": ["train.threads=1"],
                "deviations": ["Flickr8K, not Flickr30K"],
                "seeds": [0, 1, 2],
                "table": {"baseline": "a"},
                "description": "the real recipe",
            },
            "real-other": {
                "extends": "real",
                "overrides": ["loss.reading=infonce"],
                "deviations": ["DCL read as InfoNCE"],
                "grid": {"loss.margin": [0.1]},
                "seeds": [0, 1],
                "description": "its other reading",
            },
        },
    }
    real, other = apply_profile(data, "real"), apply_profile(data, "real-other")
    assert other["overrides"] == ["train.lr=0.0002", "train.threads=1", "loss.reading=infonce"]
    assert other["deviations"] == ["Flickr8K, not Flickr30K", "DCL read as InfoNCE"]
    assert other["experiment"] == real["experiment"] == "vsepp_flickr8k" and other["table"] == {"baseline": "a"}
    assert other["seeds"] == [0, 1] and real["seeds"] == [0, 1, 2]  # its own key where it sets one
    assert other["grid"] == {"variant": [{"name": "a"}, {"name": "b"}], "loss.margin": [0.1]}
    assert other["description"] == "the real recipe\nits other reading" and other["profile"] == "real-other"
    assert real["overrides"] == ["train.lr=0.0002", "train.threads=1"]  # the extended profile is untouched
    for bad in ("reel", "real-other"):  # an unknown profile, itself
        broken = {**data, "profiles": {**data["profiles"], "real-other": {"extends": bad}}}
        with pytest.raises(ConfigError, match="another profile of this sweep that extends none"):
            apply_profile(broken, "budget")
    chain = {**data, "profiles": {**data["profiles"], "third": {"extends": "real-other"}}}
    with pytest.raises(ConfigError, match="extends none: budget, real"):
        apply_profile(chain, "budget")  # one level: every profile is checked


def test_the_main_job_runs_table4_on_flickr8k_without_data_d_and_e():
    spec = load_sweep("dbl_table4")
    assert spec.profile == "flickr8k" and spec.experiment == "vsepp_flickr8k" and len(spec.seeds) == 5
    assert [label(value, "cooperative.strategy") for value in spec.grid["cooperative.strategy"]] == list("ABCFGHI")
    epochs = {
        point["cooperative.strategy"]["name"]
        for point in spec.grid_points()
        if isinstance(point["cooperative.strategy"], dict)
    }
    assert epochs == {"B", "C", "H"}  # the sum-based rows, on a schedule of their own
    from itrlab.config import compose
    from itrlab.sweep.points import trial_tree

    tree = compose(spec.experiment, spec.overrides)
    trained = {
        label(p["cooperative.strategy"], "cooperative.strategy"): trial_tree(tree, p)
        for p in spec.grid_points()
        if p["seed"] == 0
    }
    assert {row: (t["cooperative"]["strategy"], t["train"]["epochs"]) for row, t in trained.items()} == {
        **{row: (row, 8) for row in "AFGI"},
        **{row: (row, 14) for row in "BCH"},
    }
    assert trained["B"]["train"]["lr_decay_epochs"] == [8] and trained["A"]["train"]["lr_decay_epochs"] == [3]
    assert any("rows D and E left out" in line for line in spec.deviations)
    assert load_sweep("dbl_table4", "budget").grid["cooperative.strategy"] == list("ABCDEFGHI")


@pytest.mark.e2e
def test_the_main_job_without_flickr8k_names_the_command_that_makes_it(tmp_path):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "sweep_dbl.py")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "data/flickr8k_precomp/pool1x1: the data set flickr8k_precomp is not here" in line
    assert "`itrlab data flickr8k --from PATH_OR_URL`" in line and "--profile budget" in line, done.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()  # nothing started
    planned = dry_run(tmp_path, "--preset", "dbl-table4", "--dry-run")
    assert (
        planned.returncode == 0 and "sweep dbl_table4, profile flickr8k: 35 trial(s) (5 seed(s) each)" in planned.stdout
    )
    assert (
        f"data: flickr8k_precomp in {tmp_path}/data/flickr8k_precomp/pool1x1: not here yet; make it with "
        "`itrlab data flickr8k --from PATH_OR_URL`"
    ) in planned.stdout
    shown = [line.split()[0] for line in planned.stdout.split("trials (one line per row")[1].splitlines()[2:9]]
    assert shown == list("ABCFGHI"), planned.stdout


@pytest.mark.parametrize("path", sorted((config_dir() / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_profile_of_every_preset_composes_every_trial(path):
    """Every trial of every profile, and every stage a trial trains first, is a valid config: among the checks,
    no lr_decay_epochs milestone at or past its train.epochs (one that would never fire)."""
    from itrlab.assembly import stage_configs

    profiles = list(read_yaml(path, "sweep").get("profiles") or {}) or [None]
    for profile in profiles:
        spec = load_sweep(path, profile)
        tree = base_tree(spec, ["dataset.root=/data/nowhere"])
        points = spec.search_corners() if spec.optuna else spec.grid_points()
        configs = [trial_config(tree, point) for point in points]
        for config in [c for trial in configs for c in (trial, *stage_configs(trial))]:
            assert all(e < config.train.epochs for e in config.train.lr_decay_epochs), (path.stem, profile)
        if profile == "paper":  # the paper's data and protocol, and a reason for every difference
            assert spec.deviations and all(c.eval.test_protocol != "all" for c in configs), path.stem
            assert spec.resources.gpu >= 1
        if profile == "flickr8k":  # real photos, their 1K test, one-thread trials side by side, reasons
            assert spec.deviations and spec.experiment.endswith("_flickr8k"), path.stem
            assert all(
                (c.dataset.name, c.eval.test_protocol, c.train.threads) == ("flickr8k_precomp", "f8k_1k", 1)
                for c in configs
            ), path.stem
            assert spec.resources.cpu * spec.concurrency <= 2 and spec.table.anchors == "flickr8k", path.stem


def test_coder_table2_on_flickr8k_offers_every_row_the_same_decay_choices():
    """Baseline and method alike choose their one decay on validation among after epoch 3, 9 and 15 of 30; the other
    profiles keep the paper's fixed decay halfway, and the profile says why it differs."""
    spec = load_sweep("coder_table2", "flickr8k")
    rows = {p["variant"]["name"]: trial_config(base_tree(spec, []), p) for p in spec.grid_points()}
    assert set(rows) == {"BTR", "+DCL", "+M-DCL", "+concept DCL", "+PGC (full)"}
    assert {
        (c.train.epochs, tuple(c.train.lr_decay_choices), tuple(c.train.lr_decay_epochs)) for c in rows.values()
    } == {(30, (3, 9, 15), ())}
    assert any("after epoch 3, 9 or 15 of 30, chosen per run on validation" in line for line in spec.deviations)
    paper = load_sweep("coder_table2", "paper")
    assert all(
        trial_config(base_tree(paper, ["dataset.root=/data/nowhere"]), p).train.lr_decay_choices is None
        for p in paper.grid_points()[:1]
    )


def test_every_preset_of_a_published_table_has_a_flickr8k_profile():
    assert paper_presets() and all(
        "flickr8k" in read_yaml(config_dir() / "sweeps" / f"{name}.yaml", "sweep")["profiles"]
        for name in paper_presets()
    )


def test_a_profile_names_its_own_experiment_and_vsepp_rows_warm_up_only_there():
    flickr = load_sweep("convse_table3", "flickr8k")
    assert (flickr.experiment, load_sweep("convse_table3").experiment) == ("vsepp_flickr8k", "vsepp_synthetic_small")
    rows = {
        p["variant"]["name"]: trial_config(base_tree(flickr, []), p) for p in flickr.grid_points() if p["seed"] == 0
    }
    assert rows["VSE++"].loss.warmup_epochs == 1 and rows["ConVSE"].loss.warmup_epochs == 0
    assert "warmup_epochs: 1" in rows["ConVSE"].stages[0].overrides[1]  # its VSE++ base warms up too
    # the heads' stage has its own length; the base trains the VSE++ row's schedule, so that row is the base
    from itrlab.assembly import stage_configs
    from itrlab.sweep.dry_run import stages_trained_by_rows

    (base,) = stage_configs(rows["ConVSE"])
    assert base.train.epochs == rows["VSE++"].train.epochs != rows["ConVSE"].train.epochs
    configs = [trial_config(base_tree(flickr, ["dataset.root=/data/nowhere"]), p) for p in flickr.grid_points()]
    assert len(stages_trained_by_rows(configs)) == len(flickr.seeds)  # every seed's base: its VSE++ row, kept
    budget = load_sweep("convse_table3")
    assert all(trial_config(base_tree(budget, []), p).loss.warmup_epochs == 0 for p in budget.grid_points())


def test_convse_paper_profile_is_the_papers_recipe():
    spec = load_sweep("convse_table3", "paper")
    configs = {
        point["variant"]["name"]: trial_config(base_tree(spec, []), point)
        for point in spec.grid_points()
        if point["seed"] == 0
    }
    convse, base = configs["ConVSE"], configs["VSE++"]
    assert (convse.train.batch_size, convse.train.lr, convse.train.epochs, convse.train.lr_decay_epochs) == (
        256,
        2e-5,
        30,
        [],
    )
    assert (convse.model.embed_dim, convse.model.projection_hidden, convse.loss.tau) == (1024, 2048, 0.1)
    assert (base.train.batch_size, base.train.lr, base.train.lr_decay_epochs) == (128, 2e-4, [15])
    assert convse.dataset.name == "f30k_precomp" and convse.eval.test_protocol == "f30k_1k"
    (stage,) = convse.stages
    assert stage.name == "base" and "train.lr=0.0002" in stage.overrides
    assert profile_tags(spec)["itrlab.profile"] == "paper" and "ResNet-152" in profile_tags(spec)["itrlab.deviations"]
    assert load_sweep("convse_table3").profile == "budget"  # the default


@pytest.mark.e2e
def test_dry_run_prints_the_papers_setup_and_starts_nothing(tmp_path):
    done = dry_run(
        tmp_path, "--preset", "convse-table3", "--profile", "paper", "--dry-run", "dataset.root=/data/f30k_precomp"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "15 trial(s)" in out and "1 worker(s) x 4 CPU + 1 GPU" in out
    convse = next(line for line in out.splitlines() if line.strip().startswith("ConVSE "))
    assert all(part in convse for part in ("0,1,2", "256", " 30 ", "2e-05 fixed", "1024", "tau=0.1", "base"))
    assert "stages: 3, each trained once" in out
    assert out.count("used by ConVSE, ConVSE++") == 3  # one base per seed, not one per trial
    # the VSE++ row trains the base's recipe from scratch: its model is the stage, not trained again
    assert out.count("; the VSE++ row's training, kept as the stage") == 3
    # nothing measured here: estimated from the FLOPs of one step; the profile does not group (measured on an
    # H100: VSE++ at G = 3 was slower than one run at a time), so the dry run says how to ask for a group
    assert "G = 1 (one trial per process): about" in out and "G = 3" not in out and "GPU-hours" in out
    assert "--group G, trains G trials of one model shape together" in out
    assert "estimated, not measured" in out and "benchmarks/gpu.py" in out
    assert "RAY_AUTH_MODE=token ray job submit --address http://127.0.0.1:8275 --working-dir . \\\n" in out
    assert f'{{"env_vars": {{"MLFLOW_TRACKING_URI": "sqlite:///{tmp_path / "mlflow.db"}"}}}}' in out
    # the command as given (its script by the path it was started with: tests/test_printed_commands.py)
    assert (
        f"-- python {REPO / 'jobs' / 'sweep.py'} --preset convse-table3 --profile paper --storage "
        f"{tmp_path / 'runs' / 'sweeps'} "
        "dataset.root=/data/f30k_precomp" in out
    )
    # no MLflow store, no runs folder, no data (HOME's caches aside; the step counts went to $ITRLAB_STEP_COUNTS,
    # the estimates' cache to a dot file)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []
    coder = dry_run(
        tmp_path, "--preset", "coder-table2", "--profile", "paper", "--dry-run", "dataset.root=/data/f30k_precomp"
    )
    assert coder.returncode == 0, coder.stderr
    assert all(
        part in coder.stdout for part in ("queue_size=4096", "momentum=0.995", "K=10000", "2e-04 -> 2e-05 at epoch 15")
    )
    assert " 128 " in next(line for line in coder.stdout.splitlines() if line.strip().startswith("+PGC"))


@pytest.mark.e2e
def test_a_measured_throughput_gives_an_estimate(tmp_path):
    from itrlab.train.throughput import record

    spec = load_sweep("convse_table3")
    shapes = set()
    from itrlab.assembly import stage_configs
    from itrlab.sweep.dry_run import train_pairs
    from itrlab.train.throughput import training_shape

    for point in spec.grid_points():
        config = trial_config(base_tree(spec, [f"dataset.root={tmp_path / 'data'}"]), point)
        for each in [config, *stage_configs(config)]:
            _, features, _ = train_pairs(each)
            shapes.add(training_shape(each, *features))
    for shape in shapes:
        record("cpu (2 threads)", shape, 2500.0, tmp_path / "throughput.jsonl")
    done = dry_run(tmp_path, "--preset", "convse-table3", "--dry-run", f"dataset.root={tmp_path / 'data'}")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("G = 1"))
    # 15 trials of 10 epochs x 25,000 pairs at 2,500 pairs/s, 2 CPUs each: 15 x 100 s. The 3 base stages
    # cost nothing: each is a VSE++ row's training, kept as the stage (docs/training.md#stages)
    assert "about 25 min of wall time, 0.83 CPU-hours" in line and "measured on cpu (2 threads)" in line, line
    assert "estimated" not in line


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args, says",
    [
        (["--preset", "convse-table3", "--profile", "papr"], "profiles of this sweep: budget, paper"),
        (["--preset", "dbl-tiny", "--profile", "paper"], "this sweep defines no profiles"),
    ],
)
def test_a_bad_profile_is_one_line_and_exit_2(tmp_path, args, says):
    done = dry_run(tmp_path, *args, "--dry-run")
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def paper_rows(spec):
    """The rows a paper profile's check trains: every row that starts from stages, and the last (the full method)."""
    seed = spec.seeds[0]
    points = [p for p in spec.grid_points() if p["seed"] == seed]
    staged = [p for p in points if any("stages" in (v if isinstance(v, dict) else {}) for v in p.values())]
    return list({id(p): p for p in [*staged[:1], points[-1]]}.values())


def paper_presets() -> list[str]:
    return sorted(
        path.stem
        for path in (config_dir() / "sweeps").glob("*.yaml")
        if "paper" in (read_yaml(path, "sweep").get("profiles") or {})
    )


# The paper's shapes at a CPU's scale: each recipe trains two steps (and a short third) at batch 16 on 7
# training images of 36 x 2048 regions, then evaluates on 8 images (40 captions: AsCL and xattn score every
# pair). What that data cannot hold is scaled with it: the batch (the papers' 64-256 make an xattn or AsCL
# step cost minutes and 10 GB on a CPU), CODER's clusters, queues and concepts (35 training pairs, about 60
# distinct words); a grid that sweeps one of these keys gets the small value too.
TRAIN_IMAGES, EVAL_IMAGES = 7, 8
TINY_CONSTANTS = {
    "train.batch_size": 16,
    "method.K": 8,
    "method.queue_size": 32,
    "method.concept_size": 20,
    "train.epochs": 1,
}  # a variant's own length (ConVSE's heads) too


def small_tree(spec, root: Path):
    small = [
        "defaults.dataset=synthetic_paper_shape",
        f"dataset.root={root}",
        "eval.val_protocol=all",
        "eval.test_protocol=all",
        "train.epochs=1",
        "train.lr_decay_epochs=[]",
        "tracking.enabled=false",
        "train.device=cpu",
        f"dataset.synthetic.knobs={{n_train: {TRAIN_IMAGES}, n_dev: {EVAL_IMAGES}, n_test: {EVAL_IMAGES}}}",
    ]
    small += [
        f"{key}={value}"
        for key, value in TINY_CONSTANTS.items()
        if key.startswith("train.") or spec.experiment.startswith("coder")
    ]
    return base_tree(spec, small)


def tiny_point(point: dict) -> dict:
    """The grid point with the small constants, in its variant and the variant's stages too (a variant
    may set the batch, its base stage another)."""
    point = {**point, **{key: value for key, value in TINY_CONSTANTS.items() if key in point}}
    variant = point.get("variant")
    if isinstance(variant, dict):
        variant = {**variant, **{key: value for key, value in TINY_CONSTANTS.items() if key in variant}}
        if variant.get("stages"):
            variant["stages"] = [
                {
                    **stage,
                    "overrides": [
                        *stage.get("overrides", []),
                        f"train.batch_size={TINY_CONSTANTS['train.batch_size']}",
                        f"train.epochs={TINY_CONSTANTS['train.epochs']}",
                        "train.lr_decay_epochs=[]",
                    ],
                }  # the stage trains 1 epoch too
                for stage in variant["stages"]
            ]
        point["variant"] = variant
    return point


def recipe_shape(config) -> tuple:
    """What decides whether a paper recipe runs end to end: the method, loss, text encoder, embedding,
    pooling, cooperative scenario and stages (not the swept constants: their every trial composes, checked
    above)."""
    cooperative = getattr(config, "cooperative", None)
    return (
        config.method.name,
        config.loss.name,
        config.model.text.encoder,
        config.model.embed_dim,
        config.model.image.pooling,
        config.model.text.pooling,
        getattr(cooperative, "scenario", None),
        tuple(stage.name for stage in config.stages),
    )


def paper_recipes() -> list[tuple[str, int, str]]:
    """Each distinct recipe of the paper profiles, once: (preset, grid point index, its shape)."""
    seen: dict[tuple, tuple[str, int, str]] = {}
    for preset in paper_presets():
        spec = load_sweep(preset, "paper")
        tree = small_tree(spec, Path("/data/nowhere"))
        points = spec.grid_points()
        for point in paper_rows(spec):
            shape = recipe_shape(trial_config(tree, tiny_point(point)))
            seen.setdefault(shape, (preset, points.index(point), " ".join(map(str, shape[:3]))))
    return list(seen.values())


# paper_recipes() as of the presets: written out so that collecting this module (in every tier, on every
# worker) loads no sweep; the next test fails, showing the new list, when a preset changes them
PAPER_RECIPES = [
    ("ascl_generators", 18, "ascl ascl bert"),
    ("ascl_table2", 15, "ascl ascl_triplet bert"),
    ("coder_batch", 15, "coder dcl bert"),
    ("convse_table2", 0, "convsepp convsepp bigru"),
    ("convse_table2", 27, "convsepp convsepp bigru"),
    ("convse_table3", 9, "convse convse bigru"),
    ("dbl_fig4_alpha", 12, "xattn vsepp bigru"),
    ("dbl_table2", 33, "xattn vsepp bigru"),
]


def test_the_trained_recipes_are_every_distinct_paper_recipe():
    found = paper_recipes()
    assert found == PAPER_RECIPES, f"set PAPER_RECIPES to {found}"


@pytest.mark.slow
@pytest.mark.parametrize("preset, index, shape", PAPER_RECIPES, ids=lambda value: str(value).replace(" ", "-"))
def test_every_paper_recipe_trains_end_to_end_on_paper_shaped_data(preset, index, shape, tmp_path):
    """The paper's shapes (36 x 2048 regions, its embedding sizes, encoders, stages and schedule) train an
    epoch of 3 steps and evaluate end to end, on a CPU: each distinct recipe of the paper profiles once (a
    row that starts from stages, and the full method of each preset). Only what the tiny data cannot hold
    changes (``TINY_CONSTANTS``, the test protocol)."""
    from itrlab.train import run_experiment
    from itrlab.train.experiment import generate_if_synthetic

    spec = load_sweep(preset, "paper")
    config = trial_config(small_tree(spec, tmp_path / "data"), tiny_point(spec.grid_points()[index]))
    generate_if_synthetic(config)
    result = run_experiment(config, tmp_path / "run")
    assert result.test.rsum > 0 and result.best_epoch == 1
    assert config.model.embed_dim >= 1024 and config.dataset.name == "synthetic_paper_shape"
