"""The learning rate's decay chosen on validation (``train.lr_decay_choices``, itrlab.train.decay_choice): on the tiny
synthetic data each branch is the run of its own decay epoch for epoch, the branch with the best validation is kept
and alone tested, the test split informs nothing before that, the same seed gives the same run, a run stopped
anywhere resumes to the same result, and MLflow holds each branch's curve and the chosen one once per step."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from conftest import tiny_config
from itrlab.config.sweep import load_sweep
from itrlab.errors import UserInputError
from itrlab.report.summary import TrialRow
from itrlab.sweep.reporting import validation_curves
from itrlab.tracking import MlflowTracker
from itrlab.tracking.chart_names import chart_name
from itrlab.tracking.run_reader import TRIAL_ID_TAG
from itrlab.train import LossHistory, run_experiment
from itrlab.train.checkpoint import LAST, load_checkpoint
from itrlab.train.decay_choice import BranchRecord, DecayBranches, choose

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EPOCHS, CHOICES = 4, (1, 2, 3)
CHOSEN = ("train.epochs=4", "train.lr_decay_choices=[1, 2, 3]", "train.lr=0.003")


def choice_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "decay" / "choice.json").read_text())


def rsums(history: list[dict]) -> list[float]:
    return [entry["rsum"] for entry in history]


@pytest.fixture(scope="module")
def alone(tmp_path_factory, tiny_root):
    """Each choice's schedule trained as a run of its own (``train.lr_decay_epochs=[d]``): decay -> (result, its
    last state)."""
    folder = tmp_path_factory.mktemp("alone")
    found = {}
    for decay in CHOICES:
        config = tiny_config(tiny_root, "train.epochs=4", "train.lr=0.003", f"train.lr_decay_epochs=[{decay}]")
        found[decay] = (run_experiment(config, folder / str(decay)), load_checkpoint(folder / str(decay) / LAST))
    return found


class Phases:
    """The phases a training announces (its callbacks' ``on_progress``), in order."""

    def __init__(self):
        self.seen: list[str] = []

    def on_progress(self, progress) -> None:
        self.seen.append(progress.phase)

    def on_epoch_end(self, report) -> None:
        pass


@pytest.fixture(scope="module")
def chosen(tmp_path_factory, tiny_root):
    """One run choosing among decays after epoch 1, 2 and 3 of 4: its result, folder and the phases it went
    through."""
    run_dir = tmp_path_factory.mktemp("chosen") / "run"
    phases, losses = Phases(), LossHistory()
    result = run_experiment(tiny_config(tiny_root, *CHOSEN), run_dir, callbacks=[phases, losses])
    return result, run_dir, phases.seen, losses.series


def test_each_branch_is_the_run_of_its_decay_and_the_best_validation_is_kept(alone, chosen):
    """The answer is known from the runs alone: each branch's validation curve is its own run's to the last digit,
    the branch kept is the one whose best validation rsum is highest (the earliest of equal ones), and the run's
    test table, best epoch and per-epoch history are that run's."""
    result, run_dir, *_ = chosen
    record = choice_of(run_dir)
    assert [b["decay"] for b in record["branches"]] == list(CHOICES)
    for branch in record["branches"]:
        run, last = alone[branch["decay"]]
        assert [value for _, value in branch["curve"]] == rsums(last["state"].history)
        assert (branch["best_rsum"], branch["best_epoch"]) == (run.best_val_rsum, run.best_epoch)
    best = max(CHOICES, key=lambda d: (alone[d][0].best_val_rsum, -d))
    assert record["chosen"] == best
    assert len({alone[d][0].best_val_rsum for d in CHOICES}) > 1  # the choice had something to choose
    assert result.test == alone[best][0].test
    assert (result.best_epoch, result.best_val_rsum, result.epochs) == (
        alone[best][0].best_epoch,
        alone[best][0].best_val_rsum,
        EPOCHS,
    )
    state = load_checkpoint(run_dir / LAST)["state"]
    assert state.decay_after == best and state.history == alone[best][1]["state"].history
    assert [entry["lr"] for entry in state.history] == pytest.approx(
        [0.003 if epoch <= best else 0.0003 for epoch in range(1, EPOCHS + 1)]
    )
    # what the command line's last lines judge the loss by: the chosen branch's, not every branch's in turn
    assert chosen[3]["loss"] == [(entry["epoch"], entry["loss"]) for entry in state.history]


def test_the_test_split_is_evaluated_once_after_the_choice_and_informs_nothing(chosen, tiny_root, tmp_path):
    """The run announces its test once, after every validation; the same run on data whose test split is another
    (its images in reverse order: other test tables) chooses the same branch from the same records."""
    result, run_dir, phases, _ = chosen
    assert phases.count("testing") == 1 and phases[-1] == "testing"
    other = tmp_path / "other"
    shutil.copytree(tiny_root, other)
    np.save(other / "test_ims.npy", np.load(other / "test_ims.npy")[::-1].copy())
    moved = run_experiment(tiny_config(other, *CHOSEN), tmp_path / "run")
    assert choice_of(tmp_path / "run") == choice_of(run_dir)
    assert moved.test != result.test


def test_the_same_seed_gives_the_same_choice_and_result(chosen, tiny_root, tmp_path):
    result, run_dir, *_ = chosen
    again = run_experiment(tiny_config(tiny_root, *CHOSEN), tmp_path / "again")
    assert choice_of(tmp_path / "again") == choice_of(run_dir) and again.test == result.test


def test_choose_takes_the_highest_best_validation_and_the_earliest_of_equals():
    def branch(decay: int, best: float) -> BranchRecord:
        return BranchRecord(decay=decay, epochs=30, best_rsum=best, best_epoch=decay + 1, curve=[])

    assert choose([branch(3, 280.0), branch(9, 290.5), branch(15, 285.0)]) == 9
    assert choose([branch(3, 290.5), branch(9, 290.5), branch(15, 285.0)]) == 3
    assert choose([branch(3, float("nan")), branch(9, 100.0)]) == 9


class StopAfter:
    """A Ctrl-C once the branch ``decay`` has checkpointed epoch ``epoch``."""

    def __init__(self, decay: int, epoch: int):
        self.decay, self.epoch = decay, epoch

    def on_epoch_end(self, report) -> None:
        if report.branches and report.epoch == self.epoch and self.decay in report.branches:
            raise KeyboardInterrupt


@pytest.mark.parametrize(
    "decay, epoch, lose_start",
    [
        (1, 3, False),  # inside branch 1, after the trunk
        (3, 2, True),  # in the trunk, stopped between its checkpoint of epoch 2 and the copy of branch 2's start
        # branch 1's last epoch: its end kept and branch 2's start the run folder's, the trainer not yet on it
        pytest.param(1, 4, False, marks=pytest.mark.slow),
        # the last branch's last epoch: the choice made and kept, its callbacks not told
        pytest.param(2, 4, False, marks=pytest.mark.slow),
    ],
)
def test_a_run_stopped_anywhere_resumes_to_the_same_choice_and_result(
    chosen, tiny_root, tmp_path, decay, epoch, lose_start
):
    result, run_dir, *_ = chosen
    stopped = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(tiny_config(tiny_root, *CHOSEN), stopped, callbacks=[StopAfter(decay, epoch)])
    if lose_start:
        shutil.rmtree(stopped / "decay" / f"after{epoch}")
    resumed = run_experiment(tiny_config(tiny_root, *CHOSEN), stopped)
    assert choice_of(stopped) == choice_of(run_dir) and resumed.test == result.test
    assert load_checkpoint(stopped / LAST)["state"].history == load_checkpoint(run_dir / LAST)["state"].history


@pytest.mark.slow
def test_a_larger_train_epochs_trains_every_branch_further_and_chooses_again(chosen, tiny_root, tmp_path):
    """A finished run resumed with 5 epochs instead of 4: every branch trains its fifth epoch and the choice is
    made again, as a run of 5 epochs from the start makes it."""
    _, run_dir, *_ = chosen
    shutil.copytree(run_dir, tmp_path / "longer")
    longer = [*CHOSEN[1:], "train.epochs=5"]
    further = run_experiment(tiny_config(tiny_root, *longer), tmp_path / "longer")
    straight = run_experiment(tiny_config(tiny_root, *longer), tmp_path / "straight")
    assert choice_of(tmp_path / "longer") == choice_of(tmp_path / "straight") and further.test == straight.test
    assert all(len(branch["curve"]) == 5 for branch in choice_of(tmp_path / "longer")["branches"])


def test_a_run_trained_without_choices_or_in_a_branch_the_choices_lack_is_refused(tiny_root, tmp_path):
    run_experiment(tiny_config(tiny_root, "train.epochs=1"), tmp_path / "fixed")
    with pytest.raises(UserInputError, match="trained 1 epoch\\(s\\) without train.lr_decay_choices"):
        run_experiment(tiny_config(tiny_root, *CHOSEN), tmp_path / "fixed")
    branches = DecayBranches(tmp_path, [2, 3], EPOCHS)
    state = load_checkpoint(tmp_path / "fixed" / LAST)["state"]
    state.decay_after = 1
    with pytest.raises(UserInputError, match="decays after epoch 1, which train.lr_decay_choices=\\[2, 3\\]"):
        branches.check_state(state)


def test_mlflow_holds_each_branch_and_the_chosen_curve_once_per_step_across_a_resume(workdir, chosen, tiny_root):
    """Stopped inside branch 1 and resumed: every branch's series (``decay<d>_rsum``, in its chart section) has
    steps 1-4 once with its record's values, and the plain ``rsum`` is the chosen branch's, with the choice's
    figures as final metrics."""
    _, run_dir, *_ = chosen
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    config = tiny_config(tiny_root, *CHOSEN, "tracking.enabled=true")
    parent = MlflowTracker("decay", uri)
    parent_id = parent.start(run_name="sweep", tags={}, params={})

    def tracker() -> MlflowTracker:  # a sweep trial's run, as the trial tags it
        found = MlflowTracker("decay", uri)
        found.default_tags = {TRIAL_ID_TAG: "t0"}
        return found

    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, workdir / "run", tracker=tracker(), parent_run_id=parent_id, callbacks=[StopAfter(1, 3)])
    result = run_experiment(config, workdir / "run", tracker=tracker(), parent_run_id=parent_id)
    client, record = MlflowClient(uri), choice_of(run_dir)

    def series(key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(result.mlflow_run_id, chart_name(key)))

    for branch in record["branches"]:
        assert chart_name(f"decay{branch['decay']}_rsum") == f"5_decay{branch['decay']}/rsum"
        assert series(f"decay{branch['decay']}_rsum") == [
            (epoch, pytest.approx(value, rel=1e-5)) for epoch, value in branch["curve"]
        ]
        assert [step for step, _ in series(f"decay{branch['decay']}_lr")] == list(range(1, EPOCHS + 1))
    chosen_curve = next(b["curve"] for b in record["branches"] if b["decay"] == record["chosen"])
    assert series("rsum") == [(epoch, pytest.approx(value, rel=1e-5)) for epoch, value in chosen_curve]
    assert [step for step, _ in series("loss")] == list(range(1, EPOCHS + 1))
    metrics = client.get_run(result.mlflow_run_id).data.metrics
    assert metrics["lr_decay_chosen"] == record["chosen"]
    assert metrics["decay2_best_rsum"] == pytest.approx(record["branches"][1]["best_rsum"], rel=1e-5)
    # what the sweep's report reads back: the chosen curve, the decay chosen, which seed chose it
    (tmp := workdir / "sweep.yaml").write_text(SWEEP)
    row = TrialRow("t0", {"loss.margin": 0.2, "seed": 0}, {}, "finished")
    curves, decays, said = validation_curves(load_sweep(tmp), [row], parent.trial_runs(parent_id))
    assert curves == {"0.2": [[(epoch, pytest.approx(value, rel=1e-5)) for epoch, value in chosen_curve]]}
    assert decays == {"0.2": [(record["chosen"],)]} and said == {"0.2": f"after {record['chosen']} (seed 0)"}


SWEEP = """name: decay_tiny
experiment: vsepp_synthetic_tiny
overrides: [train.epochs=4, "train.lr_decay_choices=[1, 2, 3]"]
grid: {loss.margin: [0.1, 0.2]}
seeds: [0, 1]
table: {rows: [loss.margin]}
"""


@pytest.mark.parametrize(
    "extra, args, fragment",
    [
        ("asha: {grace_period: 1}\n", [], "config error at 'asha'"),
        ("num_workers: 2\n", [], "config error at 'num_workers'"),
        ("", ["--group", "2"], "train.lr_decay_choices cannot train in a group"),
    ],
    ids=["asha", "num_workers", "group"],
)
def test_a_sweep_whose_trials_cannot_branch_is_refused_in_one_line(tmp_path, capsys, extra, args, fragment):
    from itrlab.cli import sweep_cli

    (tmp_path / "sweep.yaml").write_text(SWEEP + extra)
    code = sweep_cli(["--sweep", str(tmp_path / "sweep.yaml"), "--dry-run", *args, f"dataset.root={tmp_path}/data"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and fragment in err, err
    assert "train.lr_decay_choices" in err


def test_a_dry_run_shows_the_choices_and_costs_every_schedule(tmp_path, monkeypatch, capsys):
    """The schedule line names the choices and the epochs trained; the cost counts them (9 epochs of 4)."""
    from itrlab.cli import sweep_cli

    monkeypatch.setenv("ITRLAB_THROUGHPUT", str(tmp_path / "throughput.jsonl"))
    monkeypatch.setenv("ITRLAB_ESTIMATES", str(tmp_path / "estimates.json"))
    (tmp_path / "sweep.yaml").write_text(SWEEP)

    def cost(*overrides: str) -> float:
        root = f"dataset.root={tmp_path / 'not-generated'}"  # the synthetic spec gives the shape
        assert sweep_cli(["--sweep", str(tmp_path / "sweep.yaml"), "--dry-run", root, *overrides]) == 0
        out = capsys.readouterr().out
        assert ("after epoch 1, 2 or 3 (chosen on validation: 9 epochs trained)" in out) == (not overrides), out
        return float(re.search(r"G = 1 .*?, ([0-9.]+) CPU-hours", out).group(1))

    assert cost() / cost("train.lr_decay_choices=null") == pytest.approx(9 / 4, rel=0.05)
