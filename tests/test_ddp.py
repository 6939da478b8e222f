"""Data-parallel training on Ray Train: two workers share each epoch, every sample once; CODER's queue
gathers every worker's keys. One TorchTrainer runs both checks (its start-up is most of the time)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from itrlab.interrupts import ctrl_c_kept

pytestmark = pytest.mark.e2e


TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    # the workers import this module's loop function by name: give them the tests folder; one TorchTrainer,
    # so no dashboard (it frees finished ones, test_sweep.py; here about 4 CPU-seconds saved)
    ray.init(
        address="local",
        num_cpus=4,
        log_to_driver=False,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}},
    )
    yield
    ray.shutdown()


def record_epoch_batches(loop_config: dict) -> None:
    """A Ray Train worker: builds the trainer as a trial does and writes the caption ids of its batches."""
    import ray.train
    import torch

    from conftest import tiny_config
    from itrlab.train import Trainer, prepare_data
    from itrlab.train.experiment import build_run_method

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    torch.set_num_threads(1)
    config = tiny_config(Path(loop_config["root"]), "train.batch_size=16")
    run_dir = Path(loop_config["out"]) / f"rank{rank}"
    run_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(config, run_dir)
    method, _ = build_run_method(config, data)
    trainer = Trainer(config, method, data, run_dir, rank=rank, world_size=world, device=torch.device("cpu"))
    epochs = {epoch: [b.caption_ids.tolist() for b in trainer.epoch_loader(epoch)] for epoch in (1, 2)}
    loss, _ = trainer.train_epoch(1)  # and the DDP step itself runs on these shards
    (run_dir / "batches.json").write_text(json.dumps({"epochs": epochs, "steps": trainer.state.step, "loss": loss}))


def test_two_workers_see_each_sample_once_per_epoch(ddp_run):
    from itrlab.data.synthetic import synthetic_spec

    spec = synthetic_spec("tiny")
    ranks = [json.loads((ddp_run / f"rank{r}" / "batches.json").read_text()) for r in range(2)]
    n_captions = spec.n_train * spec.captions_per_image
    steps = n_captions // 16 // 2
    assert [r["steps"] for r in ranks] == [steps, steps]
    for epoch in ("1", "2"):
        shards = [[i for batch in r["epochs"][epoch] for i in batch] for r in ranks]
        assert len(shards[0]) == len(shards[1]) == steps * 16
        assert not set(shards[0]) & set(shards[1]), "two workers trained on the same caption"
        assert len(set(shards[0]) | set(shards[1])) == 2 * steps * 16  # each sample at most once, all batches used
    assert ranks[0]["epochs"]["1"] != ranks[0]["epochs"]["2"]  # a new order each epoch


def train_coder_epoch(loop_config: dict) -> None:
    """A Ray Train worker: one CODER epoch under DDP; writes its queue and the image ids it trained on."""
    import ray.train
    import torch

    from itrlab.assembly import load_experiment
    from itrlab.train import Trainer, prepare_data
    from itrlab.train.experiment import build_run_method

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    torch.set_num_threads(1)
    config = load_experiment(
        "coder_synthetic_tiny",
        [f"dataset.root={loop_config['root']}", "tracking.enabled=false", "method.concepts=false", "method.pgc=false"],
    )
    run_dir = Path(loop_config["out"]) / f"coder{rank}"
    run_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(config, run_dir)
    torch.manual_seed(0)
    method, _ = build_run_method(config, data)
    trainer = Trainer(config, method, data, run_dir, rank=rank, world_size=world, device=torch.device("cpu"))
    last = [b.image_ids.tolist() for b in trainer.epoch_loader(1)][-1]
    trainer.train_epoch(1)
    (run_dir / "queue.json").write_text(
        json.dumps({"queue": method.queue.image_ids.tolist(), "last": last, "pointer": int(method.queue.pointer)})
    )


def both_checks(loop_config: dict) -> None:
    """A Ray Train worker: the sampling check, then a CODER epoch, in one worker group."""
    record_epoch_batches(loop_config)
    train_coder_epoch(loop_config)


@pytest.fixture(scope="module")
def ddp_run(tiny_root):
    """The folder where both workers of one two-worker TorchTrainer wrote their records."""
    from itrlab.data.synthetic import generate_synthetic, synthetic_spec

    generate_synthetic(tiny_root, synthetic_spec("tiny"))
    out = tiny_root.parent / "ddp"
    trainer = TorchTrainer(
        both_checks,
        train_loop_config={"root": str(tiny_root), "out": str(out)},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=str(out / "ray"), name="ddp_checks"),
    )
    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_kept():
        trainer.fit()
    # Ray Train's own handler (an abort of this long-ended run) would take a later test's Ctrl-C
    assert signal.getsignal(signal.SIGINT) is before
    return out


def test_coder_gathers_every_workers_keys_before_enqueueing(ddp_run):
    ranks = [json.loads((ddp_run / f"coder{r}" / "queue.json").read_text()) for r in range(2)]
    assert ranks[0]["queue"] == ranks[1]["queue"]  # every worker holds the same queue...
    # ...of 64 slots = one global batch (2 x 32): the last step's keys of rank 0, then rank 1's
    assert ranks[0]["queue"] == ranks[0]["last"] + ranks[1]["last"] and ranks[0]["pointer"] == 0
