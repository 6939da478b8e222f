"""Device-resident training data (train.data_path): the same batches as the loader, bit-identical runs,
float16 features kept float16 on the device, extras, and how ``auto`` chooses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_config, write_precomp
from itrlab.data import CaptionDataset, Vocabulary, make_loader, open_precomp
from itrlab.data.dataset import ShardedBatchSampler
from itrlab.data.resident import ResidentSplit, choose_data_path, load_features, resident_bytes
from itrlab.train import run_experiment
from itrlab.train.checkpoint import LAST, load_checkpoint

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def float16_split(tmp_path):
    root = write_precomp(tmp_path / "precomp", {"train": 23}, regions=3, dim=5, seed=1)
    path = root / "train_ims.npy"
    np.save(path, np.load(path).astype(np.float16))
    split = open_precomp(root, "train")
    assert split.features.dtype == np.float16
    return split


def assert_same_batch(a, b):
    for name in ("images", "tokens", "lengths", "image_ids", "caption_ids"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), name
    assert a.extras.keys() == b.extras.keys()
    for name in a.extras:
        assert torch.equal(a.extras[name], b.extras[name]), name


@pytest.mark.parametrize("rank, world_size", [(0, 1), (1, 2)])
def test_resident_batches_are_the_loaders(tmp_path, rank, world_size):
    split = float16_split(tmp_path)
    vocab = Vocabulary.build(split.captions)
    extras = {
        "label": lambda i: torch.tensor(i % 3),  # a scalar per caption
        "varying": lambda i: torch.arange(1 + i % 4, dtype=torch.float32),
    }  # zero-padded when stacked
    dataset = CaptionDataset(split, vocab, max_len=6, extra_fields=extras)
    resident = ResidentSplit(dataset, CPU)
    assert resident.features.dtype == torch.float16  # kept in its stored dtype, cast per batch
    assert resident.nbytes <= resident_bytes(split, 6)
    for seed in (3, 4):
        loader = make_loader(dataset, 8, shuffle=True, seed=seed, drop_last=True, rank=rank, world_size=world_size)
        sampled = list(resident.batches(ShardedBatchSampler(len(dataset), 8, seed, rank, world_size)))
        from_loader = list(loader)
        assert len(sampled) == len(from_loader) > 0
        for a, b in zip(sampled, from_loader):
            assert_same_batch(a, b)
            assert a.images.dtype == torch.float32


def test_features_load_in_chunks_in_their_dtype(tmp_path):
    split = float16_split(tmp_path)
    loaded = load_features(split.features, CPU, chunk_bytes=64)  # a few rows per chunk
    assert loaded.dtype == torch.float16 and torch.equal(loaded, torch.from_numpy(np.array(split.features)))


def test_padded_captions_match_the_items(tmp_path):
    split = float16_split(tmp_path)
    dataset = CaptionDataset(split, Vocabulary.build(split.captions), max_len=5)
    tokens, lengths = dataset.padded_captions()
    assert tokens.shape == (len(dataset), int(lengths.max()))
    for index in range(len(dataset)):
        item = dataset[index][1]
        assert int(lengths[index]) == len(item) and torch.equal(tokens[index, : len(item)], item)
        assert (tokens[index, len(item) :] == 0).all()


def test_resident_run_is_bit_identical_to_the_loader_run(tmp_path, tiny_root):
    runs = {}
    for path in ("loader", "resident"):
        result = run_experiment(tiny_config(tiny_root, f"train.data_path={path}", "train.epochs=1"), tmp_path / path)
        runs[path] = (result.test, load_checkpoint(tmp_path / path / LAST))
    (loader_table, loader_ckpt), (resident_table, resident_ckpt) = runs["loader"], runs["resident"]
    assert loader_table == resident_table
    assert loader_ckpt["state"].history == resident_ckpt["state"].history  # losses and validation tables
    for name, tensor in loader_ckpt["model"].items():
        assert torch.equal(tensor, resident_ckpt["model"][name]), name


def test_auto_chooses_resident_on_a_gpu_where_the_split_fits(tmp_path):
    split = float16_split(tmp_path)
    need = resident_bytes(split, 8)
    assert choose_data_path("auto", CPU, split, 8) == "loader"  # CPUs read the shared memory map
    assert choose_data_path("resident", CPU, split, 8) == "resident"
    assert choose_data_path("loader", torch.device("cuda"), split, 8) == "loader"
    gpu = torch.device("cuda", 0)
    assert choose_data_path("auto", gpu, split, 8, free_bytes=4 * need) == "resident"
    assert choose_data_path("auto", gpu, split, 8, free_bytes=need) == "loader"  # no room left for the rest
    with pytest.raises(ValueError, match="data path"):
        choose_data_path("gpu", CPU, split, 8)


def test_free_memory_is_none_on_a_cpu_and_the_devices_free_bytes_on_a_gpu(tmp_path):
    """The one helper that reads a GPU's free memory (the resident data path's and the shard budget's)."""
    from itrlab.gpu_memory import free_memory_bytes

    assert free_memory_bytes(CPU) is None
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the GPU half needs one")
    gpu = torch.device("cuda", 0)
    free, total = torch.cuda.mem_get_info(gpu)
    assert 0 < free_memory_bytes(gpu) <= total
    split = float16_split(tmp_path)  # a split far smaller than any GPU's free memory goes resident
    assert choose_data_path("auto", gpu, split, 8) == "resident"


def test_bench_train_reports_throughput_wait_share_and_floor(tmp_path, tiny_root, capsys):
    """benchmarks/train.py's logic on the tiny data: every figure present, shares within [0, 1]."""
    import json

    from conftest import benchmark

    bench_cli = benchmark("train").main

    out = tmp_path / "bench.json"
    status = bench_cli(
        [
            "-c",
            "vsepp_synthetic_tiny",
            "--epochs",
            "2",
            "--max-steps",
            "4",
            "--floor-steps",
            "2",
            "--warmup",
            "1",
            "--data-path",
            "resident",
            "--json",
            str(out),
            f"dataset.root={tiny_root}",
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "data path resident" in printed and "pairs/s" in printed and "epoch / floor" in printed
    summary = json.loads(out.read_text())["summary"]
    assert summary["pairs_per_second"] > 0 and summary["floor_pairs_per_second"] > 0
    assert 0 <= summary["data_share"] <= 1 and 0 <= summary["median_step_wait_share"] <= 1
    assert summary["busy_kind"] == "CPU (process time)" and summary["epoch_over_floor"] > 0
    assert (
        bench_cli(
            ["-c", "vsepp_synthetic_tiny", "--precision", "fp16", "train.device=cpu", f"dataset.root={tiny_root}"]
        )
        == 2
    )  # a config error, reported on one line
    assert "fp16 needs a CUDA GPU" in capsys.readouterr().err


def test_prefetcher_yields_the_loaders_batches_and_raises_where_reading_failed(tmp_path):
    """The GPU loader path's read-ahead (itrlab.data.prefetch) changes when batches are read, not which."""
    from itrlab.data.prefetch import DevicePrefetcher

    split = float16_split(tmp_path)
    dataset = CaptionDataset(split, Vocabulary.build(split.captions), max_len=6)
    loader = make_loader(dataset, 4, shuffle=True, seed=7, drop_last=True)
    ahead = list(DevicePrefetcher(loader, CPU, depth=2))
    assert len(ahead) == len(list(loader)) > 2
    for a, b in zip(ahead, loader):
        assert_same_batch(a, b)

    def failing():
        yield from list(loader)[:2]
        raise OSError("features file vanished")

    seen = []
    with pytest.raises(OSError, match="vanished"):
        for batch in DevicePrefetcher(failing(), CPU):
            seen.append(batch)
    assert len(seen) == 2
    for _ in DevicePrefetcher(loader, CPU, depth=1):  # leaving early stops the reader
        break
    with pytest.raises(ValueError, match="depth"):
        DevicePrefetcher(loader, CPU, depth=0)
