"""Every shipped sweep validates (each grid point's config, or the corners of its search space)."""

from __future__ import annotations

import re

import pytest

from conftest import write_precomp, write_text_features
from itrlab.config import config_dir
from itrlab.config.sweep import check_table_rows, load_sweep
from itrlab.sweep.runner import base_tree, check_trials

SWEEPS = sorted(p.stem for p in (config_dir() / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("name", SWEEPS)
def test_shipped_sweep_validates(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load_sweep(name)
    check_table_rows(spec)  # table.rows and table.baseline name the pivot's keys and a row's label
    tree = base_tree(spec, [])
    dataset = tree["dataset"]
    if dataset.get("kind") == "precomp" and not dataset.get("synthetic"):
        # a sweep on extracted real photos (flickr8k_precomp): a small folder of that layout, with the
        # 1,000 test images its protocol needs (f8k_1k), stands in for the features the fast tier never reads
        write_precomp(
            tmp_path / dataset["root"], {"train": 60, "dev": 10, "test": 1000}, regions=1
        )  # 300 captions: a batch of 256
        if tree["model"].get("text", {}).get("encoder") == "precomp":
            write_text_features(tmp_path / dataset["root"])
    check_trials(spec, tree)
    if spec.table is not None and spec.table.paper:
        from itrlab.report.pivot import load_paper

        assert load_paper(spec.table.paper)


def test_presets_name_shipped_sweeps():
    from itrlab.config.sweep import sweep_presets

    presets = sweep_presets()
    # every sweep file is a preset, by its name with dashes, and by the short names its aliases list
    assert {name.replace("_", "-") for name in SWEEPS} <= set(presets) and set(presets.values()) == set(SWEEPS)
    assert {alias: presets[alias] for alias in ("smoke", "table4", "table2", "fig4-gamma", "fig4-alpha", "optuna")} == {
        "smoke": "dbl_smoke",
        "table4": "dbl_table4",
        "table2": "dbl_table2",
        "fig4-gamma": "dbl_fig4_gamma",
        "fig4-alpha": "dbl_fig4_alpha",
        "optuna": "dbl_optuna",
    }


def test_a_short_name_taken_twice_is_refused(tmp_path, monkeypatch):
    from itrlab.config.sweep import sweep_presets
    from itrlab.errors import ConfigError

    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "one.yaml").write_text("name: one\naliases: [quick]\n")
    (tmp_path / "sweeps" / "two.yaml").write_text("name: two\naliases: [quick]\n")
    monkeypatch.setenv("ITRLAB_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="two.yaml: aliases.*'quick'.*already the name of preset one"):
        sweep_presets()
    (tmp_path / "sweeps" / "two.yaml").write_text("name: two\naliases: [one]\n")
    with pytest.raises(ConfigError, match="already the name of preset one"):
        sweep_presets()


def test_a_conditional_search_dimension_applies_only_under_its_condition():
    spec = load_sweep("dbl_optuna")
    alpha = spec.optuna.space["cooperative.alpha"]
    assert alpha.applies({"cooperative.strategy": "G"}) and not alpha.applies({"cooperative.strategy": "F"})
    corners = spec.search_corners()
    assert all(("cooperative.alpha" in point) == (point["cooperative.strategy"] in "CEGHI") for point in corners)
    assert {point.get("cooperative.alpha") for point in corners} >= {0.1, 0.9}


@pytest.mark.parametrize(
    "when, says",
    [
        ({"cooperative.scenario": ["oas"]}, "whose values are"),
        ({"cooperative.gamma": [0.1]}, "must be a choice dimension listed before it"),
        ({"train.lr": [0.1]}, "must be a choice dimension listed before it"),
    ],
)
def test_a_condition_names_an_earlier_choice_and_its_values(when, says, tmp_path):
    from itrlab.errors import ConfigError

    (tmp_path / "s.yaml").write_text(
        "name: s\nexperiment: dbl_synthetic_tiny\noptuna:\n  num_trials: 2\n  space:\n"
        "    cooperative.scenario: {type: choice, values: [oss, mss]}\n"
        "    cooperative.gamma: {type: uniform, low: 0.1, high: 0.3}\n"
        f"    cooperative.alpha: {{type: uniform, low: 0.1, high: 0.9, when: {when}}}\n"
    )
    with pytest.raises(ConfigError, match=says):
        load_sweep(tmp_path / "s.yaml")


def test_the_search_space_suggests_a_conditional_dimension_only_under_its_condition():
    import optuna

    from itrlab.sweep.search import SearchSpace

    space = SearchSpace(load_sweep("dbl_optuna").optuna.space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(30):
        trial = study.ask()
        space(trial)
        assert ("cooperative.alpha" in trial.params) == (trial.params["cooperative.strategy"] in "CEGHI"), trial.params
        study.tell(trial, 0.0)


def test_an_optuna_search_runs_each_configuration_once_per_seed_and_learns_their_mean(tmp_path):
    """Tune's searcher for a sweep with seeds [3, 7]: each configuration Optuna suggests comes twice, with seed 3
    and seed 7 (no Ray index left in the trial's config), and Optuna is told the mean of the two trials' objective;
    the sweep's trial count and Tune's samples are the configurations times the seeds."""
    from itrlab.sweep.search import optuna_search

    spec = load_sweep("dbl_optuna").model_copy(update={"seeds": [3, 7]})
    assert spec.trial_count == spec.optuna.num_trials * 2
    searcher, ended = optuna_search(spec, tmp_path)
    assert ended == 0
    configs = [searcher.suggest(f"t{i}") for i in range(4)]
    assert [c["seed"] for c in configs] == [3, 7, 3, 7] and not any("__trial_index__" in c for c in configs)
    drop = lambda c: {k: v for k, v in c.items() if k != "seed"}  # noqa: E731
    assert drop(configs[0]) == drop(configs[1]) and drop(configs[2]) == drop(configs[3])
    searcher.on_trial_complete("t0", {"rsum": 10.0})
    searcher.on_trial_complete("t1", {"rsum": 30.0})
    (told,) = [trial for trial in searcher.searcher._ot_study.trials if trial.value is not None]
    assert told.value == 20.0  # the configuration's mean over its seeds
    alone, _ = optuna_search(spec.model_copy(update={"seeds": [0], "name": "alone"}), tmp_path)
    assert type(alone).__name__ == "OptunaSearch"  # no repeats


def test_grid_points_cover_every_combination_times_seeds():
    spec = load_sweep("dbl_table4", "budget")
    points = spec.grid_points()
    assert len(points) == 9 * 3
    assert {(p["cooperative.strategy"], p["seed"]) for p in points} == {(s, k) for s in "ABCDEFGHI" for k in (0, 1, 2)}


@pytest.mark.parametrize(
    "key, pairs, says",
    [
        ("compare", [["ConVSE++", "ConVSE+"]], "table.compare[0]': got 'ConVSE+'; the label of a row of the pivot"),
        ("compare", [["ConVSE", "ConVSE"]], "table.compare[0]': got ['ConVSE', 'ConVSE']; two different rows"),
        ("steps", [["ConVSE", "VSE++"], ["ConVSE", "VSE+"]], "table.steps[1]': got 'VSE+'; the label of a row"),
        ("steps", [["VSE", "VSE"]], "table.steps[0]': got ['VSE', 'VSE']; two different rows"),
    ],
)
def test_a_comparison_names_two_rows_of_the_pivot(key, pairs, says):
    from itrlab.errors import ConfigError

    spec = load_sweep("convse_table3")
    spec = spec.model_copy(update={"table": spec.table.model_copy(update={key: pairs})})
    with pytest.raises(ConfigError, match=re.escape(says)):
        check_table_rows(spec)


@pytest.mark.parametrize("name", ["dbl_tiny", "ascl_generators"])
def test_grid_trials_take_the_configs_the_driver_checked(name, tmp_path, monkeypatch):
    """check_config runs once per grid point, in the driver before Ray starts: every point as Tune hands it
    to a trial (the grid resolved by Tune, named variants included) finds its checked config in the
    trials' context, after Ray's pickling, equal to what checking it in the trial gives (the sweep's stages
    folder included); the trial checks nothing again."""
    from ray import cloudpickle
    from ray.tune.search.variant_generator import generate_variants

    from itrlab.sweep import trial
    from itrlab.sweep.runner import param_space, share_stages

    monkeypatch.chdir(tmp_path)
    spec = load_sweep(name)
    tree = base_tree(spec, [])
    tree, checked = share_stages(tree, check_trials(spec, tree), tmp_path / "sweep")
    assert len(checked) == len(spec.grid_points()) > 1
    expected = {trial.point_key(point): trial.trial_config(tree, point) for point in spec.grid_points()}
    context = cloudpickle.loads(cloudpickle.dumps(trial.TrialContext(tree, name, "", "", name, checked=checked)))

    def checked_again(tree):
        raise AssertionError("a grid trial checked its config again")

    monkeypatch.setattr("itrlab.assembly.check_config", checked_again)  # what trial_config checks with
    points = [params for _, params in generate_variants(param_space(spec))]
    assert len(points) == len(expected)
    for params in points:
        config = trial.config_of(context, params)
        assert config == expected[trial.point_key(params)] and config.output.stages == tmp_path / "sweep" / "stages"
        assert config is not context.checked[trial.point_key(params)]  # each trial its own copy
    with pytest.raises(AssertionError, match="checked its config again"):  # a point no grid has: checked there
        trial.config_of(context, {**points[0], "seed": 12345})


def test_a_base_that_only_the_grid_completes_gives_the_sweep_its_first_point(tmp_path, monkeypatch):
    """A DBL sweep whose base names a cooperative scenario but no strategy (every grid point names one): the
    base alone is no valid experiment, and the sweep's own steps (its data check, provenance, epochs) read
    the first grid point's checked config instead of refusing the sweep."""
    import yaml

    from itrlab.errors import ConfigError
    from itrlab.sweep.runner import first_trial
    from itrlab.sweep.trial import trial_config

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "grid_only.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "grid_only",
                "experiment": "dbl_synthetic_tiny",
                "seeds": [0],
                "overrides": ["cooperative.strategy=null"],
                "grid": {"cooperative.strategy": ["A", "F"]},
            }
        )
    )
    spec = load_sweep(path)
    tree = base_tree(spec, [])
    with pytest.raises(ConfigError, match="cooperative"):
        trial_config(tree, {})
    first = first_trial(tree, check_trials(spec, tree))
    assert first.cooperative.strategy == "A"


@pytest.mark.parametrize(
    "overrides,says",
    [
        (["train.epochs=5", "train.lr_decay_epochs=[5]"], "5 can never fire with train.epochs=5"),
        (["train.epochs=8", "train.lr_decay_epochs=[4,9]"], "9 can never fire with train.epochs=8"),
        (["train.epochs=1", "train.lr_decay_epochs=[1]"], "set train.lr_decay_epochs=[] (no decay)"),
    ],
)
def test_a_decay_that_cannot_fire_is_refused_with_its_key_value_and_epochs(overrides, says):
    from itrlab.assembly import load_experiment
    from itrlab.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        load_experiment("vsepp_synthetic_tiny", overrides)
    assert caught.value.field == "train.lr_decay_epochs"
    load_experiment("vsepp_synthetic_tiny", ["train.epochs=5", "train.lr_decay_epochs=[4]"])  # the last epoch decays


@pytest.mark.parametrize(
    "preset, overrides, field, says",
    [
        (
            "dbl_fig4_alpha",
            ["cooperative.gamma=-1"],
            "cooperative.gamma",
            "must be a finite number >= 0 (the boosting margin γ)",
        ),
        (
            "dbl_table4",
            ["cooperative.gamma=-1"],
            "cooperative.gamma",
            "strategy A (no boosting: the task loss alone) does not use gamma",
        ),
        (
            "dbl_fig4_alpha",
            ["cooperative.loss=rm"],
            "cooperative.loss",
            "give either cooperative.loss or cooperative.strategy",
        ),
        ("dbl_table4", ["loss.margni=0.1"], "loss.margni", "unknown key for loss 'vsepp'"),
        ("dbl_table4", ["loss.name=vssepp"], "loss.name", "did you mean 'vsepp'?"),
        ("dbl_table4", ["cooperatve.strategy=F"], "cooperatve", "unknown key"),
    ],
)
def test_the_pre_check_types_the_loss_and_the_schemes_sections(preset, overrides, field, says):
    """The torch-free pre-check of every trial (--dry-run, --list, a sweep's start) types the loss section and
    each scheme's section by their declared settings: a bad setting is the config check's own line."""
    from itrlab.errors import ConfigError
    from itrlab.sweep.points import check_structure

    with pytest.raises(ConfigError) as caught:
        check_structure(load_sweep(preset), overrides)
    assert caught.value.field == field and says in str(caught.value), str(caught.value)
