"""Shared fixtures: the repository's configs, tiny precomp folders, and helpers to run the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from itrlab import threads

# Before any test imports torch (itrlab.threads): OpenMP's threads sleep when they wait, and the
# pytest-xdist workers, which share the machine, each take their share of its CPUs as torch threads.
threads.configure_env()
os.environ.setdefault("OMP_NUM_THREADS", str(threads.cpu_share(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))))

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

    previous, previous_env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"  # what run_experiment's thread policy then keeps (itrlab.threads)
    yield
    torch.set_num_threads(previous)
    if previous_env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = previous_env


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


def interrupt_after_shards(monkeypatch, n: int):
    """Make the extraction job raise KeyboardInterrupt (Ctrl-C) when it would write its ``n+1``-th shard.

    Returns (the names of the shards written, a function that makes the job write normally again)."""
    from itrlab.extract import job

    written: list[str] = []
    real_write = job.write_shard

    def interrupting(work_dir, chunk, result):
        if len(written) == n:
            raise KeyboardInterrupt
        real_write(work_dir, chunk, result)
        written.append(chunk.name)

    monkeypatch.setattr(job, "write_shard", interrupting)
    return written, lambda: monkeypatch.setattr(job, "write_shard", real_write)
