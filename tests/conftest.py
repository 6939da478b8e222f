"""Shared fixtures: the repository's configs, tiny precomp folders, and helpers to run the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True, scope="session")
def _repo_configs():
    """Tests read the repository's configs wherever they run from."""
    previous = os.environ.get("ITRLAB_CONFIG_DIR")
    os.environ["ITRLAB_CONFIG_DIR"] = str(REPO / "configs")
    yield
    if previous is None:
        os.environ.pop("ITRLAB_CONFIG_DIR", None)
    else:
        os.environ["ITRLAB_CONFIG_DIR"] = previous


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``):
    tiny models gain nothing from a second thread, and on a busy 2-core machine two OpenMP threads
    spin-wait on each other (measured: a small run took 2.9 s with one thread, 58 s with two)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A test's own working folder with its own SQLite MLflow store (``mlflow.db`` there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> Path:
    """Where a module's runs generate (once) and share the tiny synthetic dataset."""
    return tmp_path_factory.mktemp("data") / "tiny"


def tiny_config(root: Path, *overrides: str):
    """VSE++ on the tiny synthetic data under ``root``, MLflow off, with ``overrides``."""
    from itrlab.assembly import load_experiment

    return load_experiment("vsepp_synthetic_tiny", [f"dataset.root={root}", "tracking.enabled=false", *overrides])


def write_precomp(root: Path, sizes: dict[str, int], regions: int = 4, dim: int = 8, cpi: int = 5, seed: int = 0) -> Path:
    """A small, valid folder in the SCAN precomp layout with random features and simple captions."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    words = ["dog", "cat", "car", "tree", "red", "blue", "man", "park"]
    for split, n in sizes.items():
        np.save(root / f"{split}_ims.npy", rng.standard_normal((n, regions, dim)).astype(np.float32))
        lines = [" ".join(rng.choice(words, size=4)) for _ in range(n * cpi)]
        (root / f"{split}_caps.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def precomp_dir(tmp_path: Path) -> Path:
    return write_precomp(tmp_path / "precomp", {"train": 40, "dev": 10, "test": 10})
