"""The method contract: one suite that every method of the registry runs against, and
every registered loss. The methods and the losses are read from their registries when the tests are
collected, so a method or a loss registered later (a new paper's package, or a test's own, as
:func:`test_a_method_registered_in_a_test_runs_against_the_suite` shows) is covered without editing this file.

What a method must do, on its tiny config (``<name>_synthetic_tiny``, else the VSE++ tiny experiment with
the method's own file ``configs/methods/<name>.yaml``, else with its defaults) and the tiny synthetic data:

1. build from it, as a run builds it;
2. train two steps: finite losses, its parameters moved;
3. resume: a checkpoint after those steps, restored into a fresh method and optimizer the way ``--resume``
   restores one, takes the next step exactly as the run that went on (loss, parts, every parameter and buffer);
4. log its loss's parts: finite numbers under metric names MLflow takes (``loss_<part>``);
5. train in a group (each member of a group of two seeds ends the epoch with its own run's loss) or say
   in one line why it cannot;
6. train on losses that each have a float64 loop (:mod:`loss_references`).

What a loss must do: match its plain float64 loop, written from its paper's equation, with its declared
default settings on a batch holding two captions of one image; give detached, finite parts.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import REPO
from itrlab.assembly import load_experiment
from itrlab.config import ExperimentConfig
from itrlab.config.loader import config_dir
from itrlab.losses import LossOutput
from itrlab.losses.registry import loss_registries
from itrlab.methods import METHODS
from itrlab.train.checkpoint import LAST, save_checkpoint
from itrlab.train.experiment import build_run_method, prepare_data, start_run
from itrlab.train.grouped.membership import group_refusal
from itrlab.train.grouped.trainer import GroupedTrainer
from itrlab.train.loop import Trainer, _StepLog
from loss_references import REFERENCES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GENERIC = "vsepp_synthetic_tiny"  # a method without a tiny experiment of its own trains on this one's settings
METHOD_NAMES = sorted(METHODS)
LOSS_NAMES = sorted((registry.kind, name) for registry in loss_registries() for name in registry)
METRIC_NAME = re.compile(r"[A-Za-z0-9_]+")  # a part's name, logged as the metric loss_<part>


def tiny_config(name: str, root: Path, *overrides: str) -> ExperimentConfig:
    """Method ``name`` on the tiny synthetic data under ``root``: its own tiny experiment, or the generic one
    with its method file, or with its defaults; MLflow off, on the CPU."""
    own = [f"dataset.root={root}", "tracking.enabled=false", "train.device=cpu", *overrides]
    if (config_dir() / "experiments" / f"{name}_synthetic_tiny.yaml").is_file():
        return load_experiment(f"{name}_synthetic_tiny", own)
    method = (
        f"defaults.method={name}"
        if (config_dir() / "methods" / f"{name}.yaml").is_file()
        else f"method={{name: {name}}}"
    )
    return load_experiment(GENERIC, [method, *own])


def next_steps(trainer: Trainer, epoch: int, steps: int) -> list[LossOutput]:
    """The first ``steps`` optimizer steps of epoch ``epoch``, as the trainer takes them."""
    batches = iter(trainer.epoch_batches(epoch))
    trainer.begin_epoch(epoch)
    return [trainer.train_step(next(batches).to(trainer.device), epoch) for _ in range(steps)]


@dataclass
class Resumed:
    """A method's run: its first two steps (and the parameters they moved), the next step of the run that went
    on, and the next step of a fresh method and optimizer restored from the checkpoint written after the two."""

    config: ExperimentConfig
    trainer: Trainer
    two: list[LossOutput]
    moved: list[str]
    went_on: LossOutput
    restored: LossOutput
    restored_trainer: Trainer


@pytest.fixture(scope="module")
def resumed(tiny_root, tmp_path_factory):
    """``resumed(name)``: method ``name``'s run (:class:`Resumed`), made once per module."""
    made: dict[str, Resumed] = {}

    def make(name: str) -> Resumed:
        if name not in made:
            config = tiny_config(name, tiny_root)
            run_dir = tmp_path_factory.mktemp(name)
            trainer = start_run(config, run_dir).trainer
            initial = {key: value.clone() for key, value in trainer.method.state_dict().items()}
            two = next_steps(trainer, 1, 2)
            moved = [
                key
                for key, value in trainer.method.state_dict().items()
                if value.is_floating_point() and not torch.equal(value, initial[key])
            ]
            save_checkpoint(run_dir / LAST, model=trainer.method, optimizer=trainer.optimizer, state=trainer.state)
            went_on = next_steps(trainer, 2, 1)[0]  # the run goes on into its next epoch
            data = prepare_data(config, run_dir)
            torch.manual_seed(config.seed + 1)  # another initialisation: the checkpoint must bring everything back
            fresh, _ = build_run_method(config, data, run_dir)
            restored_trainer = Trainer(config, fresh, data, run_dir)  # restores last.pt, as a --resume does
            restored = next_steps(restored_trainer, 2, 1)[0]
            made[name] = Resumed(config, trainer, two, moved, went_on, restored, restored_trainer)
        return made[name]

    return make


# ----------------------------------------------------------------------------- every method


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_builds_from_its_tiny_config(name, resumed):
    run = resumed(name)
    assert run.config.method.name == name and isinstance(run.trainer.method, METHODS[name])


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_trains_two_steps(name, resumed):
    run = resumed(name)
    assert len(run.two) == 2 and all(out.loss.dim() == 0 and torch.isfinite(out.loss) for out in run.two)
    assert run.moved, f"{name}: two steps changed no parameter"


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_a_restored_checkpoint_takes_the_same_next_step(name, resumed):
    run = resumed(name)
    assert run.restored_trainer.state.step == run.trainer.state.step
    assert torch.equal(run.restored.loss, run.went_on.loss), (run.restored.loss.item(), run.went_on.loss.item())
    assert run.restored.parts.keys() == run.went_on.parts.keys()
    assert all(torch.equal(run.restored.parts[k], run.went_on.parts[k]) for k in run.went_on.parts)
    went_on, restored = run.trainer.method.state_dict(), run.restored_trainer.method.state_dict()
    assert went_on.keys() == restored.keys()
    differ = [key for key in went_on if not torch.equal(went_on[key], restored[key])]
    assert not differ, f"{name}: after the next step these differ from the run that went on: {differ[:5]}"


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_logs_its_loss_parts(name, resumed):
    run = resumed(name)
    log = _StepLog(1, every=1)  # what an epoch logs: the mean of each part over its steps
    for step, output in enumerate(run.two):
        assert output.parts, f"{name}: its loss has no parts to log"
        assert all(not value.requires_grad and value.dim() == 0 for value in output.parts.values())
        log.add(step, output)
    _, parts = log.means()
    assert all(METRIC_NAME.fullmatch(part) for part in parts), sorted(parts)
    assert all(math.isfinite(value) for value in parts.values()), parts


@pytest.fixture(scope="module")
def group_root(tmp_path_factory) -> Path:
    """Where the grouped runs generate (once) a tiny data set of 40 training images."""
    return tmp_path_factory.mktemp("group") / "tiny"


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_trains_in_a_group_or_says_why_not_in_one_line(name, tiny_root, group_root, tmp_path):
    refusal = group_refusal(tiny_config(name, tiny_root))
    if refusal is not None:
        assert refusal.strip() and "\n" not in refusal, refusal
        return
    steps_4 = ["dataset.synthetic.knobs={n_train: 40}", "train.batch_size=50", "train.epochs=1"]  # 200 captions
    members = [tiny_config(name, group_root, *steps_4, f"seed={seed}") for seed in (0, 1)]
    alone = [start_run(config, tmp_path / f"alone{k}").trainer.train_epoch(1)[0] for k, config in enumerate(members)]
    group = GroupedTrainer([start_run(config, tmp_path / f"member{k}").trainer for k, config in enumerate(members)])
    together = group.train_epoch(1)
    for member, loss in zip(group.by_input, alone):
        assert member.failure is None
        assert together[member.row][0] == pytest.approx(loss, rel=1e-4), (name, member.row)
    assert alone[0] != alone[1]  # two seeds: two runs, not one run twice


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_trains_on_losses_with_a_float64_loop(name, tiny_root):
    config = tiny_config(name, tiny_root)
    names = [config.loss.name] + ([config.loss.warmup_loss] if config.loss.warmup_epochs else [])
    assert not [loss for loss in names if loss not in REFERENCES], names


# ----------------------------------------------------------------------------- every loss


def test_every_registered_loss_has_a_float64_loop():
    registered = {name for _, name in LOSS_NAMES}
    assert len(registered) == len(LOSS_NAMES), "a name is registered in two loss registries"
    missing = sorted(registered - set(REFERENCES))
    assert not missing, f"losses without a float64 loop in tests/loss_references.py: {', '.join(missing)}"
    assert not sorted(set(REFERENCES) - registered), "loops of losses no registry has"


@pytest.mark.parametrize("kind, name", LOSS_NAMES, ids=[name for _, name in LOSS_NAMES])
def test_every_registered_loss_matches_its_float64_loop(kind, name):
    registry = next(r for r in loss_registries() if r.kind == kind)
    if name not in REFERENCES:
        pytest.fail(f"{kind} {name!r} has no float64 loop in tests/loss_references.py")
    reference, settings = REFERENCES[name], registry.settings(name)()  # the declared defaults
    for seed in range(2):
        inputs = reference.inputs(seed)
        out = registry.build(name, settings)(*inputs)
        expected = reference.loop(*inputs, **dict(settings))
        assert out.loss.dtype == torch.float64 and out.loss.dim() == 0
        assert out.loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12), (name, seed)
        assert all(not p.requires_grad and torch.isfinite(p).all() for p in out.parts.values()), name


# ----------------------------------------------------------------------------- a new method is covered

DUMMY = '''
"""A method registered by a test: the dual encoder under a name of its own, with no setting."""
from typing import Literal

from itrlab.methods import register_method
from itrlab.methods.base import MethodSettings
from itrlab.methods.dual import DualEncoderMethod


class DummySettings(MethodSettings):
    name: Literal["contract_dummy"]


@register_method("contract_dummy")
class DummyMethod(DualEncoderMethod):
    name = "contract_dummy"
    settings = DummySettings
'''


@pytest.mark.e2e
def test_a_method_registered_in_a_test_runs_against_the_suite(tmp_path):
    """A method registered in a pytest plugin, and nowhere else, runs against this suite, unedited."""
    (tmp_path / "contract_dummy.py").write_text(DUMMY, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO / "platform")])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(Path(__file__)),
            "-p",
            "contract_dummy",
            "-k",
            "contract_dummy",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"{len(METHOD_CHECKS)} passed" in done.stdout, done.stdout[-2000:]


METHOD_CHECKS = [
    test
    for test in list(globals().values())
    if any(mark.name == "parametrize" and mark.args[0] == "name" for mark in getattr(test, "pytestmark", []))
]
"""The checks every method runs: the tests parametrized by the method's name."""
