"""itrlab.eval: ranks, recall tables and protocols (SCAN/VSE++ evaluation)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import benchmark
from itrlab.errors import UserInputError
from itrlab.eval import (
    PROTOCOLS,
    ProtocolError,
    RecallTable,
    compute_ranks,
    dense_score_fn,
    evaluate,
    evaluate_embeddings,
    get_protocol,
    random_embeddings,
    reference_evaluate,
    reference_ranks,
)
from itrlab.eval.ranking import _counts_and_sum

# Hand-worked example: 3 images, 15 captions; captions 0-4 belong to image 0, 5-9 to image 1,
# 10-14 to image 2. Tie rule: rank = number of negatives scoring at least as high.
HAND_S = torch.tensor(
    [
        # own captions (0-4)          image 1's (5-9)              image 2's (10-14)
        [0.5, 0.4, 0.9, 0.3, 0.2, 0.1, 0.1, 0.95, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0],  # image 0
        [0.8, 0.2, 0.2, 0.2, 0.2, 0.8, 0.6, 0.5, 0.4, 0.3, 0.1, 0.1, 0.85, 0.9, 0.1],  # image 1
        [0.1, 0.5, 0.1, 0.1, 0.3, 0.1, 0.7, 0.6, 0.1, 0.3, 0.7, 0.6, 0.5, 0.4, 0.3],  # image 2
    ]
)
# i2t (best own score; other images' captions at or above it):
#   image 0: best 0.9 (caption 2); caption 7 (0.95)                            -> rank 1
#   image 1: best 0.8 (caption 5); 0 (0.8, a tie counts), 12 (0.85), 13 (0.9)  -> rank 3
#   image 2: best 0.7 (caption 10); caption 6 ties at 0.7                      -> rank 1
HAND_I2T = [1, 3, 1]
# t2i (column j: own image's score vs the other two images, ties count):
#   c0 0.5 <= 0.8(i1) -> 1   c1 0.4 <= 0.5(i2) -> 1   c2 0.9 -> 0   c3 0.3 -> 0
#   c4 0.2: i1 ties 0.2, i2 0.3 -> 2                  c5 0.8 -> 0   c6 0.6 <= 0.7(i2) -> 1
#   c7 0.5 <= 0.95(i0), 0.6(i2) -> 2   c8 0.4 -> 0    c9 0.3: i2 ties -> 1
#   c10 0.7 -> 0   c11 0.6 -> 0   c12 0.5 <= 0.85(i1) -> 1   c13 0.4 <= 0.9(i1) -> 1   c14 0.3 -> 0
HAND_T2I = [1, 1, 0, 0, 2, 0, 1, 2, 0, 1, 0, 0, 1, 1, 0]
# i2t: R@1 = 0; R@5 = R@10 = 100; ranks 1, 3, 1: median 1 -> medr 2; mean 5/3 -> meanr 1 + 5/3.
# t2i: 7 of 15 at rank 0 -> R@1 = 46.67; R@5 = R@10 = 100; sorted ranks 0 x7, 1 x6, 2 x2:
#      median 1 -> medr 2; mean 10/15 -> meanr 1 + 10/15.
# rsum = 0 + 100 + 100 + 140/3 + 100 + 100 = 400 + 140/3.
# MD: positives 2.3 + 2.6 + 2.5 = 7.4 over 15 pairs; negatives 1.35 + 3.65 + 2.9 = 7.9 over 30:
#     MD = 7.4/15 - 7.9/30 = 0.23.


def _matrix_score_fn(S: torch.Tensor, calls: list | None = None):
    def score(image_slice: slice, caption_slice: slice) -> torch.Tensor:
        if calls is not None:
            calls.append((image_slice, caption_slice))
        return S[image_slice, caption_slice]

    return score


@pytest.mark.parametrize("chunk", [1, 2, 3, 512])
def test_hand_worked_example(chunk):
    ranks = compute_ranks(_matrix_score_fn(HAND_S), 3, captions_per_image=5, image_chunk=chunk)
    assert ranks.i2t.tolist() == HAND_I2T
    assert ranks.t2i.tolist() == HAND_T2I
    table = evaluate(_matrix_score_fn(HAND_S), 3, image_chunk=chunk)
    assert (table.i2t_r1, table.i2t_r5, table.i2t_r10) == (0.0, 100.0, 100.0)
    assert (table.t2i_r1, table.t2i_r5, table.t2i_r10) == (pytest.approx(700 / 15), 100.0, 100.0)
    assert (table.i2t_medr, table.t2i_medr) == (2.0, 2.0)
    assert table.i2t_meanr == pytest.approx(1 + 5 / 3, abs=1e-12)
    assert table.t2i_meanr == pytest.approx(1 + 10 / 15, abs=1e-12)
    assert table.rsum == pytest.approx(400 + 140 / 3, abs=1e-9)
    assert table.md == pytest.approx(0.23, abs=1e-6)
    assert (table.protocol, table.n_images, table.n_folds) == ("all", 3, 1)


@pytest.mark.parametrize(
    "n_images,dim,cpi,chunk",
    [(1, 4, 5, 1), (7, 8, 5, 3), (50, 16, 5, 7), (64, 8, 3, 64), (233, 32, 5, 100), (90, 12, 1, 1000)],
)
def test_chunked_matches_reference(n_images, dim, cpi, chunk):
    images, captions = random_embeddings(n_images, dim, cpi, seed=n_images)
    chunked = compute_ranks(dense_score_fn(images, captions), n_images, cpi, chunk)
    reference = reference_ranks(images, captions, cpi)
    assert chunked.same_as(reference)  # ranks and MD sums, to the bit
    assert chunked.i2t.dtype == np.int64 and chunked.t2i.shape == (cpi * n_images,)


def test_chunked_matches_reference_with_many_ties():
    rng = np.random.default_rng(3)  # +-1/4 sign vectors: dot products take 17 values
    images = (rng.integers(0, 2, (40, 16)) * 0.5 - 0.25).astype(np.float32)
    captions = (rng.integers(0, 2, (200, 16)) * 0.5 - 0.25).astype(np.float32)
    for chunk in (6, 40):
        assert compute_ranks(dense_score_fn(images, captions), 40, 5, chunk).same_as(reference_ranks(images, captions))
    for protocol in ("all", "5fold"):
        assert evaluate_embeddings(images, captions, protocol) == reference_evaluate(images, captions, protocol)


def test_torch_reduction_path_matches_numpy_path():
    block = torch.from_numpy(np.random.default_rng(0).integers(0, 5, (6, 9)).astype(np.float32))
    rows, cols = block[:, 0].clone(), block[0].clone()
    via_numpy = _counts_and_sum(block, rows, cols, use_numpy=True)
    via_torch = _counts_and_sum(block, rows, cols, use_numpy=False)
    for a, b in zip(via_numpy[:2], via_torch[:2]):
        np.testing.assert_array_equal(a, b)
    assert via_numpy[2] == via_torch[2]


def test_score_fn_called_per_block_and_each_entry_once():
    n_images, cpi, chunk = 100, 5, 30
    images, captions = random_embeddings(n_images, 8, cpi)
    S = dense_score_fn(images, captions)(slice(0, n_images), slice(0, cpi * n_images))
    calls: list = []
    compute_ranks(_matrix_score_fn(S, calls), n_images, cpi, chunk)
    assert len(calls) <= 3 * math.ceil(n_images / chunk)
    covered = torch.zeros(S.shape, dtype=torch.int64)
    for image_slice, caption_slice in calls:
        covered[image_slice, caption_slice] += 1
    assert bool((covered == 1).all())


def test_fold_tables_are_means_of_per_fold_tables():
    n_images, cpi = 60, 5
    images, captions = random_embeddings(n_images, 8, cpi, seed=7)
    table = evaluate_embeddings(images, captions, "5fold", cpi)
    size = n_images // 5
    folds = [
        evaluate_embeddings(
            images[f * size : (f + 1) * size], captions[cpi * f * size : cpi * (f + 1) * size], "all", cpi
        )
        for f in range(5)
    ]
    assert (table.protocol, table.n_images, table.n_folds) == ("5fold", 60, 5)
    for name, value in table.metrics().items():
        field = {
            "i2t_R1": "i2t_r1",
            "i2t_R5": "i2t_r5",
            "i2t_R10": "i2t_r10",
            "t2i_R1": "t2i_r1",
            "t2i_R5": "t2i_r5",
            "t2i_R10": "t2i_r10",
        }.get(name, name)
        assert value == pytest.approx(np.mean([getattr(f, field) for f in folds]), abs=1e-12), name
    assert table.rsum == pytest.approx(np.mean([f.rsum for f in folds]), abs=1e-12)
    assert table == reference_evaluate(images, captions, "5fold", cpi)


def test_coco_1k_is_5fold_on_5000_images():
    images, captions = random_embeddings(5000, 4, seed=1)
    coco = evaluate_embeddings(images, captions, "coco_1k")
    assert coco.n_folds == 5 and coco.protocol == "coco_1k"
    assert coco.metrics() == evaluate_embeddings(images, captions, "5fold").metrics()


@pytest.mark.parametrize(
    "protocol,bad,good",
    [
        ("coco_1k", [1000, 4999, 5005], [5000]),
        ("coco_5k", [1000, 4999], [5000]),
        ("f30k_1k", [999, 5000], [1000]),
        ("5fold", [0, 4, 12], [5, 60]),
        ("all", [0], [1, 7]),
    ],
)
def test_protocol_size_checks(protocol, bad, good):
    spec = get_protocol(protocol)
    for n_images in good:
        spec.check(n_images)
    for n_images in bad:
        with pytest.raises(ValueError, match=f"'{protocol}'.*{n_images} images.*needs"):
            spec.check(n_images)
    with pytest.raises(ValueError):
        evaluate(_matrix_score_fn(HAND_S), 3, protocol="coco_1k")


def test_unknown_protocol_lists_names():
    with pytest.raises(ValueError, match="known protocols: all, f30k_1k, f8k_1k, coco_5k, coco_1k, 5fold") as err:
        get_protocol("coco1k")
    assert isinstance(err.value, ProtocolError) and isinstance(err.value, UserInputError)
    assert set(PROTOCOLS) == {"all", "f30k_1k", "f8k_1k", "coco_5k", "coco_1k", "5fold"}
    assert [(s, e) for s, e in get_protocol("5fold").folds(10)] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]


def test_md_on_a_constructed_case():
    # 2 images, 2 captions each: positives 0.9, 0.7 / 0.8, 0.6 (mean 0.75); negatives 0.1, 0.3 /
    # 0.2, 0.4 (mean 0.25): MD = 0.5.
    S = torch.tensor([[0.9, 0.7, 0.1, 0.3], [0.2, 0.4, 0.8, 0.6]], dtype=torch.float64)
    ranks = compute_ranks(_matrix_score_fn(S), 2, captions_per_image=2)
    assert (ranks.positive_sum, ranks.n_positive, ranks.n_negative) == (pytest.approx(3.0), 4, 4)
    assert ranks.md == pytest.approx(0.5)
    # 10 images, 1 caption each, "5fold": fold f holds images 2f, 2f+1 with positives 2f + 1 and
    # in-fold negatives 0, so its MD is 2f + 1; cross-fold entries (100) are never looked at.
    # The protocol's MD is the mean over folds, (1 + 3 + 5 + 7 + 9) / 5 = 5.
    big = torch.full((10, 10), 100.0)
    for f in range(5):
        big[2 * f : 2 * f + 2, 2 * f : 2 * f + 2] = torch.eye(2) * (2 * f + 1)
    assert evaluate(_matrix_score_fn(big), 10, "5fold", captions_per_image=1, image_chunk=1).md == 5.0
    assert evaluate(_matrix_score_fn(big), 10, "all", captions_per_image=1).md == pytest.approx(
        25 * 2 / 10 - (100 * 80) / 90
    )
    assert math.isnan(compute_ranks(_matrix_score_fn(S[:1, :2]), 1, captions_per_image=2).md)


def test_table_serialisation():
    images, captions = random_embeddings(20, 8)
    table = evaluate_embeddings(images, captions, "5fold")
    metrics = table.metrics(prefix="test_")
    assert len(metrics) == 12 and all("@" not in key and key.startswith("test_") for key in metrics)
    assert {"test_i2t_R1", "test_t2i_R10", "test_rsum", "test_md", "test_t2i_meanr"} <= set(metrics)
    data = json.loads(json.dumps(table.to_dict()))
    assert data["protocol"] == "5fold" and data["n_images"] == 20
    assert RecallTable.from_dict(data) == table
    columns = table.columns()
    assert columns["direction"] == ["i2t", "t2i"] and columns["R1"] == [table.i2t_r1, table.t2i_r1]
    assert all(len(v) == 2 for v in columns.values()) and columns["protocol"] == ["5fold"] * 2
    assert "5fold" in table.format() and "5fold" in table.to_markdown() and "R@10" in table.format()
    with pytest.raises(ValueError, match="rsum"):
        RecallTable.from_dict({k: v for k, v in data.items() if k != "rsum"})


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="shape"):
        compute_ranks(lambda i, c: torch.zeros(1, 1), 3)
    nan_S = HAND_S.clone()
    nan_S[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        compute_ranks(_matrix_score_fn(nan_S), 3)
    images, captions = random_embeddings(4, 8)
    with pytest.raises(ValueError, match="captions"):
        evaluate_embeddings(images, captions[:-1])


def test_dense_score_fn_normalize_and_torch_inputs():
    generator = torch.Generator().manual_seed(0)
    images, captions = torch.randn(6, 5, generator=generator), torch.randn(30, 5, generator=generator)
    block = dense_score_fn(images, captions, normalize=True)(slice(0, 6), slice(0, 30))
    assert block.shape == (6, 30) and float(block.abs().max()) <= 1 + 1e-6
    table = evaluate_embeddings(images, captions)  # off-grid floats: the MD sums may round differently
    reference = reference_evaluate(images.numpy(), captions.numpy())
    assert table.md == pytest.approx(reference.md, abs=1e-6)
    assert {k: v for k, v in table.to_dict().items() if k != "md"} == {
        k: v for k, v in reference.to_dict().items() if k != "md"
    }


@pytest.mark.e2e  # the job measures each evaluation in a Python subprocess of its own
def test_bench_job_smoke(capsys):
    module = benchmark("eval")
    assert module.main(["--images", "30", "--dim", "8", "--repeats", "1", "--protocol", "5fold"]) == 0
    out = capsys.readouterr().out
    assert "identical ranks: True" in out and "speed-up" in out and "VmHWM" in out


def test_bench_job_interaction_smoke(capsys, tmp_path):
    """--interaction: the benchmark's method built through the registry, its sharded scores equal to the loop's."""
    module = benchmark("eval")
    out_json = tmp_path / "interaction.json"
    assert (
        module.main(
            [
                "--interaction",
                "--images",
                "20",
                "--regions",
                "3",
                "--dim",
                "8",
                "--sim-dim",
                "4",
                "--shard-elements",
                "64",
                "--threads",
                "1",
                "--json",
                str(out_json),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "d=8, sim_dim=4, λ=9" in out and "shard budget 64 elements" in out and "scores allclose" in out
    assert json.loads(out_json.read_text())["allclose"] is True
    assert module.main(["--interaction", "--images", "20", "--dim", "8", "--sim-dim", "0"]) == 2  # refused: one line
    assert "method.sim_dim" in capsys.readouterr().err


def test_constant_scores_give_the_worst_ranks_not_perfect_recall():
    """A collapsed model (every score equal) must not look perfect: ties count against it."""
    n, cpi = 20, 5
    table = evaluate(_matrix_score_fn(torch.zeros(n, cpi * n)), n, captions_per_image=cpi)
    assert table.rsum == 0.0
    ranks = compute_ranks(_matrix_score_fn(torch.zeros(n, cpi * n)), n, cpi, image_chunk=7)
    assert ranks.i2t.tolist() == [cpi * (n - 1)] * n and ranks.t2i.tolist() == [n - 1] * (cpi * n)
