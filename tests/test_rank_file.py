"""Per-query test ranks (itrlab.eval.rank_file): written by every training, read back checked, and the same
recalls as the run's test table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from itrlab.eval import dense_score_fn, evaluate, random_embeddings, rank_folds
from itrlab.eval.rank_file import RANKS_FILE, RankFileError, load_ranks, save_ranks
from trained_runs import train, work_in

pytestmark = pytest.mark.usefixtures("one_torch_thread")
KS = (1, 5, 10)


def _recalls(ranks) -> dict[str, float]:
    """Every protocol recall, recomputed from the ranks alone: per fold, then the mean over folds."""
    per_fold = []
    for images, captions in ranks.folds():
        i2t, t2i = ranks.i2t[images], ranks.t2i[captions]
        per_fold.append(
            {f"{way}_R{k}": 100.0 * np.mean(r < k) for way, r in (("i2t", i2t), ("t2i", t2i)) for k in (1, 5, 10)}
        )
    return {key: float(np.mean([fold[key] for fold in per_fold])) for key in per_fold[0]}


def test_two_folds_round_trip_to_the_protocols_table(tmp_path):
    images, captions = random_embeddings(40, 8, captions_per_image=5, seed=3)
    folds = rank_folds(dense_score_fn(images, captions), 40, protocol="5fold", captions_per_image=5)
    written = save_ranks(tmp_path / RANKS_FILE, folds, "5fold")
    read = load_ranks(tmp_path / RANKS_FILE)
    assert read.same_as(written) and read.fold_sizes == (8,) * 5 and read.protocol == "5fold"
    table = evaluate(dense_score_fn(images, captions), 40, protocol="5fold", captions_per_image=5)
    assert _recalls(read) == pytest.approx(
        {f"{w}_R{k}": getattr(table, f"{w}_r{k}") for w in ("i2t", "t2i") for k in (1, 5, 10)}
    )


def _write(path, **arrays) -> None:
    base = {
        "i2t": np.zeros(2, np.int32),
        "t2i": np.zeros(10, np.int32),
        "fold_sizes": np.array([2]),
        "captions_per_image": np.int64(5),
        "protocol": np.array("all"),
    }
    np.savez(path, **{**base, **arrays})


@pytest.mark.parametrize(
    ("arrays", "fault"),
    [
        ({"i2t": np.zeros(3, np.int32)}, "do not fit"),
        ({"t2i": np.full(10, 2, np.int32)}, "outside its fold"),
        ({"i2t": np.full(2, -1, np.int32)}, "outside its fold"),
        ({"i2t": np.zeros(2, np.float32)}, "1-d integer array"),
        ({"captions_per_image": np.int64(0)}, "positive integer"),
        ({"protocol": np.array(3)}, "must be a name"),
        ({"i2t": np.array([{"a": 1}, None], dtype=object)}, "pickled objects, which are never loaded"),
    ],
)
def test_a_file_that_is_not_a_ranks_file_is_refused_with_its_name(tmp_path, arrays, fault):
    path = tmp_path / "bad.npz"
    _write(path, **arrays)
    with pytest.raises(RankFileError, match=fault) as raised:
        load_ranks(path)
    assert str(path) in str(raised.value)


def test_a_run_writes_and_logs_its_test_ranks(tmp_path, monkeypatch):
    work_in(monkeypatch, tmp_path)
    run_id = train("vsepp_synthetic_tiny", tmp_path / "run", f"dataset.root={tmp_path / 'tiny'}")
    ranks = load_ranks(tmp_path / "run" / RANKS_FILE)
    table = json.loads((tmp_path / "run" / "test_recall.json").read_text())
    assert ranks.n_images == table["n_images"] and ranks.protocol == table["protocol"]
    recomputed = _recalls(ranks)
    assert recomputed == pytest.approx({key: table[key.replace("R", "r")] for key in recomputed})
    from mlflow import MlflowClient

    artifacts = [item.path for item in MlflowClient().list_artifacts(run_id)]
    assert RANKS_FILE in artifacts
